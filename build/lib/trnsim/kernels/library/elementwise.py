"""Elementwise kernels behind the PyTorch device's pointwise ops (NKI v2 style).

Inputs are 2-D HBM tensors ``[R, C]`` of one shape (the caller flattens and broadcasts).  Rows go on partitions in
tiles of ``pmax``; columns in chunks of ``FREE_TILE`` elements, so any size fits SBUF.
"""

from ..nki import isa as nisa
from ..nki import language as nl

FREE_TILE = 2048   # elements per partition per instruction: >= 2 KiB per partition for bf16 DMA efficiency


def _tiles(R, C):
    P = nl.tile_size.pmax
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        for c0 in range(0, C, FREE_TILE):
            yield r0, p, c0, min(FREE_TILE, C - c0)


def unary(x, op="exp"):
    """``op(x)`` on the Scalar Engine (``op`` an activation name: exp, tanh, sigmoid, gelu, silu, rsqrt, ...)."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
    for r0, p, c0, f in _tiles(R, C):
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, c0:c0 + f])
        nisa.activation(t, op, t)
        nisa.dma_copy(out[r0:r0 + p, c0:c0 + f], t)
    return out


def binary(a, b, op="add"):
    """``a op b`` on the Vector Engine (``op`` an ALU name: add, subtract, multiply, divide, maximum, ...)."""
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm, name="out")
    for r0, p, c0, f in _tiles(R, C):
        ta = nl.ndarray((p, f), dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((p, f), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(ta, a[r0:r0 + p, c0:c0 + f])
        nisa.dma_copy(tb, b[r0:r0 + p, c0:c0 + f])
        nisa.tensor_tensor(ta, ta, tb, op=op)
        nisa.dma_copy(out[r0:r0 + p, c0:c0 + f], ta)
    return out


def scalar_op(x, value=1.0, op="multiply"):
    """``x op value`` with an immediate scalar, on the Vector Engine."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
    for r0, p, c0, f in _tiles(R, C):
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, c0:c0 + f])
        nisa.tensor_scalar(t, t, op, float(value))
        nisa.dma_copy(out[r0:r0 + p, c0:c0 + f], t)
    return out


def copy(x, out_dtype=None):
    """A copy (with dtype conversion when ``out_dtype`` is given): HBM -> SBUF -> HBM."""
    R, C = x.shape
    dt = out_dtype or x.dtype
    out = nl.ndarray((R, C), dtype=dt, buffer=nl.shared_hbm, name="out")
    for r0, p, c0, f in _tiles(R, C):
        t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, c0:c0 + f])
        if dt != x.dtype:
            u = nl.ndarray((p, f), dtype=dt, buffer=nl.sbuf)
            nisa.tensor_copy(u, t)
            t = u
        nisa.dma_copy(out[r0:r0 + p, c0:c0 + f], t)
    return out
