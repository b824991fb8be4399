"""Idioms of AWS's public NKI tutorials and reference kernels (aws-neuron/nki-samples, issue 31), each with a small
kernel of our own: numerics against float64 NumPy, and what trnsim issues for them (the lowering a compiler does)."""

import importlib

import ml_dtypes
import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(31)
A = RNG.standard_normal((128, 64)).astype(np.float32)


def f64(a):
    return np.asarray(a).astype(np.float64)


def ops_of(kernel, *args):
    p = trnsim.profile(kernel)(*args)
    return [(r.opcode, r.engine) for r in p.result.cores[0].instructions], p


# -- nl.static_cast on host arrays (tests prepare inputs with it) -----------------------------------------------------
def test_static_cast_on_host_arrays_rounds_like_the_device():
    x = RNG.standard_normal((4, 33)) * 100
    got = nl.static_cast(x, nl.bfloat16)
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16))            # round to nearest even
    np.testing.assert_array_equal(nl.static_cast(got, np.float32), f64(got).astype(np.float32))
    # integers: round to nearest, saturate (trnsim's rule for every float->int write)
    ints = nl.static_cast(np.array([1.4, 2.6, -3.6, 1e6, -1e6, np.nan]), np.int8)
    np.testing.assert_array_equal(ints, np.array([1, 3, -4, 127, -128, 0], np.int8))


def test_static_cast_on_host_torch_tensor():
    torch = pytest.importorskip("torch")
    t = torch.tensor([[1.0, 1.00390625, 2.5]], dtype=torch.float32)
    got = nl.static_cast(t, nl.bfloat16)
    np.testing.assert_array_equal(got, np.array([[1.0, 1.00390625, 2.5]]).astype(ml_dtypes.bfloat16))


def test_static_cast_on_host_refuses_what_it_cannot_convert():
    with pytest.raises(trnsim.NkiValidationError, match="numeric host array"):
        nl.static_cast(np.array(["a", "b"]), nl.float32)


# -- masks --------------------------------------------------------------------------------------------------------
def test_mask_over_two_axes_that_keeps_all_or_nothing():
    """``offset < n`` with ``offset = base + 512*i_p + i_f`` (the reference tutorial's add kernel): a bound on two
    axes keeps a rectangle when it holds on the whole tile or on none of it."""
    n_rows = 3

    @nki.jit
    def add(a, b, n_elements):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.arange(128)[:, None], nl.arange(64)[None, :]
        for j in nl.affine_range(n_rows):
            offset = j * 128 * 64 + 64 * ix + iy
            t = nl.add(nl.load(a[j, ix, iy], mask=offset < n_elements),
                       nl.load(b[j, ix, iy], mask=offset < n_elements), mask=offset < n_elements)
            nl.store(out[j, ix, iy], value=t, mask=offset < n_elements)
        return out

    a = RNG.standard_normal((n_rows, 128, 64)).astype(np.float32)
    b = RNG.standard_normal((n_rows, 128, 64)).astype(np.float32)
    got = add(a, b, 2 * 128 * 64)          # tiles 0 and 1 wholly inside, tile 2 wholly outside
    np.testing.assert_allclose(got[:2], f64(a[:2]) + f64(b[:2]), rtol=1e-6)
    with pytest.raises(trnsim.NkiValidationError, match="involves 2 index axes and cuts the tile"):
        add(a, b, 128 * 64 + 100)          # tile 1 cut in the middle of a row: not a rectangle


def test_masks_decided_when_traced():
    """A mask on loop indices only (``i_q * 128 >= i_k * 512`` in flash attention) is a Python bool when traced:
    True issues the instruction whole, False issues nothing."""
    @nki.jit
    def k(x, w):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        xt = nl.load(x)
        wt = nl.load(w)
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(3):
            acc[...] += nisa.nc_matmul(wt, xt, mask=(i != 1))
        red = nl.zeros((128, 64), dtype=nl.float32)
        for i in nl.sequential_range(3):
            red[...] = nl.loop_reduce(xt, op=np.add, loop_indices=(i,), mask=(i != 2))
        nl.store(out, nl.add(nl.copy(acc), red))
        return out

    w = RNG.standard_normal((128, 128)).astype(np.float32)
    got = k(A, w)
    want = 2 * (f64(w).T @ f64(A)) + 2 * f64(A)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ops, _ = ops_of(k, A, w)
    assert sum(1 for o, _ in ops if o == "nc_matmul") == 2


def test_bn_stats_with_mask():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        ip, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        st = nl.zeros((128, 6), dtype=nl.float32)
        st[...] = nisa.bn_stats(nl.load(x), mask=(ip < 100))
        nl.store(out, st)
        return out

    got = k(A)
    x = f64(A[:100])
    for half, sl in ((0, x[:, 0::2]), (1, x[:, 1::2])):
        np.testing.assert_allclose(got[:100, 3 * half], sl.shape[1])
        np.testing.assert_allclose(got[:100, 3 * half + 1], sl.mean(axis=1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[:100, 3 * half + 2], sl.var(axis=1) * sl.shape[1], rtol=1e-4)
    # `st[...] = bn_stats(..., mask=...)`: the instruction writes st itself, so rows the mask leaves out keep st's zeros
    np.testing.assert_array_equal(got[100:], 0)


def test_masked_result_assigned_to_a_tile_writes_the_masked_region_only():
    """``t[...] = nisa.affine_select(..., mask=False)`` (flash attention's sliding window, decided when traced) leaves
    t as it was; a partial mask writes its region only."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        ip, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        t = nl.load(x)
        for j in nl.affine_range(2):
            t[...] = nisa.affine_select(ip - i_f >= 0, t, -1.0, mask=(j == 5))        # never: t unchanged
        t[...] = nl.add(t, 100.0, mask=(i_f < 8))                                    # columns 0..7 only
        nl.store(out, t)
        return out

    got = k(A)
    want = f64(A).copy()
    want[:, :8] += 100.0
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_affine_select_with_mask_evaluates_the_predicate_at_the_region():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        ip, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        r = nisa.affine_select(ip - i_f >= 0, nl.load(x), -1.0, mask=(ip < 96) & (i_f >= 16))
        nl.store(out, r)
        return out

    got = k(A)
    p, f = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    want = np.where(p >= f, f64(A), -1.0)
    region = (p < 96) & (f >= 16)
    np.testing.assert_array_equal(got[region], want[region].astype(np.float32))
    assert np.isnan(got[~region]).all()     # outside the mask the new tile is not written


# -- PSUM operands for engines that cannot read PSUM ---------------------------------------------------------------
def test_psum_operands_are_staged_to_sbuf_for_gpsimd_and_the_tensor_engine():
    """The flash attention backward passes a PSUM tile to affine_select (GpSimd) and nc_transpose's PSUM result to
    nc_matmul; neither engine reads PSUM (architecture guide), so trnsim's legacy front end copies them to SBUF on the
    Vector Engine first, as the compiler does (for nc_matmul only tiles the compiler placed, i.e. results of earlier
    instructions: a PSUM tile the kernel allocated itself stays refused, test_v1_legacy_gaps)."""
    @nki.jit
    def k(q, kk):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        ip, i_f = nl.arange(128)[:, None], nl.arange(128)[None, :]
        qt, kt = nl.load(q), nl.load(kk)
        s = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
        s[...] += nisa.nc_matmul(qt, kt)
        masked = nisa.affine_select(ip - i_f >= 0, s, -9984.0)           # s is in PSUM
        t = nisa.nc_transpose(masked)                                     # result in PSUM
        r = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
        r[...] += nisa.nc_matmul(t, kt)                                   # stationary from PSUM
        nl.store(out, nl.copy(r))
        return out

    q = RNG.standard_normal((128, 128)).astype(np.float32)
    kk = RNG.standard_normal((128, 128)).astype(np.float32)
    got = k(q, kk)
    s = f64(q).T @ f64(kk)
    p, f = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    masked = np.where(p >= f, s.astype(np.float32), -9984.0)
    want = f64(masked) @ f64(kk)          # nc_matmul(stationary=t, moving=kk) = t.T @ kk, t = masked.T
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-2)
    ops, _ = ops_of(k, q, kk)
    i_sel = ops.index(("affine_select", "gpsimd"))
    assert ops[i_sel - 1] == ("tensor_copy", "vector")


def test_one_block_psum_block_tensor_is_filled_tile_by_tile():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((1, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
        acc[0, :, :] += nisa.nc_matmul(nl.load(x[:, 0:128]), nl.load(x))
        nl.store(out, nl.copy(acc[0, :, :]))
        return out

    x = RNG.standard_normal((128, 512)).astype(np.float32)
    np.testing.assert_allclose(k(x), f64(x[:, :128]).T @ f64(x), rtol=1e-4, atol=1e-3)


# -- module paths and the beta-2 surface ----------------------------------------------------------------------------
def test_compiler_backends_module_path():
    tensor = importlib.import_module("neuronxcc.nki.compiler.backends.neuron.tensor")
    indexing = importlib.import_module("neuronxcc.nki.compiler.backends.neuron.indexing")
    assert isinstance(nl.arange(4), indexing.TileIndex)
    with pytest.raises(NotImplementedError, match="local_tile"):
        tensor.local_tile()


def test_v2_tensor_copy_dtype_keyword_converts_to_dst():
    import nki as nki2
    import nki.isa as nisa2
    import nki.language as nl2

    @nki2.jit
    def k(a, dt):
        out = nl2.ndarray(a.shape, nl2.bfloat16, buffer=nl2.shared_hbm)
        t = nl2.ndarray(a.shape, a.dtype, buffer=nl2.sbuf)
        r = nl2.ndarray(a.shape, nl2.bfloat16, buffer=nl2.sbuf)
        nisa2.dma_copy(t, a)
        nisa2.tensor_copy(dst=r, src=t, dtype=dt)
        nisa2.dma_copy(out, r)
        return out

    got = nki2.simulate(k)(A, nl2.bfloat16)
    np.testing.assert_array_equal(np.asarray(got), A.astype(ml_dtypes.bfloat16))
    with pytest.warns(UserWarning, match="dtype=float16 is not applied"):
        got = nki2.simulate(k)(A, nl2.float16)          # dst (bf16) decides, as on hardware
    np.testing.assert_array_equal(np.asarray(got), A.astype(ml_dtypes.bfloat16))


def test_one_dimensional_tile_is_a_partition_vector_in_binary_ops():
    """``m[:, 0]`` of a [P, F] tile is a 1-D tile of P elements: against a [P, 1] tile (a reduction's result) it is
    a per-partition column (the flash attention forward's ``nl.maximum(m_previous, max_)``), not a NumPy
    trailing-axis broadcast to [P, P]."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        mx = nisa.tensor_reduce(np.max, t[:, 4:8], axis=(1,))
        r = nl.maximum(t[:, 0], mx)
        assert r.shape == (128, 1)
        nl.store(out, r)
        return out

    got = k(A)
    np.testing.assert_array_equal(got[:, 0], np.maximum(A[:, 0], A[:, 4:8].max(axis=1)))


def test_mask_combined_with_a_condition_decided_when_traced():
    """``(i_p < n) & (j > 0)`` with ``j`` a loop index (rmsnorm_qkv): True keeps the predicate, False keeps nothing."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        ip = nl.arange(128)[:, None]
        t = nl.zeros((128, 64), dtype=nl.float32)
        for j in nl.affine_range(2):
            t[...] = nl.add(t, nl.load(x), mask=(ip < 100) & (j == 1))
        nl.store(out, t)
        return out

    got = k(A)
    np.testing.assert_array_equal(got[:100], A[:100])
    np.testing.assert_array_equal(got[100:], 0)


def test_memset_value_given_as_an_ml_dtypes_scalar():
    """``nl.full(..., nl.finfo(nl.bfloat16).min)``-style immediates arrive as ml_dtypes scalars (select_and_scatter)."""
    lo = ml_dtypes.finfo(ml_dtypes.bfloat16).min

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.full((128, 64), lo, dtype=nl.bfloat16)
        nl.store(out, nl.maximum(t, nl.load(x)))
        return out

    got = k(A.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(got, A.astype(ml_dtypes.bfloat16))
