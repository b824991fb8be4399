"""The deferred sentinel fill of a new buffer with claimed runs (``Buffer.claim_range``): runs written before the
first read are not filled; at the first read every element no claimed run stored reads as the sentinel; a buffer
whose runs cover it is never filled.  A natively held HBM output written tile by tile (``reinterpret.Native.store``)
claims its contiguous tiles: the same results as with the fill done up front."""

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.machine import NeuronCore
from trnsim.memory import dtype_of, space
from trnsim.memory.space import Buffer

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def _buf(n=100, dt="float32"):
    return Buffer(NeuronCore("trn2").chip.hbm, dtype_of(dt), (n,), name="b")


def test_claimed_runs_are_not_filled_and_the_gaps_are():
    b = _buf()
    assert b.fresh
    d = b.claim_range(10, 20)
    d[10:20] = 1.0
    d = b.claim_range(40, 50)
    d[40:50] = 2.0
    d = b.claim_range(20, 25)                    # touches [10, 20): merged
    d[20:25] = 3.0
    assert b._claimed == [(10, 25), (40, 50)] and b.fresh
    got = b.data                                   # the first read: the gaps get the sentinel
    assert not b.fresh and b._claimed is None
    assert np.isnan(got[:10]).all() and np.isnan(got[25:40]).all() and np.isnan(got[50:]).all()
    np.testing.assert_array_equal(got[10:25], [1.0] * 10 + [3.0] * 5)
    np.testing.assert_array_equal(got[40:50], 2.0)


def test_runs_covering_the_buffer_need_no_fill():
    b = _buf()
    b._data[:] = 7.0                              # what np.empty might hold: a fill would overwrite it
    for lo in (50, 0, 25, 75, 60):                 # out of order and overlapping
        b.claim_range(lo, min(100, lo + 25))
    assert not b.fresh and b._claimed is None
    np.testing.assert_array_equal(b.data, 7.0)    # nothing filled


def test_too_many_runs_fill_the_gaps(monkeypatch):
    monkeypatch.setattr(space, "MAX_CLAIMED_RUNS", 3)
    b = _buf()
    for k in range(4):
        d = b.claim_range(10 * k, 10 * k + 5)
        d[10 * k:10 * k + 5] = k
    assert not b.fresh                             # the fourth run did the pending fill
    got = b.data
    for k in range(4):
        np.testing.assert_array_equal(got[10 * k:10 * k + 5], k)
        assert np.isnan(got[10 * k + 5:10 * k + 10]).all()


def test_claim_whole_after_runs_keeps_them():
    b = _buf()
    b.claim_range(0, 10)[0:10] = 5.0
    assert b.claim_whole() is False               # the gaps are filled now; a failed write's unclaim is not due
    assert not b.fresh
    np.testing.assert_array_equal(b.data[:10], 5.0)
    assert np.isnan(b.data[10:]).all()


def test_claim_outside_the_buffer_is_refused():
    with pytest.raises(ValueError, match=r"claimed run \[90, 101\) is outside its 100 elements"):
        _buf().claim_range(90, 101)


@nki.jit
def _tiles(x, full_rows):
    """Writes a new HBM output tile by tile (row tiles of the whole width, or column tiles: strided), leaving the
    last 64 rows unwritten, then reads it back into a second output."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    back = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=3.0)
        if full_rows:
            rows = 128 if i < R // 128 - 1 else 64
            nisa.dma_copy(dst=out[i * 128:i * 128 + rows, :], src=t[0:rows, :])
        else:
            for c in range(0, C, 32):
                nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, c:c + 32], src=t[:, c:c + 32])
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=out[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=back[i * 128:(i + 1) * 128, :], src=t)
    return out, back


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("full_rows", [True, False])
def test_native_output_written_in_tiles(dt, full_rows, monkeypatch):
    x = (np.random.default_rng(5).standard_normal((512, 64)) * 2).astype(dt)
    monkeypatch.setattr(space, "NATIVE_MIN_BYTES", 0)          # outputs held natively
    claims = []
    orig = Buffer.claim_range
    monkeypatch.setattr(Buffer, "claim_range", lambda b, lo, hi: claims.append((lo, hi)) or orig(b, lo, hi))
    out, back = _tiles(x, full_rows)
    # row tiles are contiguous runs (out's and back's); out's column tiles are not (back's 4 row tiles only)
    assert len(claims) == (8 if full_rows else 4)
    monkeypatch.setattr(space, "NATIVE_MIN_BYTES", 1 << 40)    # the float32 shadow store, filled up front
    out2, back2 = _tiles(x, full_rows)
    np.testing.assert_array_equal(out.view(np.uint8), out2.view(np.uint8))
    np.testing.assert_array_equal(back.view(np.uint8), back2.view(np.uint8))
    if full_rows:                      # the 64 rows never written read as the sentinel (NaN), in both
        assert np.isnan(out[448:].astype(np.float32)).all() and np.isnan(back[448:].astype(np.float32)).all()
    assert not np.isnan(out[:448].astype(np.float32)).any()
