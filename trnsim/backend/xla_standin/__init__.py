"""trnsim's stand-in for ``torch_xla`` under ``TORCHNEURON_TARGET=sim`` when the real package is absent.

AWS's NKI tutorials drive their kernels from PyTorch through torch-xla (``device = xm.xla_device()``, tensors moved
there, the kernel called on them).  Under the simulator that device is trnsim's ``neuron`` device, which runs eagerly:
:mod:`.core.xla_model` maps ``xla_device()`` to it and the lazy-tensor calls (``mark_step``, ``wait_device_ops``) to
what an eager device needs (nothing, or a synchronize).  ``import torch_xla`` resolves here through the interpreter
start hook (``trnsim_nki_hook.py``) only when torch-xla itself is not installed.  Any other torch-xla name raises an
``AttributeError`` saying that trnsim does not provide it.
"""

TRNSIM_STANDIN = True
__version__ = "0.0+trnsim"


def device(index=None):
    """``torch_xla.device()`` (torch-xla 2.x's spelling of ``xm.xla_device()``): the simulated ``neuron`` device."""
    from .core import xla_model
    return xla_model.xla_device(index)


def sync(wait=False):
    """``torch_xla.sync()`` (2.x's ``xm.mark_step()``): nothing to flush on an eager device."""
    from .core import xla_model
    xla_model.mark_step(wait=wait)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "core":
        from . import core
        return core
    raise AttributeError(f"torch_xla.{name} is not available in trnsim's torch_xla stand-in (TORCHNEURON_TARGET=sim; "
                         "torch-xla is not installed): it provides torch_xla.device, torch_xla.sync and torch_xla.core.xla_model's device calls")
