"""Microbenchmarks of the DMA transpose (trainium2_arch.rst, "DMA Transpose"; the model in
trnsim/isa/dma_timing.py ``transpose_engine_time_ns``).

* "DMA transpose on Trainium2 can achieve up to 90% DMA throughput utilization given hardware-friendly tensor
  access patterns, compared to up to 100% throughput utilization for a DMA copy" (HBM to SBUF);
* "SBUF2SBUF transpose can achieve up to 50% of DMA throughput on Trainium2";
* the 16 engines write one [128, 16] SBUF tile at a time: a destination whose inner run is 8 elements writes
  half-empty tiles (trnsim: a partial tile costs a whole one, so half the throughput; the guide says only "at the
  cost of DMA performance", so this claim checks the model's own statement, not a figure of the document).

Each throughput is a stream of independent transposes (fresh destination tiles, all in flight), bytes moved over
the span from the first byte moving to the last, against the stream of 32 KiB-per-partition copies
(``dma_throughput(32768)``, the core's practical rate).
"""

from __future__ import annotations

import numpy as np

from trnsim.kernels.nki import isa as nisa
from trnsim.kernels.nki import language as nl

__all__ = ["dma_transpose_claims"]

_ARCH = "trainium2_arch.rst, DMA Transpose: Performance Consideration"


def _profile(kernel, *shapes_dtypes, target="trn2"):
    from . import _profile as p
    return p(kernel, *shapes_dtypes, target=target)


def _hbm_transposes(src, n):
    """``n`` HBM->SBUF transposes of [512, 128] bf16 blocks of ``src`` into fresh [128, 512] tiles."""
    for i in range(n):
        t = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(t, src[i * 512:(i + 1) * 512, :])
    return None


def _sbuf_transposes(src, n, inner=128):
    """``n`` SBUF->SBUF transposes of [inner, 128] bf16 tiles loaded from ``src`` into fresh [128, inner] tiles."""
    a = nl.ndarray((inner, 128 * n), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(a, src)
    for i in range(n):
        t = nl.ndarray((128, inner), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(t, a[:, i * 128:(i + 1) * 128])
    return None


def _throughput(p, opcode="dma_transpose"):
    tl = p.timeline
    rows = [r for r in tl.rows() if r.opcode == opcode]
    first = min(r.data_start for r in rows)
    last = max(r.end for r in rows)
    return sum(r.nbytes for r in rows) / (last - first)


def transpose_throughput(kind, target="trn2", n=32, inner=128):
    bf16 = nl.bfloat16
    if kind == "hbm":
        p = _profile(lambda s: _hbm_transposes(s, n), ((512 * n, 128), bf16), target=target)
    else:
        p = _profile(lambda s: _sbuf_transposes(s, n, inner), ((inner, 128 * n), bf16), target=target)
    return _throughput(p)


def dma_transpose_claims(target="trn2"):
    from . import Claim, dma_throughput
    copy = dma_throughput(32768, target)
    return [
        Claim("DMA transpose HBM->SBUF throughput (% of a DMA copy's)", 90.0,
              100.0 * transpose_throughput("hbm", target) / copy, "%", 0.03, _ARCH),
        Claim("DMA transpose SBUF->SBUF throughput (% of a DMA copy's)", 50.0,
              100.0 * transpose_throughput("sbuf", target) / copy, "%", 0.03, _ARCH),
        Claim("DMA transpose SBUF->SBUF with 8-element runs (half-filled [128, 16] tiles), % of a copy's", 25.0,
              100.0 * transpose_throughput("sbuf", target, inner=8) / copy, "%", 0.03,
              _ARCH + "; a partial tile costs a whole one (trnsim's reading)"),
    ]
