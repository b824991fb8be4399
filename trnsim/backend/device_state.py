"""Per-process state of the simulated ``neuron`` devices: the target, the current device, the simulated clock,
fallback counters, the RNG and the options read from the environment.

A process sees every logical NeuronCore of the simulated instance (``torch.neuron.device_count()``), as a process
on a real instance does; the index it picks (``torch.neuron.set_device(LOCAL_RANK)``) is the core its collectives
run on.  The devices of one process share one simulated clock, one memory account and one generator: a process
that drives several indices runs their ops on one in-order queue (a rank per process is the modelled case)."""

from __future__ import annotations

import os

import torch

from ..targets import get_target

DEVICE_TYPE = "neuron"
# the instance (scale-up domain) each target's devices and ranks are placed on, unless TRNSIM_TOPOLOGY names another
DEFAULT_TOPOLOGY = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "trn3-gen1-ultraserver"}


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
        self.current = 0                  # torch.neuron.current_device()
        self.selected = False             # set_device was called (the rank chose its core)

    def reset_clock(self):
        self.now_ns = 0.0


STATE = DeviceState()
