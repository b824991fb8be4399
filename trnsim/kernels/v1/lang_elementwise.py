"""Elementwise math that returns a new tile: the binary, comparison and activation functions (``nl.add``,
``nl.less``, ``nl.exp`` & co., made from tables), ``invert``, ``logical_not``, ``copy`` and ``static_cast``.

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

import sys

from ... import isa as _isa
from ...memory import SBUF, Tensor
from .host import _host_cast, _in_kernel
from .lang_alloc import _new
from .lang_dtypes import _promote, _scalar_dtype
from .lang_operands import (_binary_into, _ctx, _is_tile, _operand, _shape_of, _tile_broadcast_shape,
                            _track_masks)
from .tile import PendingMatmul, Tile, box_empty, mask_box, resolve


def _mk_binary(opname, default_dtype=None):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        core, loc = _ctx()
        x = _operand(x, loc)
        y = _operand(y, loc)
        shape = _tile_broadcast_shape(_shape_of(x), _shape_of(y))
        if dtype is None:
            dtype = default_dtype
        if dtype is None:
            if _is_tile(x) and _is_tile(y):
                dtype = _promote(x.dtype, y.dtype)
            elif _is_tile(x):
                dtype = _scalar_dtype(x.dtype, y)
            elif _is_tile(y):
                dtype = _scalar_dtype(y.dtype, x)
            else:
                raise TypeError(f"nl.{opname} needs at least one tile operand")
        out = _new(shape, dtype, SBUF, "", loc)
        _binary_into(out, x, y, opname, loc, mask_box(mask, shape, loc, opname))
        return out
    fn.__name__ = opname
    fn._trnsim_op = opname
    return fn


def _mk_unary(opname, act=None):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        core, loc = _ctx()
        x = _operand(x, loc)
        out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
        box = mask_box(mask, x.shape, loc, opname)
        if not box_empty(box):
            _isa.activation(core, loc, resolve(out, box, loc, opname, "dst"), act or opname,
                            resolve(x, box, loc, opname, "x"))
        return out
    fn.__name__ = opname
    fn._trnsim_op = opname
    return fn


_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "bitwise_and", "bitwise_or",
           "bitwise_xor", "left_shift", "right_shift", "fmod", "mod")
_COMPARE = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
            "logical_xor")
_UNARY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_sigmoid",
          "gelu_apprx_tanh", "gelu_dx", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx", "reciprocal",
          "sin", "cos", "tan", "arctan", "ceil", "floor", "trunc", "negative", "sign", "abs", "square")
_mod = sys.modules[__name__]
for _n in _BINARY:
    setattr(_mod, _n, _mk_binary(_n))
for _n in _COMPARE:
    setattr(_mod, _n, _mk_binary(_n, default_dtype="bool"))
for _n in _UNARY:
    setattr(_mod, _n, _mk_unary(_n))
del _n


def invert(x, *, dtype=None, mask=None, **kwargs):
    core, loc = _ctx()
    out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    _binary_into(out, x, -1, "bitwise_xor", loc, mask_box(mask, x.shape, loc, "invert"))
    return out


def logical_not(x, *, dtype=bool, mask=None, **kwargs):
    core, loc = _ctx()
    out = _new(x.shape, dtype, SBUF, "", loc)
    _binary_into(out, x, 0, "equal", loc, mask_box(mask, x.shape, loc, "logical_not"))
    return out


def copy(src, *, mask=None, dtype=None, **kwargs):
    """A copy of ``src`` in a new SBUF tile (converted to ``dtype``)."""
    core, loc = _ctx()
    src = _operand(src, loc)
    out = _new(src.shape, src.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, src.shape, loc, "copy")
    if not box_empty(box):
        _isa.tensor_copy(core, loc, resolve(out, box, loc, "copy", "dst"), resolve(src, box, loc, "copy", "src"))
    return out


def static_cast(input_data, dtype):
    """``nl.static_cast``: inside a kernel, a converting copy into a new SBUF tile.  Outside one, on a host array
    (NumPy, ml_dtypes or torch), the same conversion on the host, as legacy NKI allows and tests use to prepare
    inputs: floats round to nearest even in ``dtype``; integers round to nearest and saturate (trnsim's write rule)."""
    if not isinstance(input_data, (Tensor, Tile, PendingMatmul)) and not _in_kernel():
        return _host_cast(input_data, dtype)
    return copy(input_data, dtype=dtype)


_track_masks(globals())
