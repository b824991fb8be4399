"""Instructions added for AWS's kernels (issue 13): numerics against float64 references, the rules each one
enforces, and their cost in cycles against the formula each one cites."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnsim
from trnsim import isa
from trnsim.machine import NeuronCore
from trnsim.memory import HBM, PSUM, SBUF, Tensor
from trnsim.memory.dtypes import DTYPES

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

S = settings(max_examples=12, deadline=None)
LOC = ("test_new_instructions.py", 1)


def tile(core, arr, dtype, kind=SBUF):
    arr = np.asarray(arr)
    t = Tensor.whole(core.allocate(arr.shape, DTYPES[dtype], kind, name="t"))
    if arr.size:
        t.np[...] = arr.astype(DTYPES[dtype].storage)
    t.buf.all_written = True
    return t


def empty(core, shape, dtype, kind=SBUF):
    return Tensor.whole(core.allocate(tuple(shape), DTYPES[dtype], kind, name="o"))


def last_cycles(core):
    return core.instructions[-1].cycles


# -- nonzero_with_count -------------------------------------------------------------------------------------------
@S
@given(st.integers(1, 64), st.integers(0, 2 ** 20), st.integers(-5, 5), st.integers(0, 2 ** 31 - 1))
def test_nonzero_with_count(f, offset, pad, seed):
    core = NeuronCore("trn2")
    r = np.random.default_rng(seed)
    x = (r.random((128, f)) < 0.4) * r.integers(-3, 4, size=(128, f))
    src = tile(core, x.astype(np.float32), "float32")
    dst = tile(core, np.full((128, f + 1), 77), "int32")
    isa.nonzero_with_count(core, LOC, dst, src, index_offset=offset, padding_val=pad)
    got = dst.np
    for p in range(128):
        if p % 16:
            assert (got[p] == 77).all()          # only partitions 0, 16, ..., 112 are written
            continue
        nz = np.flatnonzero(x[p])
        want = np.concatenate([nz + offset, np.full(f - nz.size, pad), [nz.size]])
        np.testing.assert_array_equal(got[p], want)
    assert last_cycles(core) == 150 + (f + 1)     # docs/hardware.md#instruction-cost-model: GpSimd about 150 + N


def test_nonzero_with_count_doc_example_through_nisa():
    x = np.zeros((128, 8), np.float32)
    x[0] = [0, 1, 1, 0, 0, 1, 0, 0]

    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        o = nl.ndarray((128, 9), nl.int32, buffer=nl.sbuf)
        nisa.memset(o, 0)
        nisa.nonzero_with_count(dst=o, src=t, index_offset=16, padding_val=-1)
        out = nl.ndarray((128, 9), nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, o)
        return out
    out = nki.simulate(k, target="trn2")(x)
    np.testing.assert_array_equal(out[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])


def test_nonzero_with_count_rules():
    core = NeuronCore("trn2")
    src = empty(core, (128, 8), "float32")
    with pytest.raises(trnsim.NkiValidationError, match="one more than 'src'"):
        isa.nonzero_with_count(core, LOC, empty(core, (128, 8), "int32"), src)
    with pytest.raises(trnsim.NkiValidationError, match="dtype float32; expected int32"):
        isa.nonzero_with_count(core, LOC, empty(core, (128, 9), "float32"), src)
    with pytest.raises(trnsim.NkiValidationError, match="index_offset. must be a number, got str"):
        isa.nonzero_with_count(core, LOC, empty(core, (128, 9), "int32"), src, index_offset="a")
    with pytest.raises(trnsim.NkiValidationError, match="not available on trn1"):
        c1 = NeuronCore("trn1")
        isa.nonzero_with_count(c1, LOC, empty(c1, (128, 9), "int32"), empty(c1, (128, 8), "float32"))


# -- tensor_partition_reduce --------------------------------------------------------------------------------------
@S
@given(st.integers(1, 128), st.integers(1, 64), st.sampled_from(["add", "maximum", "average"]),
       st.integers(0, 2 ** 31 - 1))
def test_tensor_partition_reduce(p, f, op, seed):
    core = NeuronCore("trn2")
    x = np.random.default_rng(seed).uniform(-4, 4, (p, f)).astype(np.float32)
    dst = empty(core, (1, f), "float32")
    isa.tensor_partition_reduce(core, LOC, dst, op, tile(core, x, "float32"))
    x64 = x.astype(np.float64)
    ref = {"add": x64.sum(0), "maximum": x64.max(0), "average": x64.mean(0)}[op]
    np.testing.assert_allclose(dst.np[0], ref, rtol=1e-5, atol=1e-5 * p)
    assert last_cycles(core) == 150 + f * min(p, 16)


def test_tensor_partition_reduce_bitwise_and_through_nisa():
    x = np.arange(128 * 4, dtype=np.int32).reshape(128, 4)

    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        o = nl.ndarray((1, 4), nl.int32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(o, nl.bitwise_or, t)
        out = nl.ndarray((1, 4), nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, o)
        return out
    np.testing.assert_array_equal(nki.simulate(k)(x)[0], np.bitwise_or.reduce(x, axis=0))


def test_tensor_partition_reduce_rules():
    core = NeuronCore("trn2")
    x = empty(core, (128, 8), "float32")
    with pytest.raises(trnsim.NkiValidationError, match="writes 1"):
        isa.tensor_partition_reduce(core, LOC, empty(core, (2, 8), "float32"), "add", x)
    with pytest.raises(trnsim.NkiValidationError, match="cannot reduce across partitions"):
        isa.tensor_partition_reduce(core, LOC, empty(core, (1, 8), "float32"), "subtract", x)
    with pytest.raises(trnsim.NkiValidationError, match="needs integer dtypes"):
        isa.tensor_partition_reduce(core, LOC, empty(core, (1, 8), "float32"), "bitwise_or", x)


# -- sequence_bounds, nc_n_gather, local_gather ------------------------------------------------------------------
def _seq_bounds_ref(s):
    """The reference's NumPy semantics, written out: start of each element's segment and its end (exclusive)."""
    n = len(s)
    lo, hi = np.zeros(n), np.zeros(n)
    for i in range(n):
        if s[i] == 0:
            lo[i], hi[i] = n, -1
            continue
        a = i
        while a > 0 and s[a - 1] == s[i]:
            a -= 1
        b = i
        while b < n - 1 and s[b + 1] == s[i]:
            b += 1
        lo[i], hi[i] = a, b + 1
    return np.stack([lo, hi])


def test_sequence_bounds_doc_example():
    core = NeuronCore("trn2")
    s = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.float32)
    dst = empty(core, (1, 2, 9), "float32")
    isa.sequence_bounds(core, LOC, dst, tile(core, s, "float32"))
    np.testing.assert_array_equal(dst.np[0], [[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]])


@S
@given(st.integers(1, 200), st.integers(0, 2 ** 31 - 1))
def test_sequence_bounds_random(n, seed):
    core = NeuronCore("trn2")
    s = np.sort(np.random.default_rng(seed).integers(0, 6, n)).astype(np.int32)[None, :]
    dst = empty(core, (1, 2, n), "int32")
    isa.sequence_bounds(core, LOC, dst, tile(core, s, "int32"))
    np.testing.assert_array_equal(dst.np[0], _seq_bounds_ref(s[0]))


@S
@given(st.integers(1, 128), st.integers(1, 100), st.integers(1, 40), st.integers(0, 2 ** 31 - 1))
def test_nc_n_gather(p, f, n, seed):
    core = NeuronCore("trn2")
    r = np.random.default_rng(seed)
    x = r.uniform(-5, 5, (p, f)).astype(np.float32)
    ix = r.integers(0, f, (p, n)).astype(np.uint32)
    dst = empty(core, (p, n), "float32")
    isa.nc_n_gather(core, LOC, dst, tile(core, x, "float32"), tile(core, ix, "uint32"))
    np.testing.assert_array_equal(dst.np, np.take_along_axis(x, ix.astype(np.int64), 1))


def test_nc_n_gather_index_out_of_range():
    core = NeuronCore("trn2")
    with pytest.raises(trnsim.NkiValidationError, match="holds index 9; 'data' has 8 elements"):
        isa.nc_n_gather(core, LOC, empty(core, (4, 1), "float32"), tile(core, np.zeros((4, 8)), "float32"),
                        tile(core, np.full((4, 1), 9), "uint32"))


def test_local_gather_reference_semantics():
    """The reference's example: src (128, 512, 4), index (128, 4) uint16 replicated per core, 4 elements per
    index, 64 valid indices per core -> (128, 4, 16, 4)."""
    core = NeuronCore("trn2")
    r = np.random.default_rng(3)
    src = (r.random((128, 512, 4)) * 100).astype(np.float32)
    per_core = r.integers(0, 512, (16, 4)).astype(np.uint16)
    index = np.tile(per_core, (8, 1))
    k, nv = 4, 64
    dst = empty(core, (128, 4, 16, 4), "float32")
    isa.local_gather(core, LOC, dst, tile(core, src, "float32"), tile(core, index * k, "uint16"),
                     num_elem_per_idx=k, num_valid_indices=nv)
    ref = np.empty((128, nv, k), np.float32)
    for c in range(8):
        rows = slice(16 * c, 16 * c + 16)
        idx = index[rows].flatten(order="F")[:nv]
        ref[rows] = np.take(src[rows], idx, axis=1)
    np.testing.assert_array_equal(dst.np.reshape(128, nv, k), ref)


# -- tensor_scalar_cumulative, dma_compute, activate2 ------------------------------------------------------------
@S
@given(st.integers(1, 128), st.integers(1, 64), st.sampled_from(["add", "multiply", "maximum", "minimum", "subtract"]),
       st.integers(0, 2 ** 31 - 1))
def test_tensor_scalar_cumulative(p, f, op1, seed):
    core = NeuronCore("trn2")
    x = np.random.default_rng(seed).uniform(0.5, 1.5, (p, f)).astype(np.float32)
    dst = empty(core, (p, f), "float32")
    isa.tensor_scalar_cumulative(core, LOC, dst, tile(core, x, "float32"), "multiply", op1, 2.0)
    ident = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}[op1]
    fn = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
          "minimum": np.minimum}[op1]
    reg = np.full(p, ident)
    ref = np.empty((p, f))
    for i in range(f):
        reg = fn(x[:, i].astype(np.float64) * 2.0, reg)      # reg = op1(op0(x, imm0), reg)
        ref[:, i] = reg
    np.testing.assert_allclose(dst.np, ref, rtol=2e-5 * f, atol=1e-5)
    # continuing from the register with reduce_cmd=reduce
    dst2 = empty(core, (p, 1), "float32")
    isa.tensor_scalar_cumulative(core, LOC, dst2, tile(core, np.ones((p, 1)), "float32"), "bypass", "add", 0.0,
                                 reduce_cmd="reduce")
    np.testing.assert_allclose(dst2.np[:, 0], dst.np[:, -1].astype(np.float64) + 1.0, rtol=1e-6)


def test_tensor_scalar_cumulative_load_reduce_and_rules():
    core = NeuronCore("trn2")
    dst = empty(core, (2, 3), "float32")
    isa.tensor_scalar_cumulative(core, LOC, dst, tile(core, np.ones((2, 3)), "float32"), "add", "add", 0.0,
                                 imm1=10.0, reduce_cmd="load_reduce")
    np.testing.assert_array_equal(dst.np, [[11, 12, 13], [11, 12, 13]])
    with pytest.raises(trnsim.NkiValidationError, match="int32/uint32 are not supported"):
        isa.tensor_scalar_cumulative(core, LOC, empty(core, (2, 3), "int32"), tile(core, np.ones((2, 3)), "float32"),
                                     "add", "add", 0.0)
    with pytest.raises(trnsim.NkiValidationError, match="cannot accumulate"):
        isa.tensor_scalar_cumulative(core, LOC, dst, dst, "add", "divide", 0.0)


@S
@given(st.integers(1, 16), st.integers(1, 64), st.sampled_from(["float32", "bfloat16"]), st.integers(0, 2 ** 31 - 1))
def test_dma_compute_sum(n, f, dt, seed):
    core = NeuronCore("trn2")
    r = np.random.default_rng(seed)
    xs = [r.uniform(-4, 4, (8, f)).astype(np.float32) for _ in range(n)]
    srcs = [tile(core, x, "float32", HBM) for x in xs]
    dst = empty(core, (8, f), dt, SBUF)
    isa.dma_compute(core, LOC, dst, srcs, nl.add, scales=[1.0] * n)
    acc = np.zeros((8, f), np.float32)
    for x in xs:
        acc = acc + x                    # fp32, in list order
    want = acc if dt == "float32" else acc.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(dst.np, want)
    ref = np.sum([x.astype(np.float64) for x in xs], axis=0)
    np.testing.assert_allclose(dst.np, ref, rtol=1e-2 if dt == "bfloat16" else 1e-5, atol=1e-4 * n)
    rec = core.instructions[-1]
    assert rec.nbytes == sum(x.nbytes for x in xs)
    assert rec.ns == pytest.approx(isa.dma_cost_ns(core.target, rec.nbytes, 8))


def test_dma_compute_rules():
    core = NeuronCore("trn2")
    a = empty(core, (4, 4), "float32", HBM)
    with pytest.raises(trnsim.NkiValidationError, match="supports only add"):
        isa.dma_compute(core, LOC, a, [a, a], nl.multiply)
    with pytest.raises(trnsim.NkiValidationError, match="every scale must be 1.0"):
        isa.dma_compute(core, LOC, a, [a, a], nl.add, scales=[1.0, 2.0])
    with pytest.raises(trnsim.NkiValidationError, match="1 to 16 tensors"):
        isa.dma_compute(core, LOC, a, [a] * 17, nl.add)


def test_activate2():
    core = NeuronCore("trn3")
    x = np.linspace(-3, 3, 4 * 16, dtype=np.float32).reshape(4, 16)
    dst = empty(core, (4, 16), "float32")
    res = empty(core, (4, 1), "float32")
    isa.activate2(core, LOC, dst, "relu", tile(core, x, "float32"), 2.0, 0.5, "multiply", "subtract",
                  reduce_op="add", reduce_res=res)
    ref = np.maximum(x.astype(np.float64) * 2.0 - 0.5, 0)
    np.testing.assert_allclose(dst.np, ref, rtol=1e-6)
    np.testing.assert_allclose(res.np[:, 0], ref.sum(1), rtol=1e-5)
    isa.activate2(core, LOC, dst, "prelu", tile(core, x, "float32"), 0.0, 0.0, "bypass", "bypass", relu_param=0.25)
    np.testing.assert_allclose(dst.np, np.where(x > 0, x, 0.25 * x.astype(np.float64)), rtol=1e-6)
    with pytest.raises(trnsim.NkiValidationError, match="not one of the supported"):
        isa.activate2(core, LOC, dst, "relu", dst, 1.0, 1.0, "add", "add")
    c2 = NeuronCore("trn2")
    with pytest.raises(trnsim.NkiValidationError, match="NeuronCore-v4"):
        isa.activate2(c2, LOC, empty(c2, (4, 16), "float32"), "relu", empty(c2, (4, 16), "float32"), 1.0, 1.0,
                      "bypass", "bypass")


# -- documented ALU operators as op0 of tensor_scalar_reduce, scalar_tensor_tensor(dtype=) ---------------------
@pytest.mark.parametrize("op,ref", [("abs", np.abs), ("square", np.square), ("relu", lambda v: np.maximum(v, 0)),
                                    ("reciprocal", lambda v: 1 / v)])
def test_unary_alu_op_in_tensor_scalar_reduce(op, ref):
    core = NeuronCore("trn2")
    x = np.linspace(-3, 3, 128 * 10, dtype=np.float32).reshape(128, 10) + 0.01
    dst = empty(core, (128, 10), "float32")
    res = empty(core, (128, 1), "float32")
    isa.tensor_scalar_reduce(core, LOC, dst, tile(core, x, "float32"), getattr(nl, op), 0.0, nl.maximum,
                             reduce_res=res)
    r64 = ref(x.astype(np.float64))
    np.testing.assert_allclose(dst.np, r64, rtol=1e-6)
    np.testing.assert_allclose(res.np[:, 0], r64.max(1), rtol=1e-6)
    assert last_cycles(core) == max(64, 10) + 64       # docs/hardware.md: max(MIN_II, N) + MIN_II


def test_scalar_tensor_tensor_dtype_rounds_result():
    core = NeuronCore("trn2")
    x = np.full((2, 4), 1.0 + 2 ** -10, np.float32)
    dst = empty(core, (2, 4), "float32")
    isa.scalar_tensor_tensor(core, LOC, dst, tile(core, x, "float32"), "multiply", 1.0, "add",
                             tile(core, np.zeros((2, 4)), "float32"), dtype=nl.bfloat16)
    np.testing.assert_array_equal(dst.np, 1.0)                 # 1 + 2^-10 rounds to 1.0 in bfloat16
    isa.scalar_tensor_tensor(core, LOC, dst, tile(core, x, "float32"), "multiply", 1.0, "add",
                             tile(core, np.zeros((2, 4)), "float32"))
    np.testing.assert_array_equal(dst.np, x)


# -- MX: quantize_mx, nc_matmul_mx (trn3) -------------------------------------------------------------------------
def _mx_ref_quantize(x, emax, big):
    """The OCP MX scale in float64: X = 2^(floor(log2 amax) - emax) per 8x4 group (2^-127 for zeros), values
    v / X clamped to the format's largest finite value."""
    p, f = x.shape
    g = x.reshape(p // 8, 8, f // 4, 4).astype(np.float64)
    amax = np.abs(g).max(axis=(1, 3))
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - emax, -127)
    return e, np.clip(g / 2.0 ** e[:, None, :, None], -big, big)


@pytest.mark.parametrize("x4,emax,big,ml", [("float8_e4m3fn_x4", 8, 448.0, ml_dtypes.float8_e4m3fn),
                                              ("float8_e5m2_x4", 15, 57344.0, ml_dtypes.float8_e5m2)])
@pytest.mark.parametrize("p", [32, 128])
def test_quantize_mx_then_matmul_mx(x4, emax, big, ml, p):
    from trnsim.memory.dtypes import unpack_x4
    core = NeuronCore("trn3")
    r = np.random.default_rng(p)
    f = 16
    xs = (r.standard_normal((p, f)) * np.exp2(r.integers(-6, 6, (p, 1)))).astype(ml_dtypes.bfloat16)
    xs[:8, :4] = 0                                        # an all-zero group gets the scale 2^-127
    src = tile(core, xs.astype(np.float32), "bfloat16")
    q = empty(core, (p, f // 4), x4)
    sc = tile(core, np.zeros((p, f // 4)), "uint8")
    isa.quantize_mx(core, LOC, q, src, sc)
    e, scaled = _mx_ref_quantize(xs.astype(np.float32), emax, big)
    rows = 32 * (np.arange(p // 8) // 4) + np.arange(p // 8) % 4
    np.testing.assert_array_equal(sc.np[rows].astype(np.int64), e + 127)
    assert sc.np[0, 0] == 0                               # the zero group
    vals = unpack_x4(DTYPES[x4], q.np)                    # [p, f/4, 4]
    want = scaled.reshape(p, f // 4, 4).astype(np.float32).astype(ml).astype(np.float32)
    np.testing.assert_array_equal(vals, want)
    # dequantized values are within the element format's rounding of the input, or saturated at its largest value
    deq = vals.reshape(p // 8, 8, f // 4, 4) * 2.0 ** e[:, None, :, None]
    rel = {8: 2 ** -4, 15: 2 ** -3}[emax]
    x_sat = np.clip(xs.astype(np.float64).reshape(p // 8, 8, f // 4, 4), -big * 2.0 ** e[:, None, :, None],
                    big * 2.0 ** e[:, None, :, None])
    np.testing.assert_allclose(deq, x_sat, rtol=rel, atol=2.0 ** (e.max() - 6))

    # matmul of the quantized tile with itself: dst[M=f/4, N=f/4] over K=p partitions x 4 values
    dst = empty(core, (f // 4, f // 4), "float32", PSUM)
    isa.nc_matmul_mx(core, LOC, dst, q, q, sc, sc)
    d64 = deq.reshape(p, f // 4, 4)
    ref = np.einsum("kmq,knq->mn", d64, d64)
    np.testing.assert_allclose(dst.np, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    assert core.instructions[-1].cycles == isa.matmul_cycles(core.target, p, f // 4, f // 4, False)
    # accumulate=True adds a second product
    isa.nc_matmul_mx(core, LOC, dst, q, q, sc, sc, accumulate=True)
    np.testing.assert_allclose(dst.np, 2 * ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


def test_matmul_mx_in_strict_mode_reads_only_the_scale_rows_of_each_quadrant():
    # strict mode refuses reads of never-written memory; nc_matmul_mx uses only partitions 32q..32q+3 of a scale
    # tile, so scales written there alone (the rest never written) must not be refused, and an unwritten scale row
    # must be
    from trnsim.isa.errors import NkiValidationError
    core = NeuronCore("trn3", strict=True)
    p, f = 64, 8
    q = tile(core, np.zeros((p, f // 4), np.uint32), "float8_e4m3fn_x4")
    sc = empty(core, (p, f // 4), "uint8")
    rows = 32 * (np.arange(p // 8) // 4) + np.arange(p // 8) % 4
    for r in rows:
        isa.memset(core, LOC, sc[int(r):int(r) + 1], 127)
    dst = empty(core, (f // 4, f // 4), "float32", PSUM)
    isa.nc_matmul_mx(core, LOC, dst, q, q, sc, sc)
    np.testing.assert_array_equal(dst.np, 0.0)
    sc2 = empty(core, (p, f // 4), "uint8")
    for r in rows[:-1]:                                   # the last scale row never written
        isa.memset(core, LOC, sc2[int(r):int(r) + 1], 127)
    with pytest.raises(NkiValidationError, match="never written"):
        isa.nc_matmul_mx(core, LOC, dst, q, q, sc2, sc)


@pytest.mark.parametrize("p", [32, 64])
def test_quantize_mx_zeroes_the_padding_partitions_of_the_quadrants_it_spans(p):
    core = NeuronCore("trn3")
    xs = np.random.default_rng(3).standard_normal((p, 8)).astype(np.float32)
    q = empty(core, (p, 2), "float8_e4m3fn_x4")
    sc = tile(core, np.full((128, 2), 77), "uint8")       # a 128-partition scale tile holding older values
    isa.quantize_mx(core, LOC, q, tile(core, xs, "bfloat16"), sc)
    rows = 32 * (np.arange(p // 8) // 4) + np.arange(p // 8) % 4
    pad = np.setdiff1d(np.arange(p), rows)
    assert (sc.np[pad] == 0).all()                        # the 28 padding rows of each quadrant written with 0
    assert (sc.np[rows] != 0).all() and (sc.np[rows] != 77).all()
    assert (sc.np[p:] == 77).all()                        # quadrants the data does not span are left as they were


def test_mx_rules():
    core = NeuronCore("trn3")
    q = empty(core, (32, 4), "float8_e4m3fn_x4")
    sc = empty(core, (32, 4), "uint8")
    with pytest.raises(trnsim.NkiValidationError, match="bfloat16 or float16"):
        isa.quantize_mx(core, LOC, q, empty(core, (32, 16), "float32"), sc)
    with pytest.raises(trnsim.NkiValidationError, match="multiple of 32"):
        isa.quantize_mx(core, LOC, empty(core, (16, 4), "float8_e4m3fn_x4"), empty(core, (16, 16), "bfloat16"),
                        empty(core, (16, 4), "uint8"))
    with pytest.raises(trnsim.NkiValidationError, match="need at least 4 partitions .* and 4 elements"):
        isa.quantize_mx(core, LOC, q, empty(core, (32, 16), "bfloat16"), empty(core, (32, 2), "uint8"))
    with pytest.raises(trnsim.NkiValidationError, match="takes float8_e5m2_x4"):
        isa.nc_matmul_mx(core, LOC, empty(core, (4, 4), "float32", PSUM), empty(core, (32, 4), "bfloat16"), q, sc,
                         sc)
    with pytest.raises(trnsim.NkiValidationError, match="tiles rows only"):
        isa.nc_matmul_mx(core, LOC, empty(core, (4, 4), "float32", PSUM), q, q, sc, sc, tile_position=(0, 0),
                         tile_size=(32, 64))
    # a single-quadrant tile's scales fit a 4-partition scale tile
    sc4 = tile(core, np.zeros((4, 4)), "uint8")
    isa.quantize_mx(core, LOC, q, tile(core, np.ones((32, 16)), "bfloat16"), sc4)
    np.testing.assert_array_equal(sc4.np, 127 - 8)               # amax 1 = 2^0: biased 127, minus Emax 8
    with pytest.raises(trnsim.NkiValidationError, match="need at least 36 partitions"):
        isa.quantize_mx(core, LOC, empty(core, (64, 4), "float8_e4m3fn_x4"), empty(core, (64, 16), "bfloat16"),
                        empty(core, (32, 4), "uint8"))
    c2 = NeuronCore("trn2")
    with pytest.raises(trnsim.NkiValidationError, match="NeuronCore-v4"):
        isa.quantize_mx(c2, LOC, empty(c2, (32, 4), "float8_e4m3fn_x4"), empty(c2, (32, 16), "bfloat16"),
                        empty(c2, (32, 4), "uint8"))


def test_mx_dtypes_through_nisa_view_of_uint32():
    """Kernels receive MX weights as uint32 and reinterpret them: the bits survive DMA and view."""
    from trnsim.memory.dtypes import pack_x4
    vals = np.arange(32 * 2 * 4, dtype=np.float32).reshape(32, 2, 4) / 8
    bits = pack_x4(DTYPES["float8_e4m3fn_x4"], vals)

    @nki.jit
    def k(w):
        t = nl.ndarray((32, 2), nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        nisa.dma_copy(t, w.view(nl.float8_e4m3fn_x4))
        out = nl.ndarray((32, 2), nl.uint32, buffer=nl.shared_hbm)
        nisa.dma_copy(out.view(nl.float8_e4m3fn_x4), t)
        return out
    np.testing.assert_array_equal(nki.simulate(k, target="trn3")(bits), bits)
