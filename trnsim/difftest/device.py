"""Which device a recording ran on, the software versions, and host copies of tensors.

Imports torch and numpy only.  The simulator is looked up in ``sys.modules``, never imported: if the simulated
``neuron`` device is in use, its package is already loaded (registering the device loads it).

How the device kind is detected, from the devices of the tensors recorded (all of them; the first non-CPU one
decides):

- ``neuron-sim``: a tensor on device type ``neuron`` and trnsim's backend is loaded and registered in this process
  (``sys.modules["trnsim.backend"].is_registered()``), i.e. PrivateUse1 ``neuron`` is trnsim's simulated device;
- ``neuron``: a tensor on device type ``neuron`` otherwise (the real Neuron PyTorch backend, ``torch_neuronx``);
- ``neuron-xla``: a tensor on device type ``xla`` with ``torch_neuronx`` imported (the XLA-based Neuron backend);
- another device type (``xla``, ``cuda``, ...): that type;
- ``cpu``: every tensor on the CPU.

NKI kernel calls count too: a kernel run by trnsim's ``nki.simulate`` is ``neuron-sim``; one run by the real
``neuronxcc`` (through :func:`trnsim.difftest.record_kernel_call`) is ``neuron``.
"""

from __future__ import annotations

import os
import platform
import sys

import numpy as np
import torch

from .. import config


def simulated_backend():
    """trnsim's backend module if the simulated ``neuron`` device is registered in this process, else ``None``."""
    mod = sys.modules.get("trnsim.backend")
    if mod is None or not hasattr(mod, "is_registered"):
        return None
    try:
        return mod if mod.is_registered() else None
    except Exception:
        return None


def device_kind(device_type: str) -> str:
    """The kind of device a tensor of ``device_type`` lives on (see the module doc)."""
    if device_type == "cpu":
        return "cpu"
    if device_type == "neuron":
        return "neuron-sim" if simulated_backend() is not None else "neuron"
    if device_type == "xla" and "torch_neuronx" in sys.modules:
        return "neuron-xla"
    return device_type


def is_simulated_tensor(t) -> bool:
    """A tensor of trnsim's simulated device (its data is a CPU payload ``t._p``)."""
    return (t.device.type == "neuron" and type(t).__module__.startswith("trnsim.backend")
            and isinstance(getattr(t, "_p", None), torch.Tensor))


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy of ``t``'s values, detached.  A simulated ``neuron`` tensor is read from its CPU
    payload, so recording issues no device op and adds no simulated time."""
    if is_simulated_tensor(t):
        src = t._p
    elif t.device.type == "cpu":
        src = t
    else:
        src = t.detach().to("cpu")
    with torch.no_grad():
        out = src.detach().clone(memory_format=torch.contiguous_format)
    if out.is_conj():
        out = out.resolve_conj()
    if out.is_neg():
        out = out.resolve_neg()
    return out


def simulated_target():
    """The simulated target's name and logical-core size when the simulated device is registered."""
    if simulated_backend() is None:
        return None
    st = sys.modules.get("trnsim.backend.device_state")
    if st is None:
        return None
    return {"name": st.STATE.target.name, "lnc": st.STATE.lnc, "simulated": True}


def hardware_target():
    """What the host says about a real Trainium: the instance type (DMI product name, on EC2) and AWS's
    ``NEURON_PLATFORM_TARGET_OVERRIDE``; ``None`` when neither is known."""
    info = {}
    try:
        with open("/sys/devices/virtual/dmi/id/product_name") as f:
            name = f.read().strip()
        if name.startswith(("trn", "inf")):
            info["instance_type"] = name
    except OSError:
        pass
    env = config.platform_target
    if env:
        info["name"] = env
    if info:
        info["simulated"] = False
    return info or None


def versions() -> dict:
    """Versions of the software that produced the numbers (only modules already imported are asked)."""
    v = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    trn = sys.modules.get("trnsim")
    if trn is not None:
        v["trnsim"] = getattr(trn, "__version__", None)
    for name in ("torch_neuronx", "neuronxcc", "ml_dtypes", "safetensors"):
        m = sys.modules.get(name)
        if m is not None and getattr(m, "__version__", None):
            v[name] = str(m.__version__)
    return v


def dist_rank():
    """``(rank, world_size)`` under an initialised torch.distributed, else from ``RANK``/``WORLD_SIZE``, else
    ``(0, 1)``."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1
