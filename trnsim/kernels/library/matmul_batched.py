"""A batch of resident matmuls in one launch (NKI v2 style): C[b] = AT[b]^T @ B[b] for every ``b`` of
``at[Bt, K, M]`` and ``b[Bt, K, N]``.

The kernel behind the PyTorch device's ``bmm``/``baddbmm`` (and other batched products) when one product's operands
fit the resident kernel's SBUF budget (``matmul_resident.fits``).  The batch is a loop in the one launch: ``group``
products share each DMA (their 128-row slabs side by side along the free axis, so a partition's share of a
transfer grows with the group), every tile is allocated inside the loop, so the next group's loads run while the
Tensor Engine works on this one, as far as SBUF capacity allows in schedule time.  Per product the work is
``resident_matmul``'s: output tiles of 128 x up to 512 accumulated over K in PSUM, each 128-row band stored once
per group.  Dimensions must be multiples of the tile sizes (the caller pads).
"""

from ..nki import isa as nisa
from ..nki import language as nl
from .matmul_resident import SBUF_BUDGET_FRACTION


def batch_group(target, m, k, n, itemsize):
    """Products per DMA: enough that a partition's share of the smaller operand slab reaches the DMA throughput
    curve's knee (``target.dma_knee_bytes_per_partition``), at most 16, within the resident kernel's SBUF budget."""
    kt = max(1, k // target.pmax)
    g = max(1, min(16, -(-int(target.dma_knee_bytes_per_partition) // (min(m, n) * itemsize))))
    while g > 1 and g * (kt * (m + n) + n) * itemsize > SBUF_BUDGET_FRACTION * target.sbuf_partition_bytes:
        g -= 1
    return g


def batched_matmul(at, b, group=1, operand_dtype=None):
    """``operand_dtype``: the dtype the operands are held in SBUF (and multiplied in), cast by the loading DMAs
    (default: their own); C keeps ``b``'s dtype."""
    Bt, K, M = at.shape
    _, _, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    TN = min(TN, N)
    if K % TK or M % TM or N % TN or tuple(b.shape[:2]) != (Bt, K):
        raise ValueError(f"batched_matmul: shapes at {tuple(at.shape)}, b {tuple(b.shape)} must be [B, K, M] and "
                         f"[B, K, N] with K, M multiples of {TK} and N of {TN} (the caller pads)")
    if int(group) < 1:
        raise ValueError(f"batched_matmul: group {group} must be at least 1")
    KT = K // TK
    out = nl.ndarray((Bt, M, N), dtype=b.dtype, buffer=nl.shared_hbm, name="c")
    for b0 in range(0, Bt, int(group)):
        g = min(int(group), Bt - b0)
        a_s = nl.ndarray((TK, KT * g * M), dtype=operand_dtype or at.dtype, buffer=nl.sbuf, name="at_resident")
        b_s = nl.ndarray((TK, KT * g * N), dtype=operand_dtype or b.dtype, buffer=nl.sbuf, name="b_resident")
        for k in range(KT):
            nisa.dma_copy(a_s[:, k * g * M:(k + 1) * g * M], at[b0:b0 + g, k * TK:(k + 1) * TK, :].permute((1, 0, 2)))
            nisa.dma_copy(b_s[:, k * g * N:(k + 1) * g * N], b[b0:b0 + g, k * TK:(k + 1) * TK, :].permute((1, 0, 2)))
        for m in range(M // TM):
            band = nl.ndarray((TM, g * N), dtype=b.dtype, buffer=nl.sbuf, name="c_band")
            for j in range(g):
                for n in range(N // TN):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in range(KT):
                        a0 = (k * g + j) * M + m * TM
                        c0 = (k * g + j) * N + n * TN
                        nisa.nc_matmul(acc, a_s[:, a0:a0 + TM], b_s[:, c0:c0 + TN])
                    nisa.tensor_copy(band[:, j * N + n * TN:j * N + (n + 1) * TN], acc)
            nisa.dma_copy(out[b0:b0 + g, m * TM:(m + 1) * TM, :].permute((1, 0, 2)), band)
            band = None
        a_s = b_s = None        # the next group's operands are fresh allocations: its loads need not wait
    return out
