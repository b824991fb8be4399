"""An NKI kernel for the difftest tests (plain NKI v2; imported after trnsim.install_nki())."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_k(at, b):
    """C = at.T @ b, K in tiles of 128 accumulated in PSUM (fp32), written as fp32."""
    K, M = at.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in range(K // 128):
        s = nl.ndarray((128, M), dtype=at.dtype, buffer=nl.sbuf)
        m = nl.ndarray((128, N), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(s, at[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(m, b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, s, m)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, acc)
    nisa.dma_copy(out, res)
    return out
