"""A tiled matmul in plain NKI v2 style: C[M, N] = A[M, K] @ B[K, N], A given transposed as AT[K, M]."""

from ..nki import isa as nisa
from ..nki import language as nl


def tiled_matmul(at, b):
    """``at`` is [K, M] (the stationary side, contraction on partitions), ``b`` is [K, N]; returns [M, N]."""
    K, M = at.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    TN = min(TN, N)
    out = nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm, name="c")
    for m in range(M // TM):
        for n in range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // TK):
                a_t = nl.ndarray((TK, TM), dtype=at.dtype, buffer=nl.sbuf)
                b_t = nl.ndarray((TK, TN), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(a_t, at[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(b_t, b[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a_t, b_t)
            res = nl.ndarray((TM, TN), dtype=b.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], res)
    return out


def tensor_add(a, b):
    """Elementwise a + b over 128-row tiles."""
    P = nl.tile_size.pmax
    R, C = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm, name="sum")
    for r in range(R // P):
        ta = nl.ndarray((P, C), dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((P, C), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(ta, a[r * P:(r + 1) * P, :])
        nisa.dma_copy(tb, b[r * P:(r + 1) * P, :])
        nisa.tensor_tensor(ta, ta, tb, op=nl.add)
        nisa.dma_copy(out[r * P:(r + 1) * P, :], ta)
    return out
