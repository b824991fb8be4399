"""Row reductions behind the PyTorch device's sum/mean/max/var/norm (NKI v2 style).

``x`` is ``[R, C]`` in HBM: each row is reduced over its ``C`` columns into ``out[R, 1]`` (fp32 accumulation).
Columns are processed in chunks of ``FREE_TILE``; the partial results are combined on the Vector Engine.
"""

from ..nki import isa as nisa
from ..nki import language as nl

FREE_TILE = 4096


def row_reduce(x, op="add", out_dtype=None):
    """``op``-reduce each row of ``x`` (add, maximum, minimum); returns ``[R, 1]``."""
    R, C = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, 1), dtype=out_dtype or x.dtype, buffer=nl.shared_hbm, name="out")
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        acc = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        part = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        for i, c0 in enumerate(range(0, C, FREE_TILE)):
            f = min(FREE_TILE, C - c0)
            t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x[r0:r0 + p, c0:c0 + f])
            nisa.tensor_reduce(acc if i == 0 else part, op, t, axis=1)
            if i:
                nisa.tensor_tensor(acc, acc, part, op=op)
        res = acc
        if out.dtype != nl.float32:
            res = nl.ndarray((p, 1), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
        nisa.dma_copy(out[r0:r0 + p, 0:1], res)
    return out


def row_sum_of_squares(x):
    """Sum of squares of each row (the core of var and norm), via activation-with-reduce; returns ``[R, 1]`` fp32."""
    R, C = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((R, 1), dtype=nl.float32, buffer=nl.shared_hbm, name="out")
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        acc = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        part = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        for i, c0 in enumerate(range(0, C, FREE_TILE)):
            f = min(FREE_TILE, C - c0)
            t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
            sq = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(t, x[r0:r0 + p, c0:c0 + f])
            nisa.activation(sq, "square", t, reduce_op="add", reduce_res=acc if i == 0 else part)
            if i:
                nisa.tensor_tensor(acc, acc, part, op="add")
        nisa.dma_copy(out[r0:r0 + p, 0:1], acc)
    return out
