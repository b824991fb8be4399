"""The DMA's read-modify-write form of dma_copy (``dst_rmw_op``): dst = op(dst, src), atomically per row.

Legacy NKI exposes it as ``nisa.dma_copy(dst=..., src=..., dst_rmw_op=np.add)`` and as ``nl.atomic_rmw(dst,
value, op)``, whose destination is usually an HBM tensor indexed by a tile of row indices (a scatter: row ``p`` of
``src`` goes to row ``indices[p]`` of dst).  The reference allows one operator, add.

Numerics: the DMA engine reads each destination row, adds the source row in fp32 (casting inside a DMA goes through
FP32, docs/hardware.md#dma-in-detail) and writes it back rounded to dst's dtype, row after row in partition
order: two partitions naming the same destination row both land (the update is atomic per row), which a plain
scatter would lose.  Each instruction takes effect whole before another program's, so updates from several
programs of a launch to the same rows all land too (they are not reported as races between each other).

Cost: one DMA transfer over the source's partitions, one descriptor per row, moving the source bytes plus the
destination bytes it reads (``dma_cost_ns``).  That the read of the old values costs a second stream of the same
size is trnsim's assumption: the Neuron documents publish no figure for the read-modify-write form.
"""

from __future__ import annotations

import numpy as np

from ..memory import HBM, SBUF, Tensor
from .common import as_f32, read, require_space, write
from .dma import dma_cost_ns
from .errors import fail
from .ops import op_name

__all__ = ["dma_copy_rmw", "RMW_OPS", "ATOMIC_OPCODES"]

RMW_OPS = ("add",)                  # NKI reference, dma_copy / atomic_rmw: "only supports np.add currently"
ATOMIC_OPCODES = frozenset(("dma_copy_rmw",))   # opcodes whose updates to the same memory do not race


def _rows_of(dst):
    return list(dst) if isinstance(dst, (list, tuple)) else [dst[i:i + 1] for i in range(dst.shape[0])]


def _rmw_values(core, loc, rows, src, fn):
    I = "dma_copy_rmw"
    v = as_f32(read(core, src, "src", I, loc)).reshape(len(rows), -1)
    for p, r in enumerate(rows):           # in partition order: repeated rows accumulate
        old = as_f32(read(core, r, "dst", I, loc)).reshape(-1)
        write(core, r, fn(old, v[p]).astype(np.float32).reshape(r.shape))


def dma_copy_rmw(core, loc, dst, src, op, index=None):
    """dst = op(dst, src) on the DMA engines.  ``dst``: an HBM tensor ``[N, ...]`` or a sequence of N HBM row views
    (an indirect destination, ``index`` the SBUF tile of row indices it came from, read by the transfer); ``src``:
    N rows (SBUF or HBM) with as many elements per row as each destination row; ``op``: add."""
    I = "dma_copy_rmw"
    name = op_name(op)
    if name not in RMW_OPS:
        fail(I, "dst_rmw_op", f"is {name!r}; the DMA read-modify-write supports only {', '.join(RMW_OPS)}", name,
             RMW_OPS, loc)
    require_space(I, "src", src, (SBUF, HBM), loc)
    if isinstance(dst, Tensor):
        require_space(I, "dst", dst, (HBM,), loc)
        if not dst.shape:
            fail(I, "dst", "is 0-D; it needs a row dimension", list(dst.shape), "[N, ...]", loc)
    rows = _rows_of(dst)
    for i, r in enumerate(rows):
        require_space(I, f"dst row {i}", r, (HBM,), loc)
    n = len(rows)
    if not src.shape or src.shape[0] != n:
        fail(I, "src", f"has shape {list(src.shape)}; it must have {n} rows, one per destination row", list(src.shape),
             n, loc)
    per = src.size // n if n else 0
    for i, r in enumerate(rows):
        if r.size != per:
            fail(I, "dst", f"row {i} has {r.size} elements but each row of 'src' has {per}; they must match", r.size,
                 per, loc)
        if r.dtype.packed or src.dtype.packed:
            fail(I, "dst", f"has dtype {r.dtype.name}; packed MX data cannot be added", r.dtype.name, "not packed",
                 loc)
    reads = (src,) + tuple(rows)
    if index is not None:
        require_space(I, "index", index, (SBUF,), loc)
        reads = reads + (index,)
    core.compute(_rmw_values, core, loc, rows, src, np.add)
    dst_bytes = sum(r.nbytes for r in rows)
    nbytes = src.nbytes + dst_bytes
    part0 = 0
    if src.on_chip and src.buf.pfree:
        part0 = src.extent()[0] // src.buf.pfree
    core.record_dma(I, tuple(rows), reads, nbytes, n, dma_cost_ns(core.target, nbytes, n), loc, part0)
