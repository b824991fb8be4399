"""Shape-only PyTorch on the ``neuron`` device: device tensors whose payload is a fake tensor (PyTorch's
``FakeTensorMode``: shapes, dtypes and strides, no storage).

Every op goes through the device's own dispatch (the same native/fallback decisions, the same cost function,
the same simulated clock), but no data exists: the fake payload runs each op's meta kernel (or its
decomposition) to find the output's shape.  A model of hundreds of billions of parameters runs a training step
this way on a laptop; each distinct op shape is simulated once (``costs`` memoises its kernels).  Ops that need
values (``.item()``, ``nonzero``) raise, naming the op.

``materialize_shape_only(module)`` swaps a module's parameters and buffers for shape-only device tensors (ties
kept); build the module on the ``meta`` device first (``with torch.device("meta"): model = make()``) so that no
host memory is touched.

``meta_payloads()``: inside it, new shape-only tensors carry a plain ``meta`` tensor instead of a fake one.  Each
op then runs its meta kernel straight from the dispatcher, without the fake mode's bookkeeping (its dispatch
cache, output wrapping and device tracking): a decoder layer's forward and backward on the device in about a
third of the CPU time (benchmarks/speed-estim8.md).  The device dispatch is the same (the same native/fallback
decisions and costs); two things differ and the device handles them: ``device=`` arguments of an op on meta
payloads stay on the meta device (``tensor._device_kw``), and the attention kernel choice is answered as real
tensors would answer it (``native_impls._sdp_choice``).  What a meta payload does not do that a fake one does:
mix with real tensors (``allow_non_fake_inputs``), and turn factory ops inside compiled graphs shape-only; so
the estimator uses it for its own decoder-template layers run eagerly (``trnsim.cost.step``), whose costs the
tests compare with the fake payload's, and everything else keeps the fake payload.
"""

from __future__ import annotations

import contextlib

import torch

from .device_state import STATE

__all__ = ["shape_only_tensor", "materialize_shape_only", "device_target", "is_shape_only", "meta_payloads"]


_MODE = None
_META = [False]         # inside meta_payloads(): new shape-only payloads are plain meta tensors


def _fake_mode():
    global _MODE
    if _MODE is None:
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        class ShapeOnlyMode(FakeTensorMode):
            """Fake tensors that choose the attention kernel as real CPU tensors of their shapes would: the meta
            device's choice is the math path (materialised scores), the device's the fused flash kernel."""

            def dispatch(self, func, types, args=(), kwargs=None):
                if func is torch.ops.aten._fused_sdp_choice.default:
                    # same shapes, dtypes and a contiguous last dimension, backed by one row of real memory
                    real = [torch.empty(a.shape[-1], dtype=a.dtype).expand(a.shape) if isinstance(a, FakeTensor)
                            else a for a in args]
                    return func(*real, **(kwargs or {}))
                return super().dispatch(func, types, args, kwargs)
        _MODE = ShapeOnlyMode(allow_non_fake_inputs=True)
    return _MODE


def _empty(shape, dtype):
    if _META[0]:
        return torch.empty(tuple(shape), dtype=dtype, device="meta")
    with _fake_mode():
        return torch.empty(tuple(shape), dtype=dtype)


@contextlib.contextmanager
def meta_payloads(on=True):
    """New shape-only tensors inside the block carry plain ``meta`` payloads (``on``; see the module docstring).
    Process-wide while it lasts (a backward another thread starts runs on autograd's device thread)."""
    prev = _META[0]
    _META[0] = bool(on)
    try:
        yield
    finally:
        _META[0] = prev


def _wrap(p):
    from .tensor import wrap
    return wrap(p)


def shape_only_tensor(shape, dtype=torch.float32, requires_grad=False):
    """A ``neuron`` tensor of ``shape`` and ``dtype`` with no data."""
    t = _wrap(_empty(shape, dtype))
    if requires_grad:
        t.requires_grad_(True)
    return t


def is_shape_only(t) -> bool:
    p = getattr(t, "_p", None)
    if isinstance(p, torch.Tensor) and p.is_meta:
        return True
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(p, FakeTensor)


def materialize_shape_only(module: torch.nn.Module, dtype=None):
    """Replace every parameter and buffer of ``module`` (on any device; ``meta`` is cheapest) by a shape-only
    ``neuron`` tensor of the same shape (``dtype`` to cast floating ones), keeping tied parameters tied."""
    seen = {}
    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            new = seen.get(id(p))
            if new is None:
                dt = dtype if (dtype is not None and p.is_floating_point()) else p.dtype
                data = _wrap(_empty(p.shape, dt))
                new = seen[id(p)] = torch.nn.Parameter(data, requires_grad=p.requires_grad)
            mod._parameters[name] = new
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            new = seen.get(id(b))
            if new is None:
                dt = dtype if (dtype is not None and b.is_floating_point()) else b.dtype
                new = seen[id(b)] = _wrap(_empty(b.shape, dt))
            mod._buffers[name] = new
    return module


@contextlib.contextmanager
def device_target(target):
    """Run the device as ``target`` (a name or Target) inside the block (the cost memo is per target).  The
    device's HBM capacity check is off inside: a shape-only run of one layer or one optimizer shard of a large
    model is not a placement on one core (the estimator accounts memory per rank itself)."""
    from ..targets import get_target
    from . import register, tensor
    from .memory import MEMORY
    register()                 # the device must be registered before the first backward on it (idempotent)
    prev = STATE.target
    STATE.target = get_target(target)
    tensor.clear_charges()
    MEMORY.check = _no_check
    try:
        yield STATE.target
    finally:
        STATE.target = prev
        tensor.clear_charges()
        MEMORY.__dict__.pop("check", None)


def _no_check(*args, **kwargs):
    return None
