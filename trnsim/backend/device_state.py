"""Per-process state of the simulated ``neuron`` devices: the target, the current device, the simulated clock,
fallback counters, the RNG and the options read from the environment.

A process sees every logical NeuronCore of the simulated instance (``torch.neuron.device_count()``), as a process
on a real instance does; the index it picks (``torch.neuron.set_device(LOCAL_RANK)``) is the core its collectives
run on.  The devices of one process share one simulated clock, one memory account and one generator: a process
that drives several indices runs their ops on one in-order queue (a rank per process is the modelled case)."""

from __future__ import annotations

import os

import torch

from .. import config
from ..targets import get_target

DEVICE_TYPE = "neuron"
# the instance (scale-up domain) each target's devices and ranks are placed on, unless TRNSIM_TOPOLOGY names another
DEFAULT_TOPOLOGY = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "trn3-gen1-ultraserver"}


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
        self.current = 0                  # torch.neuron.current_device()
        self.selected = False             # set_device was called (the rank chose its core)


STATE = DeviceState()
