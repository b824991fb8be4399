"""DMA instructions: dma_copy and dma_transpose, with the transfer cost model of the DMA engines."""

from __future__ import annotations

import numpy as np

from ..memory import HBM, PSUM, SBUF
from ..memory.tensor import GatheredView
from .common import as_f32, flag, int_tuple, number, read, require_space, write, write_same_dtype
from .dma_dge import dge_of
from .dma_timing import (contiguous_run, descriptors_per_row, engine_time_ns, transfer_engines,
                         transpose_engine_time_ns)
from .errors import fail
from .ops import op_name

__all__ = ["dma_copy", "dma_transpose", "dma_compute", "dma_cost_ns", "dma_engines_used"]


dma_engines_used = transfer_engines      # DMA engines a transfer of ``partitions`` rows is spread over


def dma_cost_ns(target, nbytes: int, partitions: int, descs_per_row: int = 1) -> float:
    """Time of one transfer of ``nbytes`` spread over ``partitions`` rows, each row moved as ``descs_per_row``
    descriptors: the fixed semaphore-to-start cost plus each engine's busy time (``dma_timing.engine_time_ns``:
    the slower of the engine's practical rate and its descriptor rate)."""
    return target.dma_fixed_ns + engine_time_ns(target, nbytes, partitions, descs_per_row)


def _descs(dst, src, rows):
    """Descriptors per row of a dst <- src transfer: one per run contiguous on both sides."""
    row_elems = max(1, dst.size // max(1, rows))
    return descriptors_per_row(row_elems, contiguous_run(dst.shape, dst.strides),
                               contiguous_run(src.shape, src.strides))


def _rows(t):
    return t.shape[0] if (t.on_chip and t.shape) else (t.shape[0] if t.shape else 1)


def _part0(t):
    """First partition an on-chip operand touches (0 for HBM): it picks the DMA engines of the transfer."""
    if not t.on_chip:
        return 0
    pf = t.buf.pfree
    return (t.extent()[0] // pf) if pf else 0


def _copy_values(core, loc, dst, src):
    v = read(core, src, "src", "dma_copy", loc)
    if dst.dtype.name == src.dtype.name:
        write_same_dtype(core, dst, v)
    else:
        write(core, dst, (as_f32(v) if dst.dtype.is_float else v).reshape(dst.shape))


def dma_copy(core, loc, dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None, _piece=None):
    """``_piece=(i, n)``: this transfer is row ``i`` of an ``n``-row indirect gather/scatter that the front end
    issues row by row (one DMA instruction on the hardware): the first row carries the instruction's descriptor
    generation for all ``n`` rows, the others none of their own (isa/dma_dge.py)."""
    I = "dma_copy"
    require_space(I, "dst", dst, (SBUF, HBM, PSUM), loc)
    require_space(I, "src", src, (SBUF, HBM, PSUM), loc)
    if dst.size != src.size:
        fail(I, "dst", f"has {dst.size} elements (shape {list(dst.shape)}) but 'src' has {src.size} "
             f"(shape {list(src.shape)}); they must match", dst.size, src.size, loc)
    if (dst.dtype.packed or src.dtype.packed) and dst.dtype != src.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src' has {src.dtype.name}; packed MX data is copied only "
             "to the same dtype (reinterpret with .view())", dst.dtype.name, src.dtype.name, loc)
    nbytes = max(dst.nbytes, src.nbytes)
    rows = _rows(dst) if dst.on_chip else _rows(src)
    descs = _descs(dst, src, rows)
    if _piece is None:
        dge = dge_of(core, I, loc, dge_mode, engine, descs)      # descriptor generation and queue (dma_dge.py)
    else:                    # the whole instruction's descriptors per partition: its rows spread over partitions
        i, n = _piece
        dge = dge_of(core, I, loc, dge_mode, engine, descs * -(-n // min(n, core.target.sbuf_partitions)),
                     gathered=True)
        if i:
            dge = (dge[0], dge[1], 0.0)
    core.compute(_copy_values, core, loc, dst, src)
    p0 = _part0(dst) if dst.on_chip else _part0(src)
    core.record_dma(I, (dst,), (src,), nbytes, rows, dma_cost_ns(core.target, nbytes, rows, descs), loc, p0, dge)


_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
_TRANSPOSE_RUN = 16       # elements contiguous per write of a DMA transpose (trainium2_arch)


def dma_transpose(core, loc, dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None):
    I = "dma_transpose"
    if isinstance(src, GatheredView):
        return _dma_transpose_gathered(core, loc, dst, src, axes, dge_mode, oob_mode)
    require_space(I, "dst", dst, (SBUF,), loc)
    require_space(I, "src", src, (SBUF, HBM), loc)
    # the DMA engines cast as dma_copy does (the reference states no dtype rule for dma_transpose), but packed MX
    # bits cannot be converted
    if (dst.dtype.packed or src.dtype.packed) and dst.dtype != src.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src' has {src.dtype.name}; packed MX data is moved only "
             "to the same dtype", dst.dtype.name, src.dtype.name, loc)
    nd = src.ndim
    axes = _transpose_axes(I, nd, axes, loc)
    mode = getattr(dge_mode, "name", dge_mode)
    if isinstance(mode, str) and mode == "hwdge":
        # NKI reference, dma_transpose, "DMA Direct Transpose Constraints" of the hardware DGE
        if src.dtype.itemsize != 2:
            fail(I, "src", f"has dtype {src.dtype.name}; a hardware-DGE transpose moves 2-byte dtypes only",
                 src.dtype.name, "2 bytes", loc)
        if src.shape[-1] > 128:
            fail(I, "src", f"has last dimension {src.shape[-1]}; a hardware-DGE transpose takes at most 128",
                 src.shape[-1], 128, loc)
        ok0 = src.shape[0] == 16 if nd == 2 else (src.shape[0] in (1, 2, 4, 8, 16) and
                                                   (src.shape[0] * src.shape[-2]) % 16 == 0)
        if not ok0:
            fail(I, "src", f"has shape {list(src.shape)}; a hardware-DGE transpose needs shape[0] == 16 (2-D) or "
                 "shape[0] in {1, 2, 4, 8, 16} with shape[0] * shape[-2] a multiple of 16", list(src.shape), 16, loc)
    out_shape = tuple(src.shape[a] for a in axes)
    if dst.size != src.size:
        fail(I, "dst", f"has shape {list(dst.shape)}; the transposed source has shape {list(out_shape)}",
             list(dst.shape), list(out_shape), loc)
    if core.execute:
        v = np.transpose(read(core, src, "src", I, loc), axes)
        if dst.dtype.name == src.dtype.name:
            write_same_dtype(core, dst, np.ascontiguousarray(v).reshape(dst.shape))
        else:
            write(core, dst, np.ascontiguousarray(as_f32(v) if dst.dtype.is_float else v).reshape(dst.shape))
    rows = _rows(dst)
    # the 16 engines write one [128, 16] SBUF tile at a time with its 16 elements contiguous (trainium2_arch,
    # docs/hardware.md): a descriptor per 16-element run of each row (descriptor generation)
    descs = descriptors_per_row(max(1, dst.size // max(1, rows)), _TRANSPOSE_RUN)
    itemsize = max(dst.dtype.itemsize, src.dtype.itemsize)
    _record_transpose(core, I, loc, dst, (src,), src.nbytes, itemsize, not src.on_chip,
                      dge_of(core, I, loc, dge_mode, None, descs))


def _record_transpose(core, I, loc, dst, srcs, nbytes, itemsize, from_hbm, dge):
    """Record a DMA transpose: all the core's DMA engines work on it together (trainium2_arch, "DMA Transpose"),
    for its tiles' time at the transpose's share of the DMA throughput (``dma_timing.transpose_engine_time_ns``)
    after the fixed semaphore-to-start cost."""
    tg = core.target
    rows = _rows(dst)
    ns = tg.dma_fixed_ns + transpose_engine_time_ns(tg, rows, dst.size // max(1, rows),
                                                     contiguous_run(dst.shape, dst.strides), itemsize, from_hbm)
    every = tg.dma_engines_per_core * tg.dma_partitions_per_engine
    core.record_dma(I, (dst,), tuple(srcs), nbytes, every, ns, loc, 0, dge)


def _transpose_axes(I, nd, axes, loc, what=""):
    """The permutation of a rank-``nd`` transpose: the one trnsim supports for that rank, checked if given."""
    if nd not in _AXES:
        fail(I, "src", f"{what}has rank {nd}; dma_transpose supports rank 2, 3 or 4", nd, (2, 3, 4), loc)
    axes = int_tuple(I, "axes", axes, loc) if axes is not None else _AXES[nd]
    if axes != _AXES[nd]:
        fail(I, "axes", f"{axes} is not supported for rank {nd}; the supported permutation is {_AXES[nd]}",
             axes, _AXES[nd], loc)
    return axes


def _dma_transpose_gathered(core, loc, dst, src, axes, dge_mode, oob_mode):
    """The indirect form: ``src`` is ``ap(vector_offset=...)`` with indices that are not evenly spaced (a
    :class:`GatheredView`, one row view per index).  The source tile is the gathered rows stacked along dimension 0;
    it is transposed as the direct form does (so gathered row ``i`` lands at index ``i`` of dst's last dimension).
    The NKI reference's "DMA Indirect Transpose Constraints" (software DGE) are checked where trnsim can see them:
    src in HBM, a 2-byte dtype, ``src.shape[-1] <= 128``, ``src.shape[0]`` a multiple of 16, a 4-D src with
    ``shape[1]`` or ``shape[2]`` equal to 1, dge_mode unknown or swdge.  The index tensor itself was resolved by
    ``ap()`` and is not checked here (its 2-D uint32 SBUF layout).  A row whose index is out of range raises, or
    with ``oob_mode=skip`` leaves its dst column unwritten (as ``dma_copy`` skips the row).  Cost: the direct
    form's, from HBM (``_record_transpose``); the read of the index tensor is not a dependency (as for
    ``dma_copy``'s gathers)."""
    I = "dma_transpose"
    require_space(I, "dst", dst, (SBUF,), loc)
    shape = tuple(src.shape)
    nd = len(shape)
    what = f"(gathered `{src.name}`)"
    axes = _transpose_axes(I, nd, axes, loc, what + " ")
    mode = getattr(dge_mode, "name", dge_mode)
    if isinstance(mode, str) and mode not in ("unknown", "swdge"):
        fail(I, "dge_mode", f"is {mode}; an indirect (vector_offset) transpose runs on the software DGE only "
             "(unknown or swdge)", mode, ("unknown", "swdge"), loc)
    if src.dtype.itemsize != 2:
        fail(I, "src", f"{what} has dtype {src.dtype.name}; an indirect transpose moves 2-byte dtypes only",
             src.dtype.name, "2 bytes", loc)
    if shape[-1] > 128:
        fail(I, "src", f"{what} has last dimension {shape[-1]}; an indirect transpose takes at most 128",
             shape[-1], 128, loc)
    if shape[0] % 16:
        fail(I, "src", f"{what} gathers {shape[0]} rows; an indirect transpose needs a multiple of 16",
             shape[0], 16, loc)
    if nd == 4 and shape[1] != 1 and shape[2] != 1:
        fail(I, "src", f"{what} has shape {list(shape)}; a 4-D indirect transpose needs shape[1] or shape[2] "
             "equal to 1", list(shape), 1, loc)
    rows = src.rows
    good = [r for r in rows if not isinstance(r, Exception)]
    if good and good[0].buf.kind != HBM:
        fail(I, "src", f"{what} is in {good[0].buf.kind.upper()}; an indirect transpose reads HBM",
             good[0].buf.kind, (HBM,), loc)
    size = 1
    for n in shape:
        size *= n
    out_shape = tuple(shape[a] for a in axes)
    if dst.size != size:
        fail(I, "dst", f"has shape {list(dst.shape)}; the transposed source has shape {list(out_shape)}",
             list(dst.shape), list(out_shape), loc)
    skip = getattr(oob_mode, "name", oob_mode) == "skip"
    bad = [i for i, r in enumerate(rows) if isinstance(r, Exception)]
    if bad and not skip:
        raise rows[bad[0]]
    if bad and tuple(dst.shape) != out_shape:
        fail(I, "dst", f"has shape {list(dst.shape)}; with rows skipped (oob_mode=skip) trnsim needs dst in the "
             f"transposed source's shape {list(out_shape)}", list(dst.shape), list(out_shape), loc)
    if core.execute and good:
        row_shape = (1,) + shape[1:]
        full = np.zeros(shape, dtype=np.asarray(good[0].np).dtype)
        for i, r in enumerate(rows):
            if not isinstance(r, Exception):
                full[i:i + 1] = np.asarray(read(core, r, "src", I, loc)).reshape(row_shape)
        v = np.transpose(full, axes)
        same = dst.dtype.name == src.dtype.name

        def put(t, a):
            a = np.ascontiguousarray(a)
            if same:
                write_same_dtype(core, t, a.reshape(t.shape))
            else:
                write(core, t, (as_f32(a) if t.dtype.is_float else a).reshape(t.shape))
        if not bad:
            put(dst, v)
        else:                               # only the gathered rows' columns of dst are written
            lead = (slice(None),) * (len(out_shape) - 1)
            for i, r in enumerate(rows):
                if not isinstance(r, Exception):
                    put(dst[lead + (slice(i, i + 1),)], v[lead + (slice(i, i + 1),)])
    nbytes = len(good) * (size // max(1, shape[0])) * src.dtype.itemsize
    prow = _rows(dst)
    descs = descriptors_per_row(max(1, dst.size // max(1, prow)), _TRANSPOSE_RUN)
    _record_transpose(core, I, loc, dst, good, nbytes, max(dst.dtype.itemsize, src.dtype.itemsize), True,
                      dge_of(core, I, loc, dge_mode, None, descs, gathered=True))


DMA_COMPUTE_MAX_SRCS = 16    # NKI reference, dma_compute: "The max number of source tensors in srcs is 16"


def dma_compute(core, loc, dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=None):
    """dst = srcs[0] + srcs[1] + ... computed by the DMA engines in fp32 (summed in list order) and cast to
    dst's dtype; ``reduce_op`` must be add and every scale 1.0 (the only forms the reference allows)."""
    I = "dma_compute"
    require_space(I, "dst", dst, (SBUF, HBM), loc)
    if not isinstance(srcs, (list, tuple)) or not 1 <= len(srcs) <= DMA_COMPUTE_MAX_SRCS:
        fail(I, "srcs", f"must be a list of 1 to {DMA_COMPUTE_MAX_SRCS} tensors, got {srcs!r}"[:160], srcs,
             DMA_COMPUTE_MAX_SRCS, loc)
    for i, s in enumerate(srcs):
        require_space(I, f"srcs[{i}]", s, (SBUF, HBM), loc)
        if s.size != dst.size:
            fail(I, f"srcs[{i}]", f"has {s.size} elements (shape {list(s.shape)}) but 'dst' has {dst.size}; they "
                 "must match", s.size, dst.size, loc)
    name = op_name(reduce_op)
    if name != "add":
        fail(I, "reduce_op", f"is {name!r}; dma_compute supports only add", name, "add", loc)
    if scales is not None:
        if not isinstance(scales, (list, tuple)) or len(scales) != len(srcs):
            fail(I, "scales", f"must be a list of {len(srcs)} numbers (one per source), got {scales!r}"[:160],
                 scales, len(srcs), loc)
        for sc in scales:
            if number(I, "scales", sc, loc) != 1.0:
                fail(I, "scales", f"holds {sc!r}; every scale must be 1.0", sc, 1.0, loc)
    if not flag(I, "unique_indices", unique_indices, loc):
        fail(I, "unique_indices", "is False; non-unique indices are not supported", False, True, loc)
    if core.execute:
        acc = None
        for i, s in enumerate(srcs):
            v = as_f32(read(core, s, f"srcs[{i}]", I, loc)).reshape(-1)
            acc = v.copy() if acc is None else np.add(acc, v, dtype=np.float32)
        write(core, dst, acc.reshape(dst.shape))
    nbytes = sum(s.nbytes for s in srcs)
    rows = _rows(dst) if dst.on_chip else _rows(srcs[0])
    core.record_dma(I, (dst,), tuple(srcs), nbytes, rows, dma_cost_ns(core.target, nbytes, rows), loc,
                    _part0(dst) if dst.on_chip else 0)
