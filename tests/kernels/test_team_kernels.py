import sys
import os

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

BF16 = ml_dtypes.bfloat16
F8 = ml_dtypes.float8_e4m3


@pytest.fixture(scope="module")
def k(nki):
    import team_kernels
    return team_kernels


def f64(a):
    return np.asarray(a).astype(np.float64)


def rel_err(got, ref):
    return np.max(np.abs(f64(got) - ref)) / max(np.max(np.abs(ref)), 1e-30)


def test_add_grid(k, nki):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 512)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    out = nki.simulate(k.add_grid)(a, b)
    assert out.dtype == np.float32 and out.shape == a.shape
    np.testing.assert_allclose(out, f64(a) + f64(b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dt,tol", [(BF16, 1e-5), (F8, 1e-5), (np.float32, 1e-5)])
def test_matmul_psum_accumulation(k, nki, dt, tol):
    rng = np.random.default_rng(1)
    at = rng.standard_normal((512, 128)).astype(dt)
    b = rng.standard_normal((512, 256)).astype(dt)
    out = nki.simulate(k.matmul_psum)(at, b)
    ref = f64(at).T @ f64(b)      # exact inputs, fp32 accumulation: error only from fp32 sums
    assert rel_err(out, ref) < tol


def test_matmul_torch_tensors_in_and_out(k, nki):
    torch = pytest.importorskip("torch")
    at = torch.randn(256, 128, dtype=torch.bfloat16)
    b = torch.randn(256, 64, dtype=torch.bfloat16)
    out = nki.simulate(k.matmul_psum)(at, b)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    ref = at.double().T @ b.double()
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-5


@pytest.mark.parametrize("dt,tol", [(np.float32, 1e-5), (BF16, 2**-7)])
def test_softmax(k, nki, dt, tol):
    x = np.random.default_rng(2).standard_normal((128, 300)).astype(dt) * 3
    out = nki.simulate(k.softmax_rows)(x)
    xx = f64(x)
    e = np.exp(xx - xx.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(f64(out), ref, rtol=tol, atol=tol * ref.max())


def test_rmsnorm(k, nki):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    w = rng.standard_normal((1, 256)).astype(np.float32)
    out = nki.simulate(k.rmsnorm)(x, w)
    ref = f64(x) / np.sqrt((f64(x) ** 2).mean(axis=1, keepdims=True) + 1e-6) * f64(w)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_layernorm_bn_stats(k, nki):
    x = (np.random.default_rng(4).standard_normal((96, 1024)) * 2 + 5).astype(np.float32)
    out = nki.simulate(k.layernorm)(x)
    xx = f64(x)
    ref = (xx - xx.mean(axis=1, keepdims=True)) / np.sqrt(xx.var(axis=1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_transpose_tensor_engine_is_exact(k, nki, dt):
    x = np.random.default_rng(5).standard_normal((128, 96)).astype(dt)
    x[0, 0] = np.nan
    out = nki.simulate(k.transpose_te)(x)
    np.testing.assert_array_equal(f64(out), f64(x).T)


def test_causal_attention(k, nki):
    rng = np.random.default_rng(6)
    d, S = 64, 128
    qt = rng.standard_normal((d, S)).astype(BF16)
    kt = rng.standard_normal((d, S)).astype(BF16)
    v = rng.standard_normal((S, d)).astype(BF16)
    out = nki.simulate(k.causal_attention)(qt, kt, v)
    q, kk, vv = f64(qt).T, f64(kt).T, f64(v)
    s = q @ kk.T / np.sqrt(d)
    s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    ref = (p / p.sum(axis=1, keepdims=True)) @ vv
    # probabilities are rounded to bf16 before the second matmul: relative error ~2^-8
    assert rel_err(out, ref) < 2**-6


def test_lnc2_splits_by_program_id(k, nki):
    x = np.random.default_rng(7).standard_normal((512, 64)).astype(np.float32)
    res = k.scale_lnc[2].run(x)
    np.testing.assert_array_equal(res.outputs, 2 * x)
    assert len(res.cores) == 2
    # each core did its half: 2 row tiles, 3 instructions each
    assert [len(c.instructions) for c in res.cores] == [6, 6]


def test_uninitialised_read_gives_nan(nki, nl, nisa):
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t[:, 0:4], x[:, 0:4])            # only 4 of 8 columns written
        nisa.tensor_scalar(t, t, nl.add, 1.0)
        nisa.dma_copy(out, t)
        return out

    x = np.ones((8, 8), dtype=np.float32)
    out = nki.simulate(bad)(x)
    assert (out[:, :4] == 2).all() and np.isnan(out[:, 4:]).all()


def test_uninitialised_read_strict_mode_raises(nki, nl, nisa, monkeypatch):
    monkeypatch.setenv("TRNSIM_STRICT_UNINIT", "1")

    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf, name="half_tile")
        nisa.dma_copy(t[:, 0:4], x[:, 0:4])
        nisa.tensor_scalar(t, t, nl.add, 1.0)
        return out

    with pytest.raises(nki.isa.NkiValidationError, match=r"tensor_scalar: operand 'data' reads tensor "
                                                          r"`half_tile` \(sbuf\) memory that was never written.*"
                                                          r"test_team_kernels.py:\d+"):
        nki.simulate(bad)(np.ones((8, 8), dtype=np.float32))


def test_jit_accepts_and_ignores_hardware_options(nki, nl, nisa):
    @nki.jit(mode="baremetal", debug_kernel=True, experimental_flags="x")
    def ident(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(out, t)
        return out

    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(ident(x), x)


def test_get_nc_version_follows_target(nki, nl, nisa, monkeypatch):
    seen = {}

    @nki.jit
    def ver(x):
        seen["v"] = nisa.get_nc_version()
        return x

    for env, want in (("trn1", nisa.nc_version.gen2), ("trn3", nisa.nc_version.gen4)):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", env)
        nki.simulate(ver)(np.zeros(1, np.float32))
        assert seen["v"] == want


def test_range_select_keeps_window_and_reduces_max(nki, nl, nisa):
    @nki.jit
    def k(x, lo, hi):
        P, F = x.shape
        out = nl.ndarray((P, F + 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        b0 = nl.load(lo)
        b1 = nl.load(hi)
        res = nl.ndarray((P, F + 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.range_select(res[:, 0:F], t, nl.greater_equal, nl.less, b0, b1, reduce_res=res[:, F:F + 1],
                          range_start=10)
        nl.store(out, res)
        return out

    rng = np.random.default_rng(8)
    x = rng.standard_normal((64, 40)).astype(np.float32)
    lo = rng.integers(10, 30, (64, 1)).astype(np.float32)
    hi = lo + rng.integers(1, 10, (64, 1)).astype(np.float32)
    out = nki.simulate(k)(x, lo, hi)
    idx = np.arange(40) + 10
    keep = (idx[None, :] >= lo) & (idx[None, :] < hi)
    ref = np.where(keep, x, np.finfo(np.float32).min)
    np.testing.assert_array_equal(out[:, :40], ref)
    np.testing.assert_array_equal(out[:, 40], ref.max(axis=1))
