"""A matmul that keeps its operands resident in SBUF (NKI v2 style): C[M, N] = AT[K, M]^T @ B[K, N].

Each 128-row slab of ``at`` and ``b`` is brought in with one large DMA (few, big transfers instead of one per
output tile), then every output tile is accumulated over K in PSUM and each 128-row band of C leaves with one DMA.
This is the kernel behind the PyTorch device's matmul ops when both operands fit the SBUF budget below;
``tiled_matmul`` (matmul.py) streams tiles otherwise.  Dimensions must be multiples of the tile sizes (the caller
pads).
"""

from ..nki import isa as nisa
from ..nki import language as nl

SBUF_BUDGET_FRACTION = 0.75    # share of a partition the resident operands and one output band may take


def fits(target, m, k, n, itemsize):
    kt = (k + target.pmax - 1) // target.pmax
    need = kt * (m + n) * itemsize + n * itemsize
    return need <= SBUF_BUDGET_FRACTION * target.sbuf_partition_bytes


def resident_matmul(at, b):
    K, M = at.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    TN = min(TN, N)
    KT = K // TK
    out = nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm, name="c")
    a_s = nl.ndarray((TK, KT * M), dtype=at.dtype, buffer=nl.sbuf, name="at_resident")
    b_s = nl.ndarray((TK, KT * N), dtype=b.dtype, buffer=nl.sbuf, name="b_resident")
    for k in range(KT):
        nisa.dma_copy(a_s[:, k * M:(k + 1) * M], at[k * TK:(k + 1) * TK, :])
        nisa.dma_copy(b_s[:, k * N:(k + 1) * N], b[k * TK:(k + 1) * TK, :])
    for m in range(M // TM):
        band = nl.ndarray((TM, N), dtype=b.dtype, buffer=nl.sbuf, name="c_band")
        for n in range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(KT):
                nisa.nc_matmul(acc, a_s[:, k * M + m * TM:k * M + (m + 1) * TM],
                               b_s[:, k * N + n * TN:k * N + (n + 1) * TN])
            nisa.tensor_copy(band[:, n * TN:(n + 1) * TN], acc)
        nisa.dma_copy(out[m * TM:(m + 1) * TM, :], band)
    return out
