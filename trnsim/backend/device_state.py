"""Per-process state of the one simulated logical NeuronCore ``neuron:0``: the target, the simulated clock,
fallback counters, the RNG and the options read from the environment."""

from __future__ import annotations

import os

import torch

from ..targets import get_target

DEVICE_TYPE = "neuron"


def _lnc(target):
    env = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    if not env:
        return target.default_lnc
    lnc = int(env)
    if lnc not in target.allowed_lnc:
        raise ValueError(f"NEURON_LOGICAL_NC_CONFIG={env}: {target.name} allows LNC in {target.allowed_lnc}")
    return lnc


class DeviceState:
    def __init__(self):
        self.target = get_target()
        self.lnc = _lnc(self.target)
        self.now_ns = 0.0                 # simulated device clock: eager ops run back to back
        self.fallback_counts = {}         # aten op name -> calls that ran on the CPU
        self.warned = set()
        self.fallback_mode = os.environ.get("TORCHNEURON_FALLBACK", "warn").strip().lower() or "warn"
        self.generator = torch.Generator()   # torch.Generator(device="neuron") cannot be made from Python
        self.generator.manual_seed(torch.initial_seed())
        self.profilers = []               # active profile_torch() recorders
        self.native_counts = {}

    def reset_clock(self):
        self.now_ns = 0.0


STATE = DeviceState()


def reload_target():
    """Re-read NEURON_PLATFORM_TARGET_OVERRIDE / NEURON_LOGICAL_NC_CONFIG (tests change them)."""
    STATE.target = get_target()
    STATE.lnc = _lnc(STATE.target)
    from . import tensor
    tensor.clear_charges()
    from .memory import MEMORY
    MEMORY._cap_key = None
