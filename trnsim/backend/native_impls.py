"""Native ops of the ``neuron`` device that need their own implementation (not the CPU aten kernel as is).

``IMPLS`` maps an aten op name to ``fn(func, args, kwargs) -> result``, where ``args``/``kwargs`` are the CPU
payloads.  The dispatch (``tensor.py``) calls these instead of ``func`` for ops listed in ``op_table``.

* ``histc``: integer inputs have no CPU kernel ("histogram_cpu not implemented for 'Int'"), but CUDA bins them,
  and MoE routers (``torch.histc(expert_ids.int(), ...)``) depend on it.  The device follows CUDA's semantics:
  the output has the input's dtype; ``min``/``max`` are converted to the input's type (integers: truncated);
  ``min == max`` takes the data's extremes; equal extremes widen to ``[v - 1, v + 1]``; elements outside
  ``[min, max]`` are ignored; the bin of ``v`` is ``(v - min) * bins / (max - min)`` in integer arithmetic for
  integer inputs (``max`` falls into the last bin).  Floating inputs of low precision are binned in fp32 (the CPU
  kernel on the upcast values) and the counts rounded once to the dtype.
* batch norm (``native_batch_norm``, ``_native_batch_norm_legit``, ``_batch_norm_with_update``): low-precision
  inputs in fp32 with one rounding, like the ops in ``op_table.ACCUMULATING``, but keeping the in-place update of
  the running statistics (the generic fp32 path would update a temporary copy).
* ``_fused_sdp_choice`` of a shape-only payload on the ``meta`` device (:func:`trnsim.backend.shape_only.meta_payloads`):
  answered as real CPU tensors of the same shapes and dtypes would answer it (the fused flash kernel), not as the
  meta device does (the math path); the fake-tensor payload's mode does the same (``shape_only.ShapeOnlyMode``).
"""

from __future__ import annotations

import torch

_LOW = (torch.bfloat16, torch.float16)


def _histc(func, args, kwargs):
    x = args[0]
    bins = args[1] if len(args) > 1 else kwargs.get("bins", 100)
    lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
    hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, got {bins}")
    if x.is_floating_point():
        if x.dtype in _LOW:
            return func(x.float(), bins, lo, hi).to(x.dtype)
        return func(x, bins, lo, hi)
    if x.dtype == torch.bool or x.is_complex():
        raise RuntimeError(f"torch.histc: not implemented for '{str(x.dtype).replace('torch.', '')}' "
                           "(integer and floating-point inputs are supported)")
    flat = x.reshape(-1).to(torch.int64)
    lo_i, hi_i = int(lo), int(hi)             # CUDA converts the bounds to the input's integer type
    if lo_i == hi_i and flat.numel() > 0:
        lo_i, hi_i = int(flat.min()), int(flat.max())
    if lo_i == hi_i:
        lo_i, hi_i = lo_i - 1, hi_i + 1
    if not lo_i < hi_i:
        raise RuntimeError(f"torch.histc: max must be larger than min (got min={lo}, max={hi})")
    keep = flat[(flat >= lo_i) & (flat <= hi_i)]
    idx = torch.div((keep - lo_i) * bins, hi_i - lo_i, rounding_mode="floor")
    idx = torch.clamp(idx, max=bins - 1)       # max itself lands in the last bin
    counts = torch.bincount(idx, minlength=bins)[:bins]
    return counts.to(x.dtype)


def _batch_norm_fp32(func, args, kwargs):
    """Batch norm of low-precision inputs computed in fp32 with one rounding per output; running statistics (updated
    in place in training) are updated in fp32 and written back into the caller's tensors, rounded once."""
    if not (isinstance(args[0], torch.Tensor) and args[0].dtype in _LOW):
        return func(*args, **kwargs)
    meta = func(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    up = [a.float() if isinstance(a, torch.Tensor) and a.dtype in _LOW else a for a in args]
    out = func(*up, **kwargs)
    for a, u in zip(args, up):
        if isinstance(a, torch.Tensor) and u is not a and a.dtype in _LOW and a is not args[0]:
            a.copy_(u)                      # running_mean / running_var (weight and bias are not mutated)
    return tuple(o.to(m.dtype) if isinstance(o, torch.Tensor) and o.dtype != m.dtype else o
                 for o, m in zip(out, meta))


def _sdp_choice(func, args, kwargs):
    """The attention kernel real tensors of these shapes would get: a meta argument becomes one row of real memory
    expanded to its shape (same shape, dtype and a contiguous last dimension); real arguments pass as they are."""
    real = [torch.empty(a.shape[-1], dtype=a.dtype).expand(a.shape) if isinstance(a, torch.Tensor) and a.is_meta
            else a for a in args]
    return func(*real, **kwargs)


IMPLS = {
    "histc": _histc,
    "_fused_sdp_choice": _sdp_choice,
    "native_batch_norm": _batch_norm_fp32,
    "_native_batch_norm_legit": _batch_norm_fp32,
    "_batch_norm_with_update": _batch_norm_fp32,
}

__all__ = ["IMPLS"]
