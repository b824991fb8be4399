"""A blocked matmul for operands too large to keep resident in SBUF (NKI v2 style): C[M, N] = AT[K, M]^T @ B[K, N].

The output is computed in blocks of ``MB x NB``: up to 8 stationary tiles (128 rows each) by up to 2 moving tiles
(512 columns each), at most the 8 PSUM banks.  Two modes, chosen by :func:`block_shape`:

* whole K (``KC == K``): the ``at`` strip of a block row ([K, MB]) is loaded once and stays resident while every
  block of that row streams its ``b`` strip ([K, NB]) through fresh, double-buffered SBUF tiles;
* chunked K: when a whole-K strip does not fit, each block loads ``KC``-row chunks of both operands and its output
  tiles accumulate over the chunks in PSUM.

Loads are one 128-row slab per DMA (runs of MB or NB elements per partition).  Dimensions must be multiples of the
tile sizes (the caller pads).
"""

from ...isa import dma_timing
from ..nki import isa as nisa
from ..nki import language as nl

WHOLE_K_FRACTION = 0.75    # share of a partition the resident at strip and two b strips may take
CHUNK_FRACTION = 0.5       # share of a partition two double-buffered chunk pairs may take


def _strip_loads_ns(target, m, n, kt, mb, nb, itemsize):
    """DMA engine time of a whole-K plan's loads: each ``at`` strip once (``m / mb`` strips), a ``b`` strip per
    block (``m / mb x n / nb``), every one ``kt`` slabs of 128 rows whose runs are ``mb`` or ``nb`` elements long
    (the transfer model of ``isa.dma_timing``: descriptors per run against bandwidth)."""
    rows = -(-m // mb)
    return kt * rows * (_slab_ns(target, mb, itemsize) + -(-n // nb) * _slab_ns(target, nb, itemsize))


def _slab_ns(target, w, itemsize):
    """DMA engine time of one 128-row slab of ``w`` contiguous elements per row."""
    P = target.pmax
    return dma_timing.engine_time_ns(target, P * w * itemsize, P, 1)


def block_shape(target, m, n, k, itemsize):
    """``(MB, NB, KC)`` for an [m, k] x [k, n] product on ``target`` (``KC == k``: the whole-K mode).

    Whole K: among the blocks that fill at most the PSUM banks (``MB / 128 x NB / 512`` tiles; MB up to 8
    stationary tiles, NB one or two moving tiles) and whose resident ``at`` strip and two ``b`` strips fit
    ``WHOLE_K_FRACTION`` of a partition, the one whose loads keep the DMA engines busy the shortest time
    (:func:`_strip_loads_ns`: a wider block row loads ``b`` fewer times; wider strips move longer runs per
    descriptor); ties go to the first in the order below.  Chunked K when no whole-K block fits, or when its
    loads (both operands' chunks for every block) take less DMA time than the best whole-K plan's."""
    P, TN = target.pmax, target.moving_fmax
    kt = max(1, k // P)
    budget = WHOLE_K_FRACTION * target.sbuf_partition_bytes
    best = None
    for mt in (4, 8, 2, 1):
        mb = min(m, mt * P)
        for nb in (min(n, 2 * TN), min(n, TN)):
            if -(-mb // P) * -(-nb // TN) > target.psum_banks or kt * (mb + 2 * nb) * itemsize > budget:
                continue
            t = _strip_loads_ns(target, m, n, kt, mb, nb, itemsize)
            if best is None or t < best[0]:
                best = (t, mb, nb)
    mb = min(m, 4 * P)
    nb = min(n, 2 * TN)
    # chunked K loads both chunks for every block: its DMA time against the best whole-K plan's
    chunked = kt * -(-m // mb) * -(-n // nb) * (_slab_ns(target, mb, itemsize) + _slab_ns(target, nb, itemsize))
    if best is not None and best[0] <= chunked:
        return best[1], best[2], k
    kc_tiles = max(1, int(CHUNK_FRACTION * target.sbuf_partition_bytes // (2 * (mb + nb) * itemsize)))
    return mb, nb, min(k, kc_tiles * P)


def _load(dst, src, rows, width, k0, c0, TK):
    for k in range(rows):
        r0 = k0 + k * TK
        nisa.dma_copy(dst[:, k * width:(k + 1) * width], src[r0:r0 + TK, c0:c0 + width])


def blocked_matmul(at, b, mb=None, nb=None, kc=None, operand_dtype=None):
    """``operand_dtype``: the dtype the operand strips and chunks are held in SBUF (and multiplied in), cast by the
    loading DMAs (default: their own); C keeps ``b``'s dtype."""
    K, M = at.shape
    _, N = b.shape
    TK, TM = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax
    TN = min(nl.tile_size.gemm_moving_fmax, N)
    MB = mb or min(M, 4 * TM)
    NB = nb or TN
    KC = kc or K
    whole = KC >= K
    out = nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm, name="c")
    for m0 in range(0, M, MB):
        if whole:
            a_s = nl.ndarray((TK, (K // TK) * MB), dtype=operand_dtype or at.dtype, buffer=nl.sbuf,
                             name="at_strip")
            _load(a_s, at, K // TK, MB, 0, m0, TK)
        for n0 in range(0, N, NB):
            accs = [[nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum) for _ in range(NB // TN)]
                    for _ in range(MB // TM)]
            for k0 in range(0, K, KC):
                kt = min(KC, K - k0) // TK
                if not whole:
                    a_s = nl.ndarray((TK, kt * MB), dtype=operand_dtype or at.dtype, buffer=nl.sbuf,
                                     name="at_chunk")
                    _load(a_s, at, kt, MB, k0, m0, TK)
                b_s = nl.ndarray((TK, kt * NB), dtype=operand_dtype or b.dtype, buffer=nl.sbuf, name="b_chunk")
                _load(b_s, b, kt, NB, k0, n0, TK)
                for mi in range(MB // TM):
                    for ni in range(NB // TN):
                        for k in range(kt):
                            nisa.nc_matmul(accs[mi][ni], a_s[:, k * MB + mi * TM:k * MB + (mi + 1) * TM],
                                           b_s[:, k * NB + ni * TN:k * NB + (ni + 1) * TN])
            for mi in range(MB // TM):
                band = nl.ndarray((TM, NB), dtype=b.dtype, buffer=nl.sbuf, name="c_band")
                for ni in range(NB // TN):
                    nisa.tensor_copy(band[:, ni * TN:(ni + 1) * TN], accs[mi][ni])
                nisa.dma_copy(out[m0 + mi * TM:m0 + (mi + 1) * TM, n0:n0 + NB], band)
            accs = b_s = None      # release the block's PSUM tiles before the next block allocates
    return out
