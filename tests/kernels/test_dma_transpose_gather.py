"""``nisa.dma_transpose`` of a gathered source (``ap(vector_offset=...)`` with indices that are not evenly spaced):
the indirect transpose of the NKI reference, checked against NumPy fancy indexing + transpose."""

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.isa.errors import NkiValidationError

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

NB, L, D, G = 40, 4, 8, 16          # blocks in the cache, block length, head size, gathered blocks
# small integers and quarters: exact in bfloat16, so a data move must reproduce them bit for bit
CACHE = ((np.arange(NB * L * D, dtype=np.float64).reshape(NB, L, D) % 37) / 4 - 4).astype(ml_dtypes.bfloat16)


def _kernel(rank, skip=False, dtype=None):
    @nki.jit
    def k(cache, idx):
        ix = nl.ndarray((G, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        if rank == 4:          # [G, 1, L, D] -> [D, 1, L, G]
            src = cache.ap([[L * D, G], [1, 1], [D, L], [1, D]], offset=0, vector_offset=ix, indirect_dim=0)
            shape = (D, 1, L, G)
        else:                  # rank 2: row 0 of each block, [G, D] -> [D, G]
            src = cache.ap([[L * D, G], [1, D]], offset=0, vector_offset=ix, indirect_dim=0)
            shape = (D, G)
        t = nl.ndarray(shape, dtype=cache.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=-99.0)
        kw = {"oob_mode": nisa.oob_mode.skip} if skip else {}
        nisa.dma_transpose(dst=t, src=src, axes=(3, 1, 2, 0) if rank == 4 else (1, 0),
                           dge_mode=nisa.dge_mode.swdge, **kw)
        out = nl.ndarray(shape, dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    return k


def _want(idx, rank):
    rows = np.full((G, L, D), -99.0)
    for r, i in enumerate(idx):
        if i < NB:
            rows[r] = CACHE[i].astype(np.float64)
    if rank == 4:
        return np.transpose(rows[:, None], (3, 1, 2, 0))
    return rows[:, 0, :].T


IDX = [3, 17, 0, 39, 8, 8, 21, 5, 30, 2, 11, 36, 19, 7, 25, 14]     # not evenly spaced: a gather


@pytest.mark.parametrize("rank", [4, 2])
def test_gathered_dma_transpose_matches_numpy(rank):
    got = _kernel(rank)(CACHE, np.array(IDX, dtype=np.uint32).reshape(G, 1))
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), _want(IDX, rank))


def test_evenly_spaced_indices_give_the_same_result_as_a_gather():
    idx = list(range(2, 2 + 2 * G, 2))                     # a strided view, not a GatheredView
    got = _kernel(4)(CACHE, np.array(idx, dtype=np.uint32).reshape(G, 1))
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), _want(idx, 4))


def test_out_of_range_rows_raise_or_are_skipped():
    idx = list(IDX)
    idx[5] = 2**32 - 1                    # the "invalid row" marker nki-library kernels use
    idx[12] = NB
    a = np.array(idx, dtype=np.uint32).reshape(G, 1)
    got = _kernel(4, skip=True)(CACHE, a)
    want = _want(idx, 4)
    assert np.all(want[..., 5] == -99.0) and np.all(want[..., 12] == -99.0)    # those columns left as they were
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want)
    with pytest.raises(IndexError, match="vector_offset row"):
        _kernel(4)(CACHE, a)


def test_indirect_transpose_constraints_are_refused():
    a = np.array(IDX, dtype=np.uint32).reshape(G, 1)
    with pytest.raises(NkiValidationError, match="2-byte"):
        _kernel(4)(CACHE.astype(np.float32), a)

    @nki.jit
    def hw(cache, idx):
        ix = nl.ndarray((G, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        t = nl.ndarray((D, G), dtype=cache.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=cache.ap([[L * D, G], [1, D]], offset=0, vector_offset=ix, indirect_dim=0),
                           dge_mode=nisa.dge_mode.hwdge)
        out = nl.ndarray((D, G), dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    with pytest.raises(NkiValidationError, match="software DGE"):
        hw(CACHE, a)

    @nki.jit
    def twelve(cache, idx):                # 12 rows: not a multiple of 16
        ix = nl.ndarray((12, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        t = nl.ndarray((D, 12), dtype=cache.dtype, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=cache.ap([[L * D, 12], [1, D]], offset=0, vector_offset=ix, indirect_dim=0))
        out = nl.ndarray((D, 12), dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    with pytest.raises(NkiValidationError, match="multiple of 16"):
        twelve(CACHE, a[:12])
