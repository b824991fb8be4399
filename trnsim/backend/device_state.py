"""Per-process state of the one simulated logical NeuronCore ``neuron:0``: the target, the simulated clock,
fallback counters, the RNG and the options read from the environment."""

from __future__ import annotations

import os

import torch

from .. import config
from ..targets import get_target

DEVICE_TYPE = "neuron"


def _lnc(target):
    lnc = config.logical_nc_config
    if lnc is None:
        return target.default_lnc
    if lnc not in target.allowed_lnc:
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG={lnc}: {target.name} allows LNC in {target.allowed_lnc}")
    return lnc


class DeviceState:
    def __init__(self):
        self.target = get_target()
        self.lnc = _lnc(self.target)
        self.now_ns = 0.0                 # simulated device clock: eager ops run back to back
        self.fallback_counts = {}         # aten op name -> calls that ran on the CPU
        self.warned = set()
        self.fallback_mode = config.fallback
        self.generator = torch.Generator()   # torch.Generator(device="neuron") cannot be made from Python
        self.generator.manual_seed(torch.initial_seed())
        self.profilers = []               # active profile_torch() recorders
        self.native_counts = {}


STATE = DeviceState()
