"""DMA instructions: dma_copy and dma_transpose, with the transfer cost model of the DMA engines."""

from __future__ import annotations

import numpy as np

from ..memory import HBM, PSUM, SBUF
from .common import as_f32, read, require_space, write, write_same_dtype
from .dma_timing import contiguous_run, descriptors_per_row, engine_time_ns, transfer_engines
from .errors import fail

__all__ = ["dma_copy", "dma_transpose", "dma_cost_ns", "dma_engines_used"]


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


def dma_copy(core, loc, dst, src, priority=None, oob_mode=None, dge_mode=None, engine=None):
    I = "dma_copy"
    require_space(I, "dst", dst, (SBUF, HBM, PSUM), loc)
    require_space(I, "src", src, (SBUF, HBM, PSUM), loc)
    if dst.size != src.size:
        fail(I, "dst", f"has {dst.size} elements (shape {list(dst.shape)}) but 'src' has {src.size} "
             f"(shape {list(src.shape)}); they must match", dst.size, src.size, loc)
    if core.execute:
        v = read(core, src, "src", I, loc)
        if dst.dtype.name == src.dtype.name:
            write_same_dtype(core, dst, v)
        else:
            write(core, dst, (as_f32(v) if dst.dtype.is_float else v).reshape(dst.shape))
    nbytes = max(dst.nbytes, src.nbytes)
    rows = _rows(dst) if dst.on_chip else _rows(src)
    p0 = _part0(dst) if dst.on_chip else _part0(src)
    core.record_dma(I, (dst,), (src,), nbytes, rows,
                    dma_cost_ns(core.target, nbytes, rows, _descs(dst, src, rows)), loc, p0)


_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}
_TRANSPOSE_RUN = 16       # elements contiguous per write of a DMA transpose (trainium2_arch)


def dma_transpose(core, loc, dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None):
    I = "dma_transpose"
    require_space(I, "dst", dst, (SBUF,), loc)
    require_space(I, "src", src, (SBUF, HBM), loc)
    if src.dtype != dst.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src' has {src.dtype.name}; they must match",
             dst.dtype.name, src.dtype.name, loc)
    nd = src.ndim
    if nd not in _AXES:
        fail(I, "src", f"has rank {nd}; dma_transpose supports rank 2, 3 or 4", nd, (2, 3, 4), loc)
    axes = tuple(axes) if axes is not None else _AXES[nd]
    if axes != _AXES[nd]:
        fail(I, "axes", f"{axes} is not supported for rank {nd}; the supported permutation is {_AXES[nd]}",
             axes, _AXES[nd], loc)
    out_shape = tuple(src.shape[a] for a in axes)
    if dst.size != src.size:
        fail(I, "dst", f"has shape {list(dst.shape)}; the transposed source has shape {list(out_shape)}",
             list(dst.shape), list(out_shape), loc)
    if core.execute:
        v = np.transpose(read(core, src, "src", I, loc), axes)
        write(core, dst, np.ascontiguousarray(v).reshape(dst.shape))
    rows = _rows(dst)
    # the 16 engines write one [128, 16] SBUF tile at a time with its 16 elements contiguous (trainium2_arch,
    # hardware.md): a descriptor per 16-element run of each row
    descs = descriptors_per_row(max(1, dst.size // max(1, rows)), _TRANSPOSE_RUN)
    core.record_dma(I, (dst,), (src,), src.nbytes, rows, dma_cost_ns(core.target, src.nbytes, rows, descs), loc,
                    _part0(dst))
