"""A blocked matmul for operands too large to keep resident in SBUF (NKI v2 style): C[M, N] = AT[K, M]^T @ B[K, N].

The output is computed in blocks of ``MB x NB``: up to 8 stationary tiles (128 rows each) by up to 2 moving tiles
(512 columns each), at most the 8 PSUM banks.  Two modes, chosen by :func:`block_shape`:

* whole K (``KC == K``): the ``at`` strip of a block row ([K, MB]) is loaded once and stays resident while every
  block of that row streams its ``b`` strip ([K, NB]) through fresh, double-buffered SBUF tiles;
* chunked K: when a whole-K strip does not fit, each block loads ``KC``-row chunks of both operands and its output
  tiles accumulate over the chunks in PSUM.

Loads are one 128-row slab per DMA (runs of MB or NB elements per partition).  Dimensions must be multiples of the
tile sizes (the caller pads); a last block narrower than MB or NB is computed partial.  An elementwise epilogue (a
bias, an activation, a residual: the steps of ``fused``) can be applied to each block as it leaves PSUM.
"""

from ...isa import dma_timing
from ..nki import isa as nisa
from ..nki import language as nl
from . import fused

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


def epilogue_bytes(in_items, out_item, n_out, has_steps, small_items=()):
    """``(fixed, per_col)``: the SBUF bytes per partition :func:`blocked_matmul`'s epilogue holds besides the
    operands, per column of a block: the block's slice of each small input (``small_items``: their itemsizes), a
    band of each full input (``in_items``), the output band (the output's dtype for one output, an fp32 band and a
    copy per output for several) and the chain's fp32 work band, each twice (the next block's or band's tiles are
    allocated while these are in use); nothing fixed."""
    band = out_item if n_out == 1 else 4 + n_out * out_item
    return 0, 2 * (sum(small_items) + sum(in_items) + band + (4 if has_steps else 0))


def block_shape(target, m, n, k, itemsize, epilogue=(0, 0)):
    """``(MB, NB, KC)`` for an [m, k] x [k, n] product on ``target`` (``KC == k``: the whole-K mode).

    Whole K: among the blocks that fill at most the PSUM banks (``MB / 128 x NB / 512`` tiles; MB up to 8
    stationary tiles, NB one or two moving tiles) and whose resident ``at`` strip and two ``b`` strips fit
    ``WHOLE_K_FRACTION`` of a partition, the one whose loads keep the DMA engines busy the shortest time
    (:func:`_strip_loads_ns`: a wider block row loads ``b`` fewer times; wider strips move longer runs per
    descriptor); ties go to the first in the order below.  Chunked K when no whole-K block fits, or when its
    loads (both operands' chunks for every block) take less DMA time than the best whole-K plan's.

    ``epilogue``: ``(fixed, per_col)`` SBUF bytes per partition an epilogue holds besides the operands
    (:func:`epilogue_bytes`), taken from both budgets (a block ``nb`` wide holds ``fixed + per_col * nb``)."""
    P, TN = target.pmax, target.moving_fmax
    kt = max(1, k // P)
    budget = WHOLE_K_FRACTION * target.sbuf_partition_bytes
    fixed, per_col = epilogue
    best = None
    for mt in (4, 8, 2, 1):
        mb = min(m, mt * P)
        for nb in (min(n, 2 * TN), min(n, TN)):
            held = kt * (mb + 2 * nb) * itemsize + fixed + per_col * nb
            if -(-mb // P) * -(-nb // TN) > target.psum_banks or held > budget:
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
    room = CHUNK_FRACTION * target.sbuf_partition_bytes - fixed - per_col * nb
    kc_tiles = max(1, int(room // (2 * (mb + nb) * itemsize)))
    return mb, nb, min(k, kc_tiles * P)


def _load(dst, src, rows, width, k0, c0, TK):
    for k in range(rows):
        r0 = k0 + k * TK
        nisa.dma_copy(dst[:, k * width:(k + 1) * width], src[r0:r0 + TK, c0:c0 + width])


def _check_dims(K, M, N, TK, TM, TN):
    for what, v, t in (("contraction K", K, TK), ("rows M", M, TM), ("columns N", N, TN)):
        if v % t:
            raise ValueError(f"blocked_matmul: {what} = {v} is not a multiple of {t} (the caller pads)")


def blocked_matmul(at, b, *ins, mb=None, nb=None, kc=None, operand_dtype=None, n_small=0, steps=(), n_out=1):
    """``C = AT^T @ B`` by blocks (module docstring).  ``operand_dtype``: the dtype the operand strips and chunks
    are held in SBUF (and multiplied in), cast by the loading DMAs (default: their own); C keeps ``b``'s dtype.

    An elementwise epilogue (``steps``, as ``fused.matmul_epilogue``'s, run by the same ``fused._chain``) is applied
    to each output block as it leaves PSUM, after the block's K accumulation: the chain's first step reads the
    PSUM tile itself, the last writes the output's dtype.  ``ins``: full ``[M, N]`` inputs (a residual), loaded
    per 128-row band of the block, then the last ``n_small`` small ones (a bias row broadcast over partitions,
    ``[128, N]``), the block's columns loaded once per block (loaded whole, a vocabulary-wide bias would take most
    of a partition); ``n_out`` outputs are stored per band.  A last block narrower than ``mb`` or
    ``nb`` is computed partial."""
    K, M = at.shape
    _, N = b.shape
    TK, TM = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax
    TN = min(nl.tile_size.gemm_moving_fmax, N)
    _check_dims(K, M, N, TK, TM, TN)
    MB = mb or min(M, 4 * TM)
    NB = nb or TN
    KC = kc or K
    whole = KC >= K
    full = ins[:len(ins) - n_small]
    small = ins[len(ins) - n_small:]
    epi = bool(steps) or n_out != 1 or bool(ins)
    outs = [nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm, name="c" if not epi else f"c{i}")
            for i in range(max(1, n_out))]
    for m0 in range(0, M, MB):
        mbw = min(MB, M - m0)
        if whole:
            a_s = nl.ndarray((TK, (K // TK) * mbw), dtype=operand_dtype or at.dtype, buffer=nl.sbuf,
                             name="at_strip")
            _load(a_s, at, K // TK, mbw, 0, m0, TK)
        for n0 in range(0, N, NB):
            nbw = min(NB, N - n0)
            res = []
            for s in small:
                t = nl.ndarray((s.shape[0], nbw), dtype=s.dtype, buffer=nl.sbuf, name="epilogue_small")
                nisa.dma_copy(t, s[:, n0:n0 + nbw])
                res.append(t)
            accs = [[nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum) for _ in range(nbw // TN)]
                    for _ in range(mbw // TM)]
            for k0 in range(0, K, KC):
                kt = min(KC, K - k0) // TK
                if not whole:
                    a_s = nl.ndarray((TK, kt * mbw), dtype=operand_dtype or at.dtype, buffer=nl.sbuf,
                                     name="at_chunk")
                    _load(a_s, at, kt, mbw, k0, m0, TK)
                b_s = nl.ndarray((TK, kt * nbw), dtype=operand_dtype or b.dtype, buffer=nl.sbuf, name="b_chunk")
                _load(b_s, b, kt, nbw, k0, n0, TK)
                for mi in range(mbw // TM):
                    for ni in range(nbw // TN):
                        for k in range(kt):
                            nisa.nc_matmul(accs[mi][ni], a_s[:, k * mbw + mi * TM:k * mbw + (mi + 1) * TM],
                                           b_s[:, k * nbw + ni * TN:k * nbw + (ni + 1) * TN])
            for mi in range(mbw // TM):
                r0 = m0 + mi * TM
                if epi:
                    _epilogue(accs[mi], outs, full, res, steps, r0, n0, nbw, TM, TN)
                    continue
                band = nl.ndarray((TM, nbw), dtype=b.dtype, buffer=nl.sbuf, name="c_band")
                for ni in range(nbw // TN):
                    nisa.tensor_copy(band[:, ni * TN:(ni + 1) * TN], accs[mi][ni])
                nisa.dma_copy(outs[0][r0:r0 + TM, n0:n0 + nbw], band)
            accs = b_s = None      # release the block's PSUM tiles before the next block allocates
    return tuple(outs) if n_out != 1 else outs[0]


def _epilogue(accs, outs, full, res, steps, r0, n0, nbw, TM, TN):
    """One 128-row band of a block out of PSUM through the epilogue chain (``fused._chain``) into its outputs."""
    tiles = []
    for x in full:
        t = nl.ndarray((TM, nbw), dtype=x.dtype, buffer=nl.sbuf, name="epilogue_in")
        nisa.dma_copy(t, x[r0:r0 + TM, n0:n0 + nbw])
        tiles.append(t)
    single = len(outs) == 1
    # one output: the chain's last step (or the evacuation) writes its dtype; several: an fp32 band copied to each
    band = nl.ndarray((TM, nbw), dtype=outs[0].dtype if single else nl.float32, buffer=nl.sbuf, name="c_band")
    work = nl.ndarray((TM, nbw), dtype=nl.float32, buffer=nl.sbuf, name="epilogue_work") if steps else None
    for ni in range(nbw // TN):
        c = slice(ni * TN, (ni + 1) * TN)
        others = [t[:, c] for t in tiles] + [s[0:TM, c] for s in res]
        if steps:
            first = accs[ni]
            if steps[0] == "vec" and not others:    # x op x: at most one tensor_tensor input may be in PSUM
                first = work[:, c]
                nisa.tensor_copy(first, accs[ni])
            fused._chain(steps, first, others, lambda: work[:, c], band[:, c])
        else:
            nisa.tensor_copy(band[:, c], accs[ni])
    for o in outs:
        t = band
        if not single:
            t = nl.ndarray((TM, nbw), dtype=o.dtype, buffer=nl.sbuf, name="c_out")
            nisa.tensor_copy(t, band)
        nisa.dma_copy(o[r0:r0 + TM, n0:n0 + nbw], t)
