"""A matmul that keeps its operands resident in SBUF (NKI v2 style): C[M, N] = AT[K, M]^T @ B[K, N].

Each 128-row slab of ``b``, and of each column chunk of ``at`` (:func:`a_chunk`), is brought in with one large
DMA (few, big transfers instead of one per output tile); every output tile is accumulated over K in PSUM as soon
as its chunk is in, and each 128-row band of C leaves with one DMA.
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


def a_chunk(target, m, itemsize):
    """Columns of ``at`` per load in ``resident_matmul``: whole 128-column tiles enough for a partition's run to
    reach the DMA throughput curve's knee (``target.dma_knee_bytes_per_partition``), at most ``m``."""
    P = target.pmax
    return min(m, P * max(1, -(-int(target.dma_knee_bytes_per_partition) // (P * itemsize))))


def resident_matmul(at, b, chunk=None, operand_dtype=None):
    """``chunk``: columns of ``at`` per load (a multiple of 128; default all of them).  ``b`` is loaded first, then
    ``at`` by column chunks, each chunk's output tiles computed as soon as it is in, so the next chunk's loads
    overlap this one's matmuls.  ``operand_dtype``: the dtype the operands are held in SBUF (and multiplied in),
    cast by the loading DMAs (default: their own); C keeps ``b``'s dtype."""
    K, M = at.shape
    _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    TN = min(TN, N)
    KT = K // TK
    CW = int(chunk or M)
    if CW % TM:
        raise ValueError(f"resident_matmul: chunk {chunk} is not a multiple of {TM} columns")
    out = nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm, name="c")
    odt = operand_dtype or b.dtype
    b_s = nl.ndarray((TK, KT * N), dtype=odt, buffer=nl.sbuf, name="b_resident")
    for k in range(KT):
        nisa.dma_copy(b_s[:, k * N:(k + 1) * N], b[k * TK:(k + 1) * TK, :])
    for c0 in range(0, M, CW):
        cw = min(CW, M - c0)
        a_s = nl.ndarray((TK, KT * cw), dtype=operand_dtype or at.dtype, buffer=nl.sbuf, name="at_resident")
        for k in range(KT):
            nisa.dma_copy(a_s[:, k * cw:(k + 1) * cw], at[k * TK:(k + 1) * TK, c0:c0 + cw])
        for m in range(cw // TM):
            band = nl.ndarray((TM, N), dtype=b.dtype, buffer=nl.sbuf, name="c_band")
            for n in range(N // TN):
                acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                for k in range(KT):
                    nisa.nc_matmul(acc, a_s[:, k * cw + m * TM:k * cw + (m + 1) * TM],
                                   b_s[:, k * N + n * TN:k * N + (n + 1) * TN])
                nisa.tensor_copy(band[:, n * TN:(n + 1) * TN], acc)
            nisa.dma_copy(out[c0 + m * TM:c0 + (m + 1) * TM, :], band)
    return out
