"""``nl.load``, ``nl.store`` and ``nl.load_transpose2d``: DMA between HBM and SBUF, including the indirect
(gather / scatter) forms ``t[indices_tile, ...]``.

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

from ... import isa as _isa
from ...isa.errors import NkiValidationError
from ...memory import HBM, SBUF, Tensor
from .dynamic import IndirectRows
from .lang_alloc import _new
from .lang_operands import _ctx, _track_masks
from .tile import box_empty, mask_box, materialize, resolve


# -- load / store ---------------------------------------------------------------------------------------
def _space_error(op, operand, t, want, loc):
    raise NkiValidationError(f"Expected operand '{operand}' of '{op}' to be in address space '{want}', but got a "
                             f"tile in '{t.buf.kind}' instead", op, operand, t.buf.kind, want, loc)


def load(src, *, mask=None, dtype=None, **kwargs):
    """Copy an HBM region into a new SBUF tile."""
    core, loc = _ctx()
    if isinstance(src, IndirectRows):
        return _load_rows(core, loc, src, mask, dtype)
    if not isinstance(src, Tensor):
        raise NkiValidationError(f"load: operand 'src' must be an HBM tensor, got {type(src).__name__}", "load",
                                 "src", src, None, loc)
    if src.buf.kind != HBM:
        _space_error("load", "src", src, "hbm", loc)
    if src.ndim == 0:           # one element (``hbm[b, h]``): a [1, 1] tile, one partition (an on-chip tile has
        src = src.reshape((1, 1))   # at least 2 dimensions: NKI known issues, "Insufficient rank")
    out = _new(src.shape, src.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, src.shape, loc, "load")
    if not box_empty(box):
        _isa.dma_copy(core, loc, resolve(out, box, loc, "load", "dst"), resolve(src, box, loc, "load", "src"))
    return out


def _load_rows(core, loc, src, mask, dtype):
    """``nl.load(t[indices_tile, ...])``: a gather, one DMA per index (the DMA's indirect mode moves a descriptor
    per index; as for the v2 gathers, the read of the index tile is not recorded as a dependency)."""
    out = _new(src.shape, src.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, src.shape, loc, "load")
    if box_empty(box):
        return out
    (p0, p1), free = ((0, len(src.rows)), None) if box is None else (box[0], box[1:])
    src.check(loc, p0, p1)          # the indices of the partitions the mask keeps must be in bounds
    fs = () if free is None else tuple(slice(lo, hi) for lo, hi in free)
    for p in range(p0, p1):
        s = src.rows[p][(slice(0, 1),) + fs] if fs else src.rows[p]
        _isa.dma_copy(core, loc, out[(slice(p, p + 1),) + fs], s)
    return out


def _store_rows(core, loc, dst, value, mask):
    """``nl.store(t[indices_tile, ...], value)``: a scatter, one DMA per index (rows named twice: the later
    partition's value lands last, as the DMA moves them in order)."""
    box = mask_box(mask, dst.shape, loc, "store")
    if box_empty(box):
        return
    value = materialize(value, loc)
    if not isinstance(value, Tensor) or value.size != dst.size:
        raise NkiValidationError(f"store: value must be a tile of {dst.size} elements (shape {list(dst.shape)}) for "
                                 f"{len(dst.rows)} indirect rows, got {getattr(value, 'shape', type(value).__name__)}",
                                 "store", "value", getattr(value, "shape", None), list(dst.shape), loc)
    v = resolve(value, None, loc, "store", "value")
    (p0, p1), free = ((0, len(dst.rows)), None) if box is None else (box[0], box[1:])
    dst.check(loc, p0, p1)
    fs = () if free is None else tuple(slice(lo, hi) for lo, hi in free)
    for p in range(p0, p1):
        if fs:
            _isa.dma_copy(core, loc, dst.rows[p][(slice(0, 1),) + fs], v.reshape(dst.shape)[(slice(p, p + 1),) + fs])
        else:
            _isa.dma_copy(core, loc, dst.rows[p], v[p:p + 1])


def store(dst, value, *, mask=None, **kwargs):
    """Copy a tile into an HBM region."""
    core, loc = _ctx()
    if isinstance(dst, IndirectRows):
        return _store_rows(core, loc, dst, value, mask)
    if not isinstance(dst, Tensor):
        raise NkiValidationError(f"store: operand 'dst' must be an HBM tensor, got {type(dst).__name__}", "store",
                                 "dst", dst, None, loc)
    if dst.buf.kind != HBM:
        _space_error("store", "dst", dst, "hbm", loc)
    if dst.ndim == 0:           # one element: stored from a [1, 1] tile (as nl.load reads one)
        dst = dst.reshape((1, 1))
    value = materialize(value, loc)
    box = mask_box(mask, dst.shape, loc, "store")
    if box_empty(box):
        return
    d = resolve(dst, box, loc, "store", "dst")
    if isinstance(value, Tensor):
        if not value.on_chip:
            _space_error("store", "value", value, "sbuf", loc)
        _isa.dma_copy(core, loc, d, resolve(value, box, loc, "store", "value"))
    else:
        t = _new(d.shape, dst.dtype, SBUF, "", loc)
        _isa.memset(core, loc, t, value)
        _isa.dma_copy(core, loc, d, t)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """Load a 2-D HBM region [F, P] transposed into a new SBUF tile [P, F] (a DMA transpose)."""
    core, loc = _ctx()
    if not isinstance(src, Tensor) or src.buf.kind != HBM:
        if isinstance(src, Tensor):
            _space_error("load_transpose2d", "src", src, "hbm", loc)
        raise NkiValidationError("load_transpose2d: operand 'src' must be an HBM tensor", "load_transpose2d",
                                 "src", src, None, loc)
    if src.ndim != 2:
        raise NkiValidationError(f"load_transpose2d: operand 'src' has rank {src.ndim}; it must be 2-D",
                                 "load_transpose2d", "src", src.ndim, 2, loc)
    box = mask_box(mask, src.shape, loc, "load_transpose2d")
    s = resolve(src, box, loc, "load_transpose2d", "src")
    out = _new((src.shape[1], src.shape[0]), src.dtype if dtype is None else dtype, SBUF, "", loc)
    if not box_empty(box):
        ob = None if box is None else (box[1], box[0])
        _isa.dma_transpose(core, loc, resolve(out, ob, loc, "load_transpose2d", "dst"), s)
    return out


_track_masks(globals())
