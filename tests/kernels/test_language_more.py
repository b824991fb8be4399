"""nki.language functions added to the v2 (and legacy) surface: all, rms_norm, load_transpose2d,
gather_flattened, while_loop.  Each is compared with a float64 NumPy reference."""

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.isa import NkiValidationError

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(7)


@nki.jit
def _rms(x, w):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.rms_norm(nl.load(x), nl.load(w), axis=1, n=x.shape[1], epsilon=1e-5))
    return out


def _rms_ref(x, w, eps=1e-5):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(1, keepdims=True) + eps) * w.astype(np.float64)


@pytest.mark.parametrize("dt", [np.float32, ml_dtypes.bfloat16])
def test_rms_norm_matches_float64(dt):
    x = RNG.standard_normal((128, 384)).astype(dt)
    w = RNG.standard_normal((128, 384)).astype(dt)
    got = nki.simulate(_rms)(x, w).astype(np.float64)
    ref = _rms_ref(x, w)
    # fp32 statistics, one rounding of the result to the output dtype
    tol = 2e-6 if dt == np.float32 else 2 ** -8
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()
    # the same input with the wrong epsilon is measurably different (the check can fail)
    assert np.abs(got - _rms_ref(x, w, eps=10.0)).max() > 10 * tol * np.abs(ref).max()


def test_rms_norm_refuses_partition_axis_with_the_kernel_line():
    @nki.jit
    def k(x, w):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.rms_norm(nl.load(x), nl.load(w), axis=0, n=x.shape[0]))
        return out
    x = np.ones((8, 16), np.float32)
    with pytest.raises(NkiValidationError, match="rms_norm: axis 0") as e:
        nki.simulate(k)(x, x)
    assert "test_language_more.py" in str(e.value)


@nki.jit
def _misc(x, a, idx):
    o1 = nl.ndarray((x.shape[0], 1), nl.uint8, buffer=nl.shared_hbm)
    o2 = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.shared_hbm)
    o3 = nl.ndarray(idx.shape, nl.bfloat16, buffer=nl.shared_hbm)
    xt = nl.load(x)
    nl.store(o1, nl.all(xt, axis=1))
    nl.store(o2, nl.load_transpose2d(a))
    nl.store(o3, nl.gather_flattened(xt, nl.load(idx), dtype=nl.bfloat16))
    return o1, o2, o3


def test_all_load_transpose2d_gather_flattened():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    x[3, 5] = 0.0
    x[77, 0] = 0.0
    a = RNG.standard_normal((48, 32)).astype(np.float32)
    idx = RNG.integers(0, 64, (128, 24)).astype(np.uint32)
    o1, o2, o3 = nki.simulate(_misc)(x, a, idx)
    want_all = (x != 0).all(axis=1)
    assert not want_all[3] and not want_all[77] and want_all.sum() == 126
    np.testing.assert_array_equal(o1[:, 0].astype(bool), want_all)
    np.testing.assert_array_equal(o2, a.T)
    gathered = np.take_along_axis(x, idx.astype(np.int64), axis=1)
    np.testing.assert_array_equal(o3.astype(np.float32), gathered.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_gather_flattened_index_out_of_range_is_refused():
    x = np.zeros((4, 8), np.float32)
    idx = np.full((4, 2), 8, np.uint32)
    with pytest.raises(NkiValidationError, match="indices"):
        nki.simulate(_misc)(x, np.zeros((2, 2), np.float32), idx)


@nki.jit
def _count_down(n):
    out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((1, 1), nl.float32, buffer=nl.sbuf)
    cnt = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cnt, src=n)
    r = nisa.register_alloc()
    nisa.register_load(r, cnt)

    def body(r):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=2.5)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1)
        nxt = nisa.register_alloc()
        nisa.register_load(nxt, cnt)
        return nxt
    nl.while_loop(r, body)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 7])
def test_while_loop_checks_before_each_iteration(n):
    assert nki.simulate(_count_down)(np.array([[n]], np.int32))[0, 0] == 2.5 * n


@nki.jit
def _bare_while(n):
    # the VirtualRegister reference's form: a bare ``while reg:`` re-loaded at the end of each iteration
    out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((1, 1), nl.float32, buffer=nl.sbuf)
    cnt = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=cnt, src=n)
    r = nisa.register_alloc(cnt)
    while r:
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.5)
        nisa.tensor_scalar(dst=cnt, data=cnt, op0=nl.subtract, operand0=1)
        nisa.register_load(r, cnt)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_bare_while_on_a_register_stops_at_zero(n):
    # a register is true while nonzero; before this, ``while r:`` never stopped (moe_tkg_dynamic ran past its
    # last block into an out-of-range DMA)
    assert nki.simulate(_bare_while)(np.array([[n]], np.int32))[0, 0] == 1.5 * n
    assert not nisa.register_alloc(0) and nisa.register_alloc(-3)


def test_legacy_rms_norm_and_gather_flattened():
    import neuronxcc.nki as nki1
    import neuronxcc.nki.language as nl1

    @nki1.jit
    def k(x, w, idx):
        out = nl1.ndarray(x.shape, x.dtype, buffer=nl1.shared_hbm)
        o2 = nl1.ndarray(idx.shape, x.dtype, buffer=nl1.shared_hbm)
        xt = nl1.load(x)
        nl1.store(out, nl1.rms_norm(xt, nl1.load(w), axis=1, n=x.shape[1], epsilon=1e-5))
        nl1.store(o2, nl1.gather_flattened(xt, nl1.load(idx)))
        return out, o2
    x = RNG.standard_normal((64, 96)).astype(np.float32)
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    idx = RNG.integers(0, 96, (64, 10)).astype(np.uint32)
    o, o2 = nki1.simulate_kernel(k, x, w, idx)
    ref = _rms_ref(x, w)
    assert np.abs(o - ref).max() <= 2e-6 * np.abs(ref).max()
    np.testing.assert_array_equal(o2, np.take_along_axis(x, idx.astype(np.int64), axis=1))


@nki.jit
def _random(x, seed):
    o = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    u = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(seed)
    nl.store(o, nl.dropout(nl.load(x), 0.3))
    nl.store(u, nl.rand(x.shape))
    return o, u


def test_dropout_rand_random_seed():
    x = np.ones((128, 512), np.float32)
    o, u = nki.simulate(_random)(x, 1234)
    o2, u2 = nki.simulate(_random)(x, 1234)
    o3, _ = nki.simulate(_random)(x, 99)
    np.testing.assert_array_equal(o, o2)                # same seed, same mask
    np.testing.assert_array_equal(u, u2)
    assert (o != o3).mean() > 0.3                       # another seed, another mask
    assert set(np.unique(o)) == {0.0, 1.0}
    assert abs((o == 0).mean() - 0.3) < 5 * np.sqrt(0.21 / o.size)
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size)


def test_legacy_isa_dropout():
    import neuronxcc.nki as nki1
    import neuronxcc.nki.isa as nisa1
    import neuronxcc.nki.language as nl1

    @nki1.jit
    def k(x):
        out = nl1.ndarray(x.shape, x.dtype, buffer=nl1.shared_hbm)
        nl1.store(out, nisa1.dropout(nl1.load(x), 0.5))
        return out
    x = RNG.uniform(1, 2, (128, 256)).astype(np.float32)
    o = nki1.simulate_kernel(k, x)
    kept = o != 0
    np.testing.assert_array_equal(o[kept], x[kept])
    assert abs(kept.mean() - 0.5) < 5 * np.sqrt(0.25 / x.size)
