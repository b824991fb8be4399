"""Device indices of ``neuron`` tensors beyond the home device: ``Tensor.to`` between indices, the slow path's
device rules while a process holds tensors on several indices, and what a request for ``neuron:i`` means.

Why indices are Python-side (``tensor.py``'s module text): torch's Python device guard reports one device, so C++
(autograd's device queues) must see every wrapper on ``neuron:0``; ``NeuronTensor.device`` reports the index.
Installed on the tensor type by :func:`install` at device registration (``tensor.py`` imports nothing from here)."""

from __future__ import annotations

import torch

from . import tensor as _t
from .device_module import _index
from .op_table import TRANSFER

_BASE_TO = torch.Tensor.to


def logical_device(index):
    """The device a factory's (or a host tensor's ``.to()``) request for ``neuron:index`` means: None or 0 is the
    current device (C++ asks for ``neuron:0`` for every device tensor), another index is itself (checked against
    ``torch.neuron.device_count()``)."""
    if not index:
        return _t.CURRENT
    return torch.device(_t.DEVICE.type, _index(index))


def _to_target(args, kwargs):
    """The ``neuron`` device a ``to()`` call names (no index: the current device), or None."""
    d = kwargs.get("device")
    if d is None and args:
        a = args[0]
        if type(a) is _t.NeuronTensor:
            return a._dev
        if isinstance(a, (str, torch.device, int)) and not isinstance(a, bool):
            d = a
    if d is None or isinstance(d, torch.dtype):
        return None
    d = torch.device(d) if not isinstance(d, torch.device) else d
    if d.type != _t.DEVICE.type:
        return None
    if d.index is None:
        return _t.CURRENT
    return torch.device(d.type, _index(d.index))


def tensor_to(self, *args, **kwargs):
    """``Tensor.to`` of a neuron tensor, the target index taken from the Python arguments (C++ sees every wrapper
    on ``neuron:0``): the same index is a no-op or a dtype change, another index a copy placed there."""
    dev = _to_target(args, kwargs)
    if dev is None:
        return _BASE_TO(self, *args, **kwargs)
    _, dtype, non_blocking, fmt = torch._C._nn._parse_to(*args, **{k: v for k, v in kwargs.items() if k != "copy"})
    fmt = fmt if fmt is not None else torch.preserve_format
    if dev == self._dev:
        return _BASE_TO(self, _t.DEVICE, dtype, non_blocking, kwargs.get("copy", False), memory_format=fmt)
    if self.requires_grad and torch.is_grad_enabled():
        return _MoveIndex.apply(self, dev, dtype, non_blocking, fmt)
    return _move(self, dev, dtype, non_blocking, fmt)


def _move(t, dev, dtype, non_blocking, fmt):
    out = _BASE_TO(t, _t.DEVICE, dtype, non_blocking, True, memory_format=fmt)
    _t._place(out, dev)
    return out


class _MoveIndex(torch.autograd.Function):
    """A move between device indices under autograd: the gradient goes back to the source index (torch's own
    ``ToCopyBackward`` would leave it where it is, C++ seeing one device)."""

    @staticmethod
    def forward(ctx, t, dev, dtype, non_blocking, fmt):
        ctx.src, ctx.dtype = t._dev, t.dtype
        return _move(t, dev, dtype, non_blocking, fmt)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.src, ctx.dtype), None, None, None, None


def dispatch_multi(func, args, kwargs):
    """``tensor.dispatch`` in a process holding tensors on several indices: inputs on one index (else CUDA's error,
    except for transfers), results placed on it (or on the current device when no input is a device tensor)."""
    devs = []
    for a in torch.utils._pytree.tree_leaves((args, kwargs)):
        if type(a) is _t.NeuronTensor and a._dev not in devs:
            devs.append(a._dev)
    if len(devs) > 1 and func._opname not in TRANSFER:
        _t._raise(RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{devs[0]} and {devs[1]}! (when checking argument for {func._schema.name})"))
    dev = devs[0] if devs else _t.CURRENT
    out = _t._dispatch(func, args, kwargs)
    for o in torch.utils._pytree.tree_leaves(out):
        if type(o) is _t.NeuronTensor and o._dev != dev and not any(o is a for a in args):
            _t._place(o, dev)
    return out


def install():
    """Put ``to`` and the multi-index dispatch on the tensor type (once, at device registration)."""
    _t.NeuronTensor.to = tensor_to
    _t.dispatch_multi = dispatch_multi
