"""The numerics fast paths (s18m) against the general paths on the same inputs, bit for bit.

- ``nc_matmul`` overwriting a plain fp32 PSUM tile computes ``np.matmul(..., out=)`` straight into it; with
  ``NeuronCore.matmul_f32`` replaced by another function (as a user may) the general path runs: product into a
  temporary, then ``psum_accumulate``.  Both must store the same bits (NaN, inf, negative zero included), for
  accumulate None/False/True, partly written PSUM, non-contiguous PSUM views and strict mode.
- A bf16 write of fp32 values rounds straight into the tile's float32 storage (``_bf16_round(x, out=)``); the
  new-array form is the reference.
"""
import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.isa import tensor_engine
from trnsim.kernels.jit import run_kernel
from trnsim.machine.core import NeuronCore
from trnsim.memory.dtypes import _bf16_round

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

K, M, N = 64, 32, 48


def _special(shape, seed, dtype):
    """Random values with NaN, +-inf, +-0 and values that round across a bf16 boundary mixed in."""
    r = np.random.default_rng(seed)
    a = r.standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    idx = r.choice(flat.size, size=min(24, flat.size), replace=False)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38], np.float32)
    flat[idx] = specials[np.arange(idx.size) % specials.size]
    return a.astype(dtype)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).tobytes()


def _general_path(monkeypatch):
    # a different function object: nc_matmul no longer takes the direct-into-PSUM path
    monkeypatch.setattr(NeuronCore, "matmul_f32", staticmethod(lambda a, b: a @ b))


def _kernel(acc, out_dtype, view, prewrite):
    def k(x, y, z):
        ps = nl.ndarray((M, 2 * N) if view else (M, N), nl.float32, buffer=nl.psum)
        dst = ps[:, 0:2 * N:2] if view else ps          # a strided (non-contiguous) PSUM view
        tx = nl.ndarray((K, M), x.dtype, buffer=nl.sbuf)
        ty = nl.ndarray((K, N), y.dtype, buffer=nl.sbuf)
        tz = nl.ndarray((K, N), z.dtype, buffer=nl.sbuf)
        nisa.dma_copy(tx, x)
        nisa.dma_copy(ty, y)
        nisa.dma_copy(tz, z)
        if prewrite:                                    # the first half of the columns written before
            nisa.nc_matmul(dst[:, 0:N // 2], tx, ty[:, 0:N // 2])
        if acc == "default":
            nisa.nc_matmul(dst, tx, ty)
            nisa.nc_matmul(dst, tx, tz)                 # accumulates into the first
        else:
            nisa.nc_matmul(dst, tx, ty, accumulate=acc)
        res = nl.ndarray((M, N), out_dtype, buffer=nl.sbuf)
        nisa.tensor_copy(res, dst)
        out = nl.ndarray((M, N), out_dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, res)
        return out
    return k


def _inputs(seed, dt):
    return (_special((K, M), seed, dt), _special((K, N), seed + 1, dt), _special((K, N), seed + 2, dt))


CASES = [(acc, od, view, pre) for acc in ("default", False, None)
         for od in ("float32", "bfloat16", "float8_e4m3") for view in (False, True) for pre in (False, True)]


@pytest.mark.parametrize("acc,out_dtype,view,prewrite", CASES)
def test_matmul_into_psum_same_bits_as_general_path(monkeypatch, acc, out_dtype, view, prewrite):
    args = _inputs(7, ml_dtypes.bfloat16)
    k = _kernel(acc, out_dtype, view, prewrite)
    fast = run_kernel(k, args, {}, (1,), "trn2").outputs
    with monkeypatch.context() as mp:
        _general_path(mp)
        general = run_kernel(k, args, {}, (1,), "trn2").outputs
    assert _bits(fast) == _bits(general)
    if out_dtype == "float32" and not prewrite and acc in (False, None):
        # and both are the product (float64 reference; inputs bf16 so products are exact in fp32)
        x, y, _ = (a.astype(np.float64) for a in args)
        with np.errstate(invalid="ignore", over="ignore"):
            ref = x.T @ y
            mag = np.abs(x).T @ np.abs(y)
        got = np.asarray(fast, np.float64)
        assert np.isnan(got[np.isnan(ref)]).all()           # a NaN input (or inf * 0) gives NaN
        fin = mag < 1e38                                    # no fp32 partial sum can overflow here
        assert fin.sum() > M * N // 4                       # (the specials spoil some rows and columns)
        assert np.all(np.abs(got[fin] - ref[fin]) <= 1e-5 * mag[fin] + 1e-30)


def test_matmul_fp32_inputs_same_bits(monkeypatch):
    args = _inputs(11, np.float32)
    k = _kernel(None, "float32", False, False)
    fast = run_kernel(k, args, {}, (1,), "trn2").outputs
    with monkeypatch.context() as mp:
        _general_path(mp)
        general = run_kernel(k, args, {}, (1,), "trn2").outputs
    assert _bits(fast) == _bits(general)


def test_fast_path_taken_and_not_taken(monkeypatch):
    """The direct path runs for a plain fp32 tile with the default matmul only (so the comparisons above compare
    two different paths)."""
    calls = []
    orig = tensor_engine._overwrite_into

    def spy(dst, s, m, M_, N_):
        r = orig(dst, s, m, M_, N_)
        calls.append(r)
        return r
    monkeypatch.setattr(tensor_engine, "_overwrite_into", spy)
    args = _inputs(3, ml_dtypes.bfloat16)
    run_kernel(_kernel(False, "float32", False, False), args, {}, (1,), "trn2")
    assert calls == [True]
    calls.clear()
    run_kernel(_kernel(False, "float32", True, False), args, {}, (1,), "trn2")
    assert calls == [False]                             # a strided view: the general path
    calls.clear()
    with monkeypatch.context() as mp:
        _general_path(mp)
        run_kernel(_kernel(False, "float32", False, False), args, {}, (1,), "trn2")
    assert calls == []


def test_strict_mode_still_refuses_unwritten_operand():
    def k(x):
        ps = nl.ndarray((M, N), nl.float32, buffer=nl.psum)
        tx = nl.ndarray((K, M), x.dtype, buffer=nl.sbuf)
        ty = nl.ndarray((K, N), x.dtype, buffer=nl.sbuf)        # never written
        nisa.dma_copy(tx, x)
        nisa.nc_matmul(ps, tx, ty, accumulate=False)
        return ps
    with pytest.raises(Exception, match="never written"):
        run_kernel(k, (_special((K, M), 1, ml_dtypes.bfloat16),), {}, (1,), "trn2", strict=True)


def test_strict_mode_same_bits(monkeypatch):
    args = _inputs(5, ml_dtypes.bfloat16)
    k = _kernel("default", "bfloat16", False, True)
    fast = run_kernel(k, args, {}, (1,), "trn2", strict=True).outputs
    with monkeypatch.context() as mp:
        _general_path(mp)
        general = run_kernel(k, args, {}, (1,), "trn2", strict=True).outputs
    assert _bits(fast) == _bits(general)


def test_bf16_round_into_storage_same_bits():
    r = np.random.default_rng(0)
    x = r.standard_normal((64, 96)).astype(np.float32) * np.float32(1e3)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38, 1e-40, -1e-40],
                        np.float32)
    x.reshape(-1)[:specials.size] = specials
    u = x.view(np.uint32).reshape(-1)
    # NaNs whose payload sits in the low bits only (rounding them as numbers would give inf), and exact ties
    u[20:24] = [0x7F800001, 0xFF800001, 0x7FC00001, 0x3F808000]
    u[24:26] = [0x3F818000, 0x00008000]
    for src in (x, x[:, ::2], x.T):                    # contiguous, strided, transposed inputs
        ref = _bf16_round(src)
        out = np.full(src.shape, 7.0, np.float32)
        got = _bf16_round(src, out=out)
        assert got.base is out or got is out or np.shares_memory(got, out)
        assert _bits(out) == _bits(ref)
        # ml_dtypes agrees on every non-NaN value; NaN stays NaN
        fin = ~np.isnan(src)
        assert _bits(ref[fin]) == _bits(src[fin].astype(ml_dtypes.bfloat16).astype(np.float32))
        assert np.isnan(ref[~fin]).all()
        # a NaN is stored as a bfloat16 value (lower half zero), its upper half kept, the quiet bit added only
        # where the upper half alone would be an infinity
        nb = ref[~fin].view(np.uint32)
        assert not (nb & 0xFFFF).any()
        want = src[~fin].view(np.uint32) & 0xFFFF0000
        want = np.where((want & 0x007F0000) == 0, want | 0x00400000, want)
        assert nb.tolist() == want.tolist()


def test_bf16_write_in_place_and_strided_take_the_general_path():
    """tensor_copy / tensor_scalar into bf16 tiles, contiguous and strided, in place (source and destination
    the same tile): every result equals ml_dtypes' rounding of the fp32 value."""
    x = _special((M, N), 9, np.float32)
    x.view(np.uint32)[0, :2] = [0x7F800001, 0xFF800003]       # NaNs with only low payload bits

    def k(a):
        t = nl.ndarray((M, N), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        b1 = nl.ndarray((M, N), nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(b1, t)                               # fresh whole tile: the direct path
        b2 = nl.ndarray((M, 2 * N), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(b2, 0.0)
        nisa.tensor_copy(b2[:, 0:2 * N:2], t)                 # strided destination: the general path
        o0 = nl.ndarray((M, N), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(o0, b1)
        nisa.tensor_scalar(b1, b1, nl.multiply, 3.0)          # in place
        o1 = nl.ndarray((M, N), nl.bfloat16, buffer=nl.shared_hbm)
        o2 = nl.ndarray((M, 2 * N), nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(o1, b1)
        nisa.dma_copy(o2, b2)
        return o0, o1, o2
    o0, o1, o2 = run_kernel(k, (x,), {}, (1,), "trn2").outputs
    bf = x.astype(ml_dtypes.bfloat16)
    fin = ~np.isnan(x)
    # the direct path (o0) and the general one (o2, strided) store the same bits, NaNs included
    assert _bits(np.asarray(o0)) == _bits(np.asarray(o2)[:, ::2])
    assert _bits(np.asarray(o0)[fin]) == _bits(bf[fin])
    # every NaN stays NaN, the two low-payload ones included (they become the quiet NaN of their sign, as in
    # ml_dtypes; before the fix their bf16 output was their upper half, an infinity)
    assert np.isnan(np.asarray(o0, np.float32)[~fin]).all()
    assert _bits(np.asarray(o0)[0, :2]) == _bits(bf[0, :2])
    with np.errstate(over="ignore", invalid="ignore"):
        ref1 = (bf.astype(np.float32) * np.float32(3.0)).astype(ml_dtypes.bfloat16)
    assert _bits(np.asarray(o1)[fin]) == _bits(ref1[fin])
    assert np.isnan(np.asarray(o1, np.float32)[~fin]).all()     # every NaN read back from b1 is still one
