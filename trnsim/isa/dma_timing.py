"""How long a DMA transfer keeps the DMA engines busy: descriptors and bandwidth (docs/hardware.md, "DMA in
detail").

A transfer is split over the core's DMA engines by partition (each engine serves 8 partitions).  Each engine
processes its share as descriptors -- one per contiguous run of bytes, at least one per partition row -- and
moves the bytes at its practical rate.  Two limits, whichever is slower:

* bandwidth: ``bytes on the engine / practical rate`` (17 / 23 / 33 B/ns per engine);
* packet rate: ``descriptors on the engine x descriptor time``.  The DMA overview's plot of throughput against
  bytes per partition (128 partitions) rises in proportion to the size up to about 2.4 KiB and then saturates
  ("the DMA packet rate -- not HBM bandwidth -- becomes the limiting factor" for small payloads, bandwidth
  guide): the descriptor time is the time the engine needs for the knee's payload at its practical rate.

The two limits are joined by a smooth maximum ``(a^p + b^p)^(1/p)`` whose sharpness reproduces the plot's
rounded knee (81% at 2 KiB, 97% at 4 KiB).  The fixed semaphore-to-start cost (~1,300 ns) is a latency in front
of the engines' work, which other transfers in flight overlap (the scheduler handles it).  The benchmarks in
``benchmarks/microbench/`` check these statements against the documents' figures.
"""

from __future__ import annotations

import math

__all__ = ["contiguous_run", "descriptors_per_row", "engine_time_ns", "transfer_engines", "transpose_tiles",
           "transpose_engine_time_ns"]


def transfer_engines(target, rows: int) -> int:
    """DMA engines a transfer over ``rows`` partitions uses (8 partitions each, at most 16)."""
    return min(target.dma_engines_per_core, -(-max(1, rows) // target.dma_partitions_per_engine))


def contiguous_run(shape, strides) -> int:
    """Elements of the innermost contiguous run of a view, within one row (the first dimension is the row:
    a partition on chip, the leading axis in HBM)."""
    run = 1
    for s, st in zip(reversed(shape[1:]), reversed(strides[1:])):
        if s == 1:
            continue
        if st != run:
            break
        run *= s
    return run


def descriptors_per_row(row_elems: int, *runs: int) -> int:
    """Descriptors one row of ``row_elems`` elements needs when its elements are contiguous in runs of
    ``runs`` elements on each side of the transfer (a descriptor covers a run contiguous on both sides)."""
    run = min([r for r in runs if r > 0] or [row_elems])
    return max(1, math.ceil(row_elems / max(1, run)))


def engine_time_ns(target, nbytes: float, rows: int, descs_per_row: int = 1) -> float:
    """Busy time of each engine a transfer of ``nbytes`` over ``rows`` partitions uses (the engines work in
    parallel, each on its rows), without the fixed semaphore-to-start latency."""
    rows = max(1, int(rows))
    engines = transfer_engines(target, rows)
    rows_per_engine = -(-rows // engines)
    rate = target.dma_bytes_per_ns_per_engine
    t_bw = rows_per_engine * (nbytes / rows) / rate
    t_desc = rows_per_engine * max(1, descs_per_row) * (target.dma_knee_bytes_per_partition / rate)
    p = target.dma_knee_sharpness
    hi = max(t_bw, t_desc)
    if hi <= 0.0:
        return 0.0
    return hi * ((t_bw / hi) ** p + (t_desc / hi) ** p) ** (1.0 / p)


def transpose_tiles(target, rows: int, row_elems: int, run: int) -> int:
    """SBUF tiles a DMA transpose writes: its destination of ``rows`` partitions x ``row_elems`` elements, whose
    innermost free run of ``run`` contiguous elements is cut into tiles of ``dma_transpose_tile_elems`` (16)
    elements, over ``dma_transpose_tile_partitions`` (128) partitions.  A partial tile (fewer partitions, a run
    that is not a multiple of 16) counts as a whole one: the architecture guide says only that such shapes cost
    DMA performance."""
    tp, tf = target.dma_transpose_tile_partitions, target.dma_transpose_tile_elems
    rows = max(1, int(rows))
    row_elems = max(1, int(row_elems))
    run = max(1, min(int(run), row_elems))
    return -(-rows // tp) * -(-row_elems // run) * -(-run // tf)


def transpose_engine_time_ns(target, rows: int, row_elems: int, run: int, itemsize: int, from_hbm: bool) -> float:
    """Busy time of the DMA engines for one DMA transpose (without the fixed semaphore-to-start latency).  All the
    core's engines work together on one tile at a time (trainium2_arch.rst, "DMA Transpose"), at a share of the
    core's DMA throughput: up to 90% from HBM, up to 50% SBUF to SBUF (same page).  The transfer is not split into
    per-row descriptors as a copy is: its cost is its tiles' bytes at that throughput."""
    tiles = transpose_tiles(target, rows, row_elems, run)
    tile_bytes = target.dma_transpose_tile_partitions * target.dma_transpose_tile_elems * max(1, int(itemsize))
    eff = target.dma_transpose_hbm_efficiency if from_hbm else target.dma_transpose_sbuf_efficiency
    return tiles * tile_bytes / (eff * target.dma_engines_per_core * target.dma_bytes_per_ns_per_engine)
