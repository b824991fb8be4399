"""Reductions along axes (``nl.sum``, ``max``, ``min``, ``prod``, ``mean``, ``all``, ``var``) and the composite
row operations built on them (``softmax``, ``rms_norm``, ``gather_flattened``).

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

import numpy as np

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...memory import SBUF
from .. import language as _v2
from ..context import current
from .lang_alloc import _new
from .lang_operands import _ctx, _operand, _track_masks
from .tile import box_empty, mask_box, resolve


# -- reductions -----------------------------------------------------------------------------------------
def _reduce_shape(shape, axes, keepdims):
    out = tuple(1 if d in axes else s for d, s in enumerate(shape)) if keepdims else \
        tuple(s for d, s in enumerate(shape) if d not in axes)
    return out + (1,) if len(out) == 1 else out


def _reduce_box(box, ndim, axes, keepdims, out_ndim):
    if box is None:
        return None
    if keepdims:
        return tuple((0, 1) if d in axes else box[d] for d in range(ndim))
    kept = tuple(box[d] for d in range(ndim) if d not in axes)
    return kept + ((0, 1),) * (out_ndim - len(kept))


def _reduce(opname, x, axis, dtype, mask, keepdims, loc, post=None):
    core = current().core
    x = _operand(x, loc)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) % x.ndim for a in axes)
    shape = _reduce_shape(x.shape, axes, keepdims)
    out = _new(shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, x.shape, loc, opname)
    if box_empty(box):
        return out
    xr = resolve(x, box, loc, opname, "x")
    ob = _reduce_box(box, x.ndim, axes, keepdims, len(shape))
    d = resolve(out, ob, loc, opname, "dst") if ob is not None else out
    red = tuple(sorted(set(axes)))
    if 0 not in red and red != tuple(range(xr.ndim - len(red), xr.ndim)):
        # nl.sum & co. reduce any free axes: move them last (a strided view, no copy) for the instruction,
        # whose rule wants the trailing free axes; the kept axes keep their order, as the result's
        kept = tuple(a for a in range(xr.ndim) if a not in red)
        xr = xr.permute(kept + red)
        red = tuple(range(len(kept), xr.ndim))
    _isa.tensor_reduce(core, loc, d, opname, xr, red, keepdims=keepdims)
    if post == "mean":
        n = 1
        for a in axes:
            n *= xr.shape[a]
        _isa.tensor_scalar(core, loc, d, d, "multiply", 1.0 / n)
    return out


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("add", x, axis, dtype, mask, keepdims, caller_location())


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("maximum", x, axis, dtype, mask, keepdims, caller_location())


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("minimum", x, axis, dtype, mask, keepdims, caller_location())


def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("multiply", x, axis, dtype, mask, keepdims, caller_location())


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("add", x, axis, dtype, mask, keepdims, caller_location(), post="mean")


def all(x, axis, *, dtype=bool, mask=None, **kwargs):
    return _reduce("logical_and", x, axis, dtype, mask, False, caller_location())


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    """Population variance along ``axis``: mean((x - mean(x))^2)."""
    loc = caller_location()
    core = current().core
    x = _operand(x, loc)
    if mask is not None:
        raise NotImplementedError("nl.var with mask= is not supported by trnsim yet; restrict the tile by "
                                  "indexing instead")
    m = _reduce("add", x, axis, "float32", None, True, loc, post="mean")
    d = _new(x.shape, "float32", SBUF, "", loc)
    _isa.tensor_scalar(core, loc, d, x, "subtract", m)
    _isa.tensor_tensor(core, loc, d, d, d, "multiply")
    return _reduce("add", d, axis, x.dtype if dtype is None else dtype, None, True, loc, post="mean")


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """Softmax along the last free axis: exp(x - max) / sum, the instructions of the v2 ``nl.softmax``."""
    core, loc = _ctx()
    x = _operand(x, loc)
    if (axis % x.ndim) != x.ndim - 1:
        raise NkiValidationError(f"softmax: axis {axis} is not the last free axis of a rank-{x.ndim} tile",
                                 "softmax", "axis", axis, x.ndim - 1, loc)
    out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, x.shape, loc, "softmax")
    if box_empty(box):
        return out
    xr = resolve(x, box, loc, "softmax", "x")
    o = resolve(out, box, loc, "softmax", "dst")
    p = xr.shape[0]
    mx = _new((p, 1), "float32", SBUF, "", loc)
    _isa.tensor_reduce(core, loc, mx, "maximum", xr, xr.ndim - 1)
    neg = _new((p, 1), "float32", SBUF, "", loc)
    _isa.tensor_scalar(core, loc, neg, mx, "multiply", -1.0)
    e = _new(xr.shape, "float32", SBUF, "", loc)
    s = _new((p, 1), "float32", SBUF, "", loc)
    _isa.activation(core, loc, e, "exp", xr, bias=neg, reduce_op="add", reduce_res=s)
    r = _new((p, 1), "float32", SBUF, "", loc)
    _isa.reciprocal(core, loc, r, s)
    _isa.tensor_scalar(core, loc, o, e, "multiply", r)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-06, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """``x / RMS(x) * w`` over the free ``axis``: the instructions of the v2 ``nl.rms_norm``."""
    loc = caller_location()
    if mask is not None:
        raise NotImplementedError("nl.rms_norm with mask= is not supported by trnsim yet; index the operands")
    x = _operand(x, loc)
    w = _operand(w, loc)
    # legacy NKI: dtype and compute_dtype both set the intermediate and the result dtype
    dt = dtype if dtype is not None else compute_dtype
    return _v2.rms_norm(x, w, axis, n, epsilon, dtype=dt, compute_dtype=dt)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """Per partition, the elements of ``data``'s flattened free dimensions at ``indices`` (GpSimd gather)."""
    loc = caller_location()
    if mask is not None:
        raise NotImplementedError("nl.gather_flattened with mask= is not supported by trnsim yet; index the "
                                  "operands")
    return _v2.gather_flattened(_operand(data, loc), _operand(indices, loc), dtype=dtype)


_track_masks(globals())
