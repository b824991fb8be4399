"""Python's arithmetic operators (``a + b``, ``-``, ``*``, ``/``) on ``neuron`` tensors without torch's C++ dispatcher.

``a + b`` on two wrappers normally goes Python -> ``TensorBase.__add__`` (argument parsing) -> the dispatcher
(autograd and Python keys) -> ``NeuronTensor.__torch_dispatch__`` (arguments boxed into Python again).  For a small
op that entry is most of the wall time (issue 12's dispatch aim: an 8-element add within 5x of CPU eager).  The
methods installed here take the shortcut only when nothing else can observe the op:

* both operands are exactly ``NeuronTensor`` (or the other is a Python ``int``/``float``/``bool``);
* no ``__torch_dispatch__`` rule is registered for the op (``torch.library.register_torch_dispatch``);
* neither requires grad, and no forward-mode AD level is open (a dual tensor's tangent lives in autograd);
* no ``TorchDispatchMode``/``TorchFunctionMode`` is active, no trnsim profiler and no torch profiler is recording,
  and functorch transforms are off;
* the device's elementwise fast path (``tensor.FAST_PATH``) is on, and the process holds tensors on one device
  index only (``tensor.MULTI`` off).

Then the result is exactly what ``__torch_dispatch__``'s fast path produces for the same aten op (``add.Tensor``,
...): the op's CPU payload kernel on the payloads, the same per-(op, dtype, numel) charge memo, the same wrapper
and memory accounting (``tensor._fresh_result``).  Anything else goes to torch's own operator, unchanged.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _fwad

from . import tensor as _t
from .device_state import STATE

_OPS = (("__add__", torch.ops.aten.add.Tensor), ("__sub__", torch.ops.aten.sub.Tensor),
        ("__mul__", torch.ops.aten.mul.Tensor), ("__truediv__", torch.ops.aten.div.Tensor))
_NUMBERS = (int, float, bool)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._len_torch_function_stack
_profiling = torch._C._autograd._profiler_enabled
_functorch = torch._C._are_functorch_transforms_active


def _dispatch_rules(aten_op):
    """The dict of ``__torch_dispatch__`` rules registered for ``aten_op`` by class (torch._library's holder for the
    op's name, kept for the life of the process, so a rule registered later lands in it), or None where this
    torch keeps them otherwise (version-guarded private detail: then the shortcut is not installed)."""
    try:
        from torch._library import simple_registry
        rules = simple_registry.singleton.find(aten_op.__qualname__).torch_dispatch_rules._data
    except (ImportError, AttributeError):
        return None
    return rules if isinstance(rules, dict) else None


def _operator(method, aten_op):
    base = getattr(torch._C.TensorBase, method)
    entry = _t._EWOPS.get(id(aten_op), _t._UNSEEN)      # the fast path's own entry (one charge memo for both)
    if entry is _t._UNSEEN:
        entry = _t._ew_entry(aten_op)
    if entry is None:           # not an elementwise fast-path op: leave torch's operator alone
        return None
    name, fn, costs = entry
    rules = _dispatch_rules(aten_op)
    if rules is None:           # torch keeps its rules elsewhere: the shortcut could not see one, so none
        return None
    NT = _t.NeuronTensor
    fresh = _t._fresh_result

    def op(self, other):
        # modes first: under a TorchFunctionMode even reading .requires_grad is an observable call; ``rules``: a
        # ``__torch_dispatch__`` rule registered for this op (torch.library.register_torch_dispatch), which torch's
        # operator honours
        if (_function_modes() or _dispatch_modes() or self.__class__ is not NT or not _t.FAST_PATH or _t.MULTI
                or STATE.profilers or _fwad._current_level >= 0 or _profiling() or _functorch() or rules
                or self.requires_grad):
            return base(self, other)
        oc = other.__class__
        if oc is NT:
            if other.requires_grad:
                return base(self, other)
            u1 = other._p
        elif oc in _NUMBERS:
            u1 = other
        else:
            return base(self, other)
        u0 = self._p
        out = fn(u0, u1)
        if out.__class__ is not _t._TENSOR:
            return base(self, other)
        return fresh(name, costs, (u0, u1), out)

    op.__name__ = method
    op.__qualname__ = f"NeuronTensor.{method}"
    op.__doc__ = f"``{method}`` of a neuron tensor: torch's operator, or its dispatcher-free shortcut (see module)."
    return op


def install():
    """Put the operators on ``NeuronTensor`` (once, at device registration)."""
    for method, aten_op in _OPS:
        op = _operator(method, aten_op)
        if op is not None:
            setattr(_t.NeuronTensor, method, op)


def uninstall():
    """Remove them again (benchmarks and tests compare both ways)."""
    for method, _ in _OPS:
        if method in _t.NeuronTensor.__dict__:
            delattr(_t.NeuronTensor, method)
