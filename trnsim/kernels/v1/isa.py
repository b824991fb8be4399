"""``neuronxcc.nki.isa`` (legacy NKI): functional instruction calls that allocate and return their result tile.

Each call resolves its operands (index expressions checked, ``mask=`` applied), allocates the output the way
legacy NKI does, and issues the one ``trnsim.isa`` instruction of the same name (destination first), so a v1
kernel and its v2 transcription produce identical instruction streams.
"""

from __future__ import annotations

import enum
import weakref

import numpy as np

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...memory import PSUM, SBUF, Tensor
from ..context import current
from ..isa_api import get_nc_version as _v2_nc_version
from . import language as _nl
from .atomic import rmw as _rmw
from .refused import builtin_custom_op  # noqa: F401  (nisa.builtin_custom_op)
from .index import IndexExpr, Predicate
from .tile import PendingMatmul, box_empty, mask_box, materialize, resolve, partition_views, track_mask

__all__ = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "NkiValidationError", "get_nc_version",
           "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "unknown_engine"]


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown
dma_engine = "dma"


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


class dge_mode(enum.IntEnum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


_V1_DGE = dge_mode      # dma_copy's keyword shadows the class's name


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


fp32 = _nl.fp32          # ``nisa.fp32.min``, the same object as ``nl.fp32``


def get_nc_version():
    """The NeuronCore generation of the simulated target (gen2 = trn1, gen3 = trn2, gen4 = trn3)."""
    return nc_version(_v2_nc_version().value)


def _eng(e):
    """v1 engine enum -> the name the ISA takes (``None`` for unknown: the instruction's default)."""
    if e is None:
        return None
    n = getattr(e, "name", str(e))
    return None if n == "unknown" else n


# buffers of the tiles instructions return: in legacy NKI the compiler places those, so a PSUM result handed to an
# engine that cannot read PSUM is moved by the compiler (see _stage_to_sbuf); tiles the kernel allocated itself in PSUM
# are the kernel's placement, and the ISA's rules apply to them as written
_RETURNED = weakref.WeakSet()


def _out(shape, dtype, buffer=SBUF):
    t = _nl._new(tuple(shape), dtype, buffer, "", caller_location())
    _RETURNED.add(t.buf)
    return t


def _prep(mask, shape, what, loc):
    return mask_box(mask, shape, loc, what)


def _r(t, box, loc, what, name):
    v = resolve(materialize(t, loc), box, loc, what, name)
    return v if name == "dst" else _nl.replicate_partitions(v, loc)


def _opnd(v, box, loc, what, name):
    """A scalar passes through; a tile operand is resolved (a [P, 1] operand keeps its free axis)."""
    if isinstance(v, (Tensor, PendingMatmul)):
        return _r(v, box, loc, what, name)
    return v


# -- Tensor Engine --------------------------------------------------------------------------------------
def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, **kwargs):
    """``stationary[K, M].T @ moving[K, N]``: a [M, N] fp32 PSUM result, issued where it is assigned or
    accumulated (``psum += nisa.nc_matmul(...)``)."""
    loc = caller_location()
    # the Tensor Engine reads SBUF only (architecture guide: "TensorE must read input matrices from SBUF"; NKI 2.26
    # reference: "the stationary and moving must be SBUF tiles"): a tile the kernel placed in PSUM is refused by the
    # ISA, but a PSUM result of an earlier instruction (nc_transpose's), which the compiler places, is staged to SBUF
    s = _stage_to_sbuf(_r(stationary, None, loc, "nc_matmul", "stationary"), loc, returned_only=True)
    m = _stage_to_sbuf(_r(moving, None, loc, "nc_matmul", "moving"), loc, returned_only=True)
    M = s.size // s.shape[0] if s.shape else 1
    N = m.size // m.shape[0] if m.shape else 1
    mode = getattr(kwargs.get("perf_mode"), "value", kwargs.get("perf_mode"))
    if mode in ("double_row", "double_row_gen3"):       # [K, 2, M] x [K, 2, N]: the pair is contracted too
        M, N = M // 2, N // 2
    box = _prep(mask, (M, N), "nc_matmul", loc)
    if box is not None and not box_empty(box):
        raise NotImplementedError("nisa.nc_matmul with a mask= that keeps part of the [M, N] result is not supported "
                                  "by trnsim yet; index the operands (masks decided when traced, all or nothing, are)")
    kw = dict(is_stationary_onezero=is_stationary_onezero, is_moving_onezero=is_moving_onezero,
              is_transpose=is_transpose, tile_position=tile_position, tile_size=tile_size)
    if "perf_mode" in kwargs:
        kw["perf_mode"] = kwargs["perf_mode"]
    return PendingMatmul(s, m, kw, loc, (M, N), skip=box_empty(box))


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    p = data.shape[0]
    f = data.size // p if p else 0
    e = _eng(engine) or ("vector" if (p <= 32 and f <= 32) else "tensor")
    box = _prep(mask, data.shape, "nc_transpose", loc)
    out = _out((f, p), data.dtype if dtype is None else dtype, PSUM if e == "tensor" else SBUF)
    if not box_empty(box):
        ob = None if box is None else (box[1], box[0])
        _isa.nc_transpose(current().core, loc, _r(out, ob, loc, "nc_transpose", "dst"),
                          _r(data, box, loc, "nc_transpose", "data"), engine=e)
    return out


# -- elementwise ----------------------------------------------------------------------------------------
def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    loc = caller_location()
    data1, data2 = materialize(data1, loc), materialize(data2, loc)
    data1, data2 = _free_broadcast(data1, data2)
    out = _out(data1.shape, _nl._promote(data1.dtype, data2.dtype) if dtype is None else dtype)
    box = _prep(mask, data1.shape, "tensor_tensor", loc)
    if not box_empty(box):
        _isa.tensor_tensor(current().core, loc, _r(out, box, loc, "tensor_tensor", "dst"),
                           _r(data1, box, loc, "tensor_tensor", "data1"), _r(data2, box, loc, "tensor_tensor", "data2"),
                           op, engine=_eng(engine))
    return out


def _free_broadcast(a, b):
    """A ``[P, 1]`` operand of ``tensor_tensor`` against a ``[P, F...]`` one, read with a free-dimension stride of
    0 (the reference points to tensor_scalar for "broadcasting capability in the free dimension" as the faster
    way, nki.isa.tensor_tensor; an access pattern's free strides may be 0).  Other shapes are left as they are
    (the instruction's own rules check them)."""
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.ndim >= 2 and b.ndim >= 2 and a.shape[0] == b.shape[0]:
        if b.size == b.shape[0] and a.size > a.shape[0]:
            return a, b.reshape((b.shape[0],) + (1,) * (a.ndim - 1)).broadcast_to(a.shape)
        if a.size == a.shape[0] and b.size > b.shape[0]:
            return a.reshape((a.shape[0],) + (1,) * (b.ndim - 1)).broadcast_to(b.shape), b
    return a, b


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                  mask=None, engine=engine.unknown, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "tensor_scalar", loc)
    if not box_empty(box):
        _isa.tensor_scalar(current().core, loc, _r(out, box, loc, "tensor_scalar", "dst"),
                           _r(data, box, loc, "tensor_scalar", "data"), op0,
                           _opnd(operand0, box, loc, "tensor_scalar", "operand0"), reverse0, op1,
                           _opnd(operand1, box, loc, "tensor_scalar", "operand1"), reverse1, engine=_eng(engine))
    return out


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "scalar_tensor_tensor", loc)
    if not box_empty(box):
        w = "scalar_tensor_tensor"
        _isa.scalar_tensor_tensor(current().core, loc, _r(out, box, loc, w, "dst"), _r(data, box, loc, w, "data"),
                                  op0, _opnd(operand0, box, loc, w, "operand0"), op1,
                                  _r(operand1, box, loc, w, "operand1"), reverse0, reverse1)
    return out


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    loc = caller_location()
    src = materialize(src, loc)
    out = _out(src.shape, src.dtype if dtype is None else dtype)
    box = _prep(mask, src.shape, "tensor_copy", loc)
    if not box_empty(box):
        _isa.tensor_copy(current().core, loc, _r(out, box, loc, "tensor_copy", "dst"),
                         _r(src, box, loc, "tensor_copy", "src"), engine=_eng(engine))
    return out


def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "reciprocal", loc)
    if not box_empty(box):
        _isa.reciprocal(current().core, loc, _r(out, box, loc, "reciprocal", "dst"),
                        _r(data, box, loc, "reciprocal", "data"))
    return out


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    loc = caller_location()
    out = _out(shape, dtype)
    box = _prep(mask, out.shape, "memset", loc)
    if not box_empty(box):
        # a block shape ([B, par_dim(P), F]) is set one [P, F] tile at a time
        for v in partition_views(_r(out, box, loc, "memset", "dst")):
            _isa.memset(current().core, loc, v, value, engine=_eng(engine))
    return out


def iota(expr, dtype, *, mask=None, **kwargs):
    """A tile holding the values of an index expression (``nisa.iota(i_p * 512 + i_f, nl.int32)``)."""
    loc = caller_location()
    if isinstance(expr, (int, np.integer)):
        expr = IndexExpr((1, 1), (0, 0), int(expr))
    if not isinstance(expr, IndexExpr):
        raise NkiValidationError(f"iota: expr must be an index expression built from nl.arange/nl.mgrid, got "
                                 f"{type(expr).__name__}", "iota", "expr", expr, None, loc)
    shape = expr.shape if expr.ndim >= 2 else (1,) * (2 - expr.ndim) + expr.shape
    _, coefs = expr.aligned(len(shape))
    out = _out(shape, dtype)
    box = _prep(mask, shape, "iota", loc)
    if box_empty(box):
        return out
    b = box or tuple((0, n) for n in shape)
    const = expr.const + sum(c * lo for c, (lo, _) in zip(coefs, b) if c)
    pattern = [[c if n > 1 else 0, hi - lo] for c, n, (lo, hi) in zip(coefs[1:], shape[1:], b[1:])]
    _isa.iota(current().core, loc, _r(out, box, loc, "iota", "dst"), pattern, offset=const,
              channel_multiplier=coefs[0] if shape[0] > 1 else 0)
    return out


# -- Scalar Engine --------------------------------------------------------------------------------------
def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "activation", loc)
    if not box_empty(box):
        w = "activation"
        _isa.activation(current().core, loc, _r(out, box, loc, w, "dst"), op, _r(data, box, loc, w, "data"),
                        bias=_opnd(bias, box, loc, w, "bias"), scale=_opnd(scale, box, loc, w, "scale"),
                        reduce_op=reduce_op, reduce_res=_opnd(reduce_res, box, loc, w, "reduce_res"),
                        reduce_cmd=getattr(reduce_cmd, "name", reduce_cmd))
    return out


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "activation_reduce", loc)
    if not box_empty(box):
        w = "activation_reduce"
        _isa.activation_reduce(current().core, loc, _r(out, box, loc, w, "dst"), op, _r(data, box, loc, w, "data"),
                               reduce_op, _opnd(reduce_res, box, loc, w, "reduce_res"),
                               bias=_opnd(bias, box, loc, w, "bias"), scale=_opnd(scale, box, loc, w, "scale"))
    return out


# -- reductions and statistics -------------------------------------------------------------------------
def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) % data.ndim for a in axes)
    shape = _nl._reduce_shape(data.shape, axes, keepdims)
    out = _out(shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "tensor_reduce", loc)
    if not box_empty(box):
        ob = _nl._reduce_box(box, data.ndim, axes, keepdims, len(shape))
        _isa.tensor_reduce(current().core, loc, _r(out, ob, loc, "tensor_reduce", "dst"), op,
                           _r(data, box, loc, "tensor_reduce", "data"), axes, negate=negate, keepdims=keepdims,
                           _nki226_axes=True)
    return out


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None,
                         **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    box = _prep(mask, data.shape, "tensor_scalar_reduce", loc)
    if not box_empty(box):
        w = "tensor_scalar_reduce"
        _isa.tensor_scalar_reduce(current().core, loc, _r(out, box, loc, w, "dst"), _r(data, box, loc, w, "data"),
                                  op0, _opnd(operand0, box, loc, w, "operand0"), reduce_op,
                                  _opnd(reduce_res, box, loc, w, "reduce_res"), reverse0)
    return out


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None, mask=None,
                       **kwargs):
    loc = caller_location()
    data0, data1 = materialize(data0, loc), materialize(data1, loc)
    out = _out(data0.shape, data0.dtype if dtype is None else dtype)
    box = _prep(mask, data0.shape, "tensor_tensor_scan", loc)
    if not box_empty(box):
        w = "tensor_tensor_scan"
        _isa.tensor_tensor_scan(current().core, loc, _r(out, box, loc, w, "dst"), _r(data0, box, loc, w, "data0"),
                                _r(data1, box, loc, w, "data1"), _opnd(initial, box, loc, w, "initial"), op0, op1,
                                reverse0, reverse1)
    return out


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out((data.shape[0], 6), "float32" if dtype is None else dtype)
    box = _prep(mask, data.shape, "bn_stats", loc)
    if not box_empty(box):
        ob = None if box is None else ((box[0][0], box[0][1]), (0, 6))
        _isa.bn_stats(current().core, loc, _r(out, ob, loc, "bn_stats", "dst"), _r(data, box, loc, "bn_stats", "data"))
    return out


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    if mask is not None:
        raise NotImplementedError("nisa.bn_aggr with mask= is not supported by trnsim yet")
    out = _out((data.shape[0], 2), "float32" if dtype is None else dtype)
    _isa.bn_aggr(current().core, loc, out, _r(data, None, loc, "bn_aggr", "data"))
    return out


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    """``data`` with each element zeroed with probability ``prob`` (Vector Engine), in a new tile."""
    loc = caller_location()
    data = materialize(data, loc)
    if not isinstance(prob, (int, float, np.integer, np.floating)):
        prob = materialize(prob, loc)
    out = _out(data.shape, data.dtype)
    box = _prep(mask, data.shape, "dropout", loc)
    if not box_empty(box):
        _isa.dropout(current().core, loc, _r(out, box, loc, "dropout", "dst"), _r(data, box, loc, "dropout", "data"),
                     prob if box is None or not hasattr(prob, "buf") else _r(prob, (box[0], (0, 1)), loc, "dropout",
                                                                             "prob"))
    if dtype is None or np.dtype(dtype) == np.dtype(out.dtype.name):
        return out
    return _nl.copy(out, dtype=dtype)


def max8(*, src, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    src = materialize(src, loc)
    out = _out((src.shape[0], 8), src.dtype if dtype is None else dtype)
    _isa.max8(current().core, loc, out, _r(src, None, loc, "max8", "src"))
    return out


def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out((data.shape[0], 8), "uint32" if dtype is None else dtype)
    _isa.nc_find_index8(current().core, loc, out, _r(data, None, loc, "nc_find_index8", "data"),
                        _r(vals, None, loc, "nc_find_index8", "vals"))
    return out


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    data = materialize(data, loc)
    out = _out(data.shape, data.dtype if dtype is None else dtype)
    _isa.nc_match_replace8(current().core, loc, out, _r(data, None, loc, "nc_match_replace8", "data"),
                           _r(vals, None, loc, "nc_match_replace8", "vals"), imm,
                           dst_idx=None if dst_idx is None else _r(dst_idx, None, loc, "nc_match_replace8", "dst_idx"))
    return out


# -- selection --------------------------------------------------------------------------------------------
def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    """``on_true_tile`` where the affine predicate holds, else ``on_false_value`` (``pred`` like
    ``i_p >= i_f``, one comparison)."""
    loc = caller_location()
    t = materialize(on_true_tile, loc)
    if not isinstance(pred, Predicate) or len(pred.terms) != 1:
        raise NkiValidationError("affine_select: pred must be one comparison of index expressions (e.g. "
                                 "i_p - i_f >= 0)", "affine_select", "pred", pred, None, loc)
    expr, op = pred.terms[0]
    if op == "!=":
        op_name = "not_equal"
    else:
        op_name = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal", "==": "equal"}[op]
    shape = tuple(t.shape)
    s, c = expr.aligned(len(shape))
    for a, (n, cn) in enumerate(zip(s, c)):
        if n > 1 and n != shape[a]:
            raise NkiValidationError(f"affine_select: predicate axis {a} has size {n} but on_true_tile has "
                                     f"{shape[a]}", "affine_select", "pred", n, shape[a], loc)
    out = _out(shape, t.dtype if dtype is None else dtype)
    box = _prep(mask, shape, "affine_select", loc)
    if box_empty(box):
        return out
    # on a masked region the predicate is evaluated at the region's own coordinates: shift its constant by the
    # region's start on every axis the predicate uses
    start = [0] * len(shape) if box is None else [lo for lo, _ in box]
    count = list(shape) if box is None else [hi - lo for lo, hi in box]
    offset = expr.const + sum(cn * start[a] for a, (n, cn) in enumerate(zip(s, c)) if n > 1)
    pattern = [[cn if n > 1 else 0, count[a + 1]] for a, (n, cn) in enumerate(zip(s[1:], c[1:]))]
    _isa.affine_select(current().core, loc, _r(out, box, loc, "affine_select", "dst"), pattern,
                       c[0] if s[0] > 1 else 0, _stage_to_sbuf(_r(t, box, loc, "affine_select", "on_true_tile"),
                                                                  loc), on_false_value,
                       cmp_op=op_name, offset=offset)
    return out


def _stage_to_sbuf(v, loc, returned_only=False):
    """A source operand in PSUM for an engine that cannot read PSUM (GpSimd; the Tensor Engine's inputs: Trainium/
    Inferentia2 architecture guide, "Memory hierarchy", engine connectivity to SBUF/PSUM) is first copied to SBUF by
    the Vector Engine, as the legacy compiler lowers kernels that do this (AWS's flash attention backward passes PSUM
    tiles to ``affine_select`` and to ``nc_matmul``).  The copy is an ordinary instruction, with its cost on the
    timeline; the v2 front end, which has no compiler between the kernel and the ISA, keeps refusing."""
    if isinstance(v, Tensor) and v.buf.kind == PSUM and (not returned_only or v.buf in _RETURNED):
        t = _nl._new(v.shape, v.dtype, SBUF, "", loc)
        _isa.tensor_copy(current().core, loc, t, v, engine="vector")
        return t
    return v


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=np.amax, range_start=0, on_false_value=fp32.min, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    t = materialize(on_true_tile, loc)
    out = _out(t.shape, t.dtype if dtype is None else dtype)
    w = "range_select"
    _isa.range_select(current().core, loc, out, _r(t, None, loc, w, "on_true_tile"), comp_op0, comp_op1,
                      _opnd(bound0, None, loc, w, "bound0"), _opnd(bound1, None, loc, w, "bound1"),
                      reduce_cmd=getattr(reduce_cmd, "name", reduce_cmd),
                      reduce_res=_opnd(reduce_res, None, loc, w, "reduce_res"), reduce_op=reduce_op,
                      range_start=range_start, on_false_value=on_false_value)
    return out


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=np.amax, reverse_pred=False, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    w = "select_reduce"
    _isa.select_reduce(current().core, loc, _r(dst, None, loc, w, "dst"), _r(predicate, None, loc, w, "predicate"),
                       _r(on_true, None, loc, w, "on_true"), _opnd(on_false, None, loc, w, "on_false"),
                       reduce_res=_opnd(reduce_res, None, loc, w, "reduce_res"),
                       reduce_cmd=getattr(reduce_cmd, "name", reduce_cmd), reduce_op=reduce_op,
                       reverse_pred=reverse_pred)


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    w = "tensor_copy_predicated"
    _isa.tensor_copy_predicated(current().core, loc, _r(dst, None, loc, w, "dst"), _opnd(src, None, loc, w, "src"),
                                _r(predicate, None, loc, w, "predicate"), reverse_pred=reverse_pred)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    loc = caller_location()
    _isa.nc_stream_shuffle(current().core, loc, _r(dst, None, loc, "nc_stream_shuffle", "dst"),
                           _r(src, None, loc, "nc_stream_shuffle", "src"), shuffle_mask)


# -- DMA ----------------------------------------------------------------------------------------------------
def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown):
    loc = caller_location()
    if dst_rmw_op is not None:
        _rmw(dst, src, dst_rmw_op, mask, loc, "nisa.dma_copy(dst_rmw_op=)")
        return
    dst_m = materialize(dst, loc)
    box = _prep(mask, dst_m.shape, "dma_copy", loc)
    if box_empty(box):
        return
    dge = _V1_DGE(dge_mode) if type(dge_mode) is int else dge_mode      # legacy numbering (0 none .. 3 unknown)
    _isa.dma_copy(current().core, loc, _r(dst_m, box, loc, "dma_copy", "dst"), _r(src, box, loc, "dma_copy", "src"),
                  dge_mode=None if dge == _V1_DGE.unknown else dge)


def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    loc = caller_location()
    src = materialize(src, loc)
    if mask is not None:
        raise NotImplementedError("nisa.dma_transpose with mask= is not supported by trnsim yet")
    s = _r(src, None, loc, "dma_transpose", "src")
    nd = s.ndim
    ax = tuple(axes) if axes is not None else tuple(reversed(range(nd))) if nd == 2 else \
        {3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(nd, tuple(reversed(range(nd))))
    out = _out(tuple(s.shape[a] for a in ax), s.dtype if dtype is None else dtype)
    _isa.dma_transpose(current().core, loc, out, s, axes=axes)
    return out


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    """A [1, ...] tile: ``op`` over the partitions of ``data`` (GpSimd)."""
    loc = caller_location()
    data = materialize(data, loc)
    if mask is not None:
        raise NotImplementedError("nisa.tensor_partition_reduce with mask= is not supported by trnsim yet")
    out = _out((1,) + tuple(data.shape[1:]), data.dtype if dtype is None else dtype)
    _isa.tensor_partition_reduce(current().core, loc, out, op, _r(data, None, loc, "tensor_partition_reduce", "data"))
    return out


def sequence_bounds(*, segment_ids, dtype=None, **kwargs):
    """A [1, 2, N] tile: each element's segment start and end (exclusive); padding (id 0) gets N and -1."""
    loc = caller_location()
    s = materialize(segment_ids, loc)
    n = s.size // s.shape[0] if s.shape and s.shape[0] else 0
    out = _out((s.shape[0] if s.shape else 1, 2, n), s.dtype if dtype is None else dtype)
    _isa.sequence_bounds(current().core, loc, out, _r(s, None, loc, "sequence_bounds", "segment_ids"))
    return out


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, **kwargs):
    """A [P, num_valid_indices, num_elem_per_idx] tile gathered per GpSimd core (see trnsim.isa.local_gather)."""
    loc = caller_location()
    src = _r(materialize(src_buffer, loc), None, loc, "local_gather", "src_buffer")
    ix = _r(materialize(index, loc), None, loc, "local_gather", "index")
    if mask is not None:
        raise NotImplementedError("nisa.local_gather with mask= is not supported by trnsim yet")
    per_core = 16 * (ix.size // ix.shape[0]) if ix.shape and ix.shape[0] else 0
    nv = per_core if num_valid_indices is None else int(num_valid_indices)
    out = _out((src.shape[0], nv, int(num_elem_per_idx)), src.dtype)
    _isa.local_gather(current().core, loc, out, src, ix, num_elem_per_idx=num_elem_per_idx,
                      num_valid_indices=num_valid_indices)
    return out


# -- copies at a dynamic offset ------------------------------------------------------------------------
def _dyn_of(t):
    """The one-element offset tiles a dynamically indexed view read (``src[ix, offsets[0, i] + iy]``)."""
    return tuple(getattr(t, "_dyn", None) or ())


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """A copy of ``src`` in a new SBUF tile, where ``src`` sits at a dynamic offset within each partition: index it
    with a one-element SBUF tile, alone or added to an index expression (``src[ix, offsets[0, i] + iy]``).  The
    offset is read when the call runs; the instruction records reading the offset tile."""
    loc = caller_location()
    src = materialize(src, loc)
    offs = _dyn_of(src)
    out = _out(src.shape, src.dtype if dtype is None else dtype)
    box = _prep(mask, src.shape, "tensor_copy_dynamic_src", loc)
    if not box_empty(box):
        w = "tensor_copy_dynamic_src"
        _isa.tensor_copy_dynamic_src(current().core, loc, _r(out, box, loc, w, "dst"), _r(src, box, loc, w, "src"),
                                     offs, engine=_eng(engine))
    return out


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """Copy ``src`` into ``dst``, where ``dst`` sits at a dynamic offset within each partition (indexed with a
    one-element SBUF tile, as for :func:`tensor_copy_dynamic_src`)."""
    loc = caller_location()
    src = materialize(src, loc)
    offs = _dyn_of(dst)
    if dtype is not None and np.dtype(dtype) != np.dtype(dst.dtype.np):
        raise NkiValidationError(f"tensor_copy_dynamic_dst: dtype={np.dtype(dtype)} differs from dst's dtype "
                                 f"{dst.dtype.name}; the copy writes dst's dtype", "tensor_copy_dynamic_dst",
                                 "dtype", str(np.dtype(dtype)), dst.dtype.name, loc)
    box = _prep(mask, dst.shape, "tensor_copy_dynamic_dst", loc)
    if not box_empty(box):
        w = "tensor_copy_dynamic_dst"
        _isa.tensor_copy_dynamic_dst(current().core, loc, _r(dst, box, loc, w, "dst"), _r(src, box, loc, w, "src"),
                                     offs, engine=_eng(engine))


def _track_masks(ns):
    """Instructions that take ``mask=`` and return a new tile remember the region it kept (tile.track_mask)."""
    import inspect
    for name, fn in list(ns.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != __name__:
            continue
        if "mask" in inspect.signature(fn).parameters:
            ns[name] = track_mask(fn)


_track_masks(globals())
