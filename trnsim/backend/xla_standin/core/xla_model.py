"""``torch_xla.core.xla_model`` as trnsim's stand-in provides it: the device calls NKI tutorials make.

``xla_device()`` is the simulated ``neuron`` device; ``mark_step()`` has nothing to flush (the device runs each op
when it is called); ``wait_device_ops()`` synchronizes the device; the ordinal and world size come from
``torch.distributed`` when a process group is up (else one process).
"""

from __future__ import annotations

import torch


def xla_device(n=None, devkind=None):
    """The simulated device (``neuron`` or ``neuron:n``)."""
    import trnsim.backend  # noqa: F401  (registers the neuron device)
    return torch.device("neuron") if n is None else torch.device("neuron", int(n))


def mark_step(wait=False):
    """Nothing to do on an eager device (every op already ran); ``wait=True`` synchronizes."""
    if wait:
        wait_device_ops()


def wait_device_ops(devices=None):
    import trnsim.backend  # noqa: F401
    torch.neuron.synchronize()


def _dist():
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def get_ordinal(defval=0):
    d = _dist()
    return d.get_rank() if d else defval


def xrt_world_size(defval=1):
    d = _dist()
    return d.get_world_size() if d else defval


def is_master_ordinal(local=True):
    return get_ordinal() == 0


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"torch_xla.core.xla_model.{name} is not available in trnsim's torch_xla stand-in "
                         "(it provides xla_device, mark_step, wait_device_ops, get_ordinal, xrt_world_size, "
                         "is_master_ordinal)")
