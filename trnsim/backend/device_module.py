"""``torch.neuron``: the device module of the simulated NeuronCore (CUDA-style API)."""

from __future__ import annotations

import contextlib
import os as _os
import random as _random
import types

import torch

from ..targets import get_target
from . import tensor
from .device_state import STATE, _lnc
from .memory import MEMORY


def is_available():
    return True


def is_initialized():
    return True


def _lazy_init():
    pass


def _is_in_bad_fork():
    return False


def instance_topology():
    """The scale-up domain one process's devices belong to: ``TRNSIM_TOPOLOGY`` (default by target:
    trn1.32xlarge, trn2.48xlarge, trn3-gen1-ultraserver), at the process's LNC."""
    from ..collectives import get_topology
    from .device_state import DEFAULT_TOPOLOGY
    from .. import config
    name = config.topology or DEFAULT_TOPOLOGY[STATE.target.name]
    topo = get_topology(name)
    return topo.with_lnc(STATE.lnc) if STATE.lnc in topo.target.allowed_lnc else topo


def device_count():
    """The logical NeuronCores of the simulated instance, as on hardware: chips x physical cores per chip / LNC
    (trn2.48xlarge: 16 chips x 8 / 2 = 64 at LNC=2, 128 at LNC=1; trn1.32xlarge: 16 x 2 = 32), from the topology's
    chip count (trnsim/collectives/topology.py, with its sources) and the target's cores per chip (targets.py).
    trn3's default topology is a whole Gen1 UltraServer (one NeuronLink domain of 64 chips): 256 at LNC=2."""
    from .. import config
    key = (STATE.target.name, STATE.lnc, config.topology)
    n = _COUNT.get(key)
    if n is None:
        t = instance_topology()
        n = _COUNT[key] = t.chips_per_domain * t.logical_cores_per_chip
    return n


_COUNT = {}


def current_device():
    return STATE.current


def _index(device):
    """The device index ``device`` names (``None``, ``"neuron"`` and an index-less device: the current one),
    checked against :func:`device_count`."""
    if device is None:
        return STATE.current
    if isinstance(device, int):
        i = device
    else:
        d = torch.device(device)
        if d.type != "neuron":
            raise ValueError(f"expected a neuron device, got {d}")
        i = STATE.current if d.index is None else d.index
    n = device_count()
    if not 0 <= i < n:
        raise RuntimeError(f"neuron:{i} does not exist: the simulated {STATE.target.marketing_name} instance has "
                           f"{n} logical NeuronCores (neuron:0 to neuron:{n - 1}, LNC={STATE.lnc}; "
                           "torch.neuron.device_count())")
    return i


def set_device(device):
    """Make ``device`` the current device (as ``torch.cuda.set_device``): factories without an index and
    ``torch.device("neuron")`` then mean it, and a rank's collectives run on its simulated core."""
    if isinstance(device, int) and device < 0:      # torch passes -1 for "leave it"
        return
    i = _index(device)
    STATE.selected = True
    if i != STATE.current:
        _select(i)
        STATE.current = i


def _select(i):
    """New tensors go to ``neuron:i``; while no device tensor is alive it becomes the home device (the usual case: a
    rank picks its core before making tensors), else the process holds several indices (``tensor.MULTI``)."""
    dev = torch.device(tensor.DEVICE.type, i)
    if not MEMORY._live:
        tensor.NeuronTensor._dev = dev
        tensor.MULTI = False
    elif dev != tensor.NeuronTensor._dev:
        tensor.MULTI = True
    tensor.CURRENT = dev


class device(contextlib.ContextDecorator):
    """``with torch.neuron.device(i):`` makes ``i`` current inside the block (``None`` or -1: unchanged)."""

    def __init__(self, device):
        self.idx = None if device is None or (isinstance(device, int) and device < 0) else _index(device)
        self.prev = None

    def __enter__(self):
        self.prev = STATE.current
        if self.idx is not None:
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx is not None:
            set_device(self.prev)
        return False


def get_device_name(device=None):
    _index(device)
    return f"{STATE.target.marketing_name} (simulated)"


def get_device_capability(device=None):
    return (STATE.target.nc_version, 0)


def get_device_properties(device=None):
    return types.SimpleNamespace(name=get_device_name(device), total_memory=MEMORY.capacity,
                                 target=STATE.target.name, lnc=STATE.lnc)


def synchronize(device=None):
    """Eager ops complete in program order on the simulated clock: nothing to wait for."""


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    return True


# -- RNG ------------------------------------------------------------------------------------------
def manual_seed(seed):
    STATE.generator.manual_seed(int(seed))


manual_seed_all = manual_seed


def seed():
    s = _random.SystemRandom().randrange(2 ** 63)
    STATE.generator.manual_seed(s)
    return s


seed_all = seed


def initial_seed():
    return STATE.generator.initial_seed()


def get_rng_state(device=None):
    return STATE.generator.get_state()


def set_rng_state(new_state, device=None):
    STATE.generator.set_state(new_state)


def get_rng_state_all():
    """One state per device; the devices of a process share one generator (see ``device_state``)."""
    return [get_rng_state()] * device_count()


def set_rng_state_all(states):
    set_rng_state(states[STATE.current] if len(states) > STATE.current else states[0])


def default_generator():
    return STATE.generator


# -- memory ---------------------------------------------------------------------------------------
def memory_allocated(device=None):
    return MEMORY.allocated


def max_memory_allocated(device=None):
    return MEMORY.peak


memory_reserved = memory_allocated
max_memory_reserved = max_memory_allocated


def reset_peak_memory_stats(device=None):
    MEMORY.peak = MEMORY.allocated


reset_max_memory_allocated = reset_peak_memory_stats


def memory_stats(device=None):
    return MEMORY.stats()


def mem_get_info(device=None):
    return MEMORY.capacity - MEMORY.allocated, MEMORY.capacity


def set_per_process_memory_fraction(fraction, device=None):
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    MEMORY.fraction = float(fraction)
    MEMORY._cap_key = None


def reload_target():
    """Re-read NEURON_PLATFORM_TARGET_OVERRIDE / NEURON_LOGICAL_NC_CONFIG (tests change them) and drop what was
    computed for the previous target: the per-shape op charges and the memory capacity.  (Here, not in
    ``device_state``, which the modules holding those caches import.)"""
    STATE.target = get_target()
    STATE.lnc = _lnc(STATE.target)
    tensor.clear_charges()
    MEMORY._cap_key = None


def empty_cache():
    pass


# -- streams and events (simulated time) ---------------------------------------------------------
class Event:
    """Records the simulated device clock; ``elapsed_time`` is in simulated milliseconds."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._ns = None

    def record(self, stream=None):
        self._ns = STATE.now_ns

    def query(self):
        return True

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def elapsed_time(self, end_event):
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("elapsed_time: both events must have been recorded")
        return (end_event._ns - self._ns) / 1e6

    def __repr__(self):
        return f"<torch.neuron.Event recorded_at_ns={self._ns}>"


class Stream:
    """The device runs eager ops in order on one simulated queue; every Stream maps onto it."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device("neuron", _index(device))
        self.priority = priority

    def query(self):
        return True

    def synchronize(self):
        pass

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __eq__(self, other):
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self):
        return hash(("neuron-stream", self.device))


_DEFAULT_STREAM = None


def current_stream(device=None):
    global _DEFAULT_STREAM
    if _DEFAULT_STREAM is None:
        _DEFAULT_STREAM = Stream()
    return _DEFAULT_STREAM


default_stream = current_stream


@contextlib.contextmanager
def stream(s=None):
    yield s


def set_stream(s):
    pass


def elapsed_ns():
    """Simulated device time since the process started (or since the last :func:`reset_simulated_time`)."""
    return STATE.now_ns


def build_module():
    """A module object holding this API (``torch.neuron``)."""
    mod = types.ModuleType("torch.neuron", __doc__)
    names = [n for n in globals() if not n.startswith("__") and n not in ("annotations", "build_module",
                                                                             "contextlib", "types", "torch",
                                                                             "STATE", "MEMORY")]
    for n in names:
        setattr(mod, n, globals()[n])
    return mod
