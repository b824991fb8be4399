"""Legacy NKI (neuronxcc.nki) gaps found on public v1 kernels (issue 13), each with a small kernel of our own:
numerics against float64 NumPy, and the rules the SDK 2.26 reference keeps (cited where the refusal stands)."""

import ml_dtypes
import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402
import neuronxcc.nki.typing as nt  # noqa: E402

A = (np.arange(128 * 64, dtype=np.float32).reshape(128, 64) % 37) / 8 - 2


def f64(a):
    return np.asarray(a).astype(np.float64)


# -- language ops on host (HBM) arrays ---------------------------------------------------------------------------
def test_static_cast_and_math_on_hbm_arrays():
    @nki.jit
    def k(x, y):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        out2 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.static_cast(x, nl.bfloat16))         # x lives in HBM: the compiler loads it
        nl.store(out2, nl.add(nl.exp(x), y))
        return out, out2
    y = np.ones_like(A)
    o1, o2 = k(A, y)
    np.testing.assert_array_equal(f64(o1), f64(A.astype(ml_dtypes.bfloat16)))
    np.testing.assert_allclose(o2, np.exp(f64(A)) + 1, rtol=2e-6)


def test_nisa_instruction_on_hbm_is_still_refused():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.activation(op=nl.exp, data=x))
        return out
    with pytest.raises(trnsim.NkiValidationError, match="is in HBM; expected in SBUF"):
        k(A)


# -- `dst[...] = nisa.nc_matmul(...)` ---------------------------------------------------------------------------
@pytest.mark.parametrize("space", ["psum", "sbuf"])
def test_assign_nc_matmul_into_tile(space):
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        r = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum if space == "psum" else nl.sbuf)
        r[...] = nisa.nc_matmul(t, t)
        r[...] = nisa.nc_matmul(t, t)          # a second assignment overwrites, it does not accumulate
        nl.store(out, r)
        return out
    res = k.run(A)
    np.testing.assert_allclose(res.outputs, f64(A).T @ f64(A), rtol=1e-5, atol=1e-4)
    ops = [r.opcode for r in res.instructions]
    assert ops.count("nc_matmul") == 2
    assert ops.count("tensor_copy") == (2 if space == "sbuf" else 0)   # SBUF: through PSUM, copied out


# -- block tensors ---------------------------------------------------------------------------------------------
def test_zeros_ndarray_and_memset_on_block_tensors():
    @nki.jit
    def k(x):
        out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        z = nl.zeros((3, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        f = nisa.memset(shape=(3, nl.par_dim(128), 64), value=1.5, dtype=nl.float32)
        b = nl.ndarray((3, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
        b[...] = 2.0                                  # memset of a whole block tensor
        for i in nl.affine_range(3):
            nl.store(out[i], nl.add(nl.add(z[i], f[i]), b[i]))
        return out
    res = k.run(A)
    np.testing.assert_array_equal(res.outputs, np.full((3, 128, 64), 3.5, np.float32))
    # one memset per block tile for each of the three block tensors
    assert [r.opcode for r in res.instructions].count("memset") == 9


# -- partition broadcast ----------------------------------------------------------------------------------------
def test_partition_broadcast_in_compute():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        out2 = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        row = nl.load(x[0:1, :])
        t = nl.load(x)
        nl.store(out, nl.multiply(t, row.broadcast_to((128, 64))))
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(64)[None, :]
        nl.store(out2, nl.copy(row[i_p * 0, i_f]))        # partition step 0
        return out, out2
    o1, o2 = k(A)
    np.testing.assert_allclose(o1, f64(A) * f64(A[0:1]), rtol=1e-6)
    np.testing.assert_array_equal(o2, np.broadcast_to(A[0:1], (128, 64)))


def test_partition_broadcast_operand_of_an_instruction_is_replicated_by_a_dma():
    """NKI access patterns give an instruction a start partition and a partition count (consecutive partitions), so
    a nisa instruction cannot read a partition-step-0 view itself; ``nl.broadcast_to`` returns a new SBUF tile
    broadcast along the partition dimension (NKI API reference), and the fused mamba tutorial passes
    ``tile.broadcast_to((128, n))`` to ``nisa.tensor_tensor`` on hardware.  trnsim replicates the row with an
    SBUF-to-SBUF DMA first (its cost on the timeline), then issues the instruction on consecutive partitions."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        row = nl.load(x[0:1, :])
        full = nl.load(x)
        nl.store(out, nisa.tensor_tensor(full, row.broadcast_to((128, 64)), op=nl.multiply))
        return out
    np.testing.assert_allclose(k(A), f64(A) * f64(A[0:1]), rtol=1e-6)
    p = trnsim.profile(k)(A)
    ops = [(r.opcode, r.engine) for r in p.result.cores[0].instructions]
    i = ops.index(("tensor_tensor", "vector"))
    dmas = [o for o in ops[:i] if o[0] == "dma_copy"]
    assert len(dmas) == 3, ops          # two loads and the replication of the row


# -- jit modes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["trace", "simulation", "baremetal", "auto", "jax", "torchxla"])
def test_jit_modes(mode):
    def body(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(x), 2.0))
        return out
    np.testing.assert_array_equal(nki.jit(body, mode=mode)(A), A * 2)


def test_trace_with_simulate_kernel_and_unknown_mode():
    @nki.trace
    def k(a, b):
        nl.store(b, nl.load(a))
    b = np.zeros_like(A)
    nki.simulate_kernel(k, A, b)
    np.testing.assert_array_equal(b, A)
    with pytest.raises(ValueError, match="unknown mode"):
        nki.jit(lambda x: x, mode="bogus")


# -- reductions over non-trailing axes --------------------------------------------------------------------------
def test_reductions_over_middle_axes():
    x = A.reshape(128, 8, 8)

    @nki.jit
    def k(a):
        o1 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(o1, nl.sum(t, axis=1))                          # the middle axis: permuted view
        nl.store(o2, nisa.tensor_reduce(np.max, t, axis=(1,)))   # NKI 2.26: axes starting at 1 are legal
        t4 = nl.load(a.reshape((128, 2, 4, 8)))
        nl.store(o3, nl.max(t4, axis=(1, 3)))                    # non-consecutive axes through nl.max
        return o1, o2, o3
    o1, o2, o3 = k(x)
    np.testing.assert_allclose(o1, f64(x).sum(1), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(o2, x.max(1))
    np.testing.assert_array_equal(o3, x.reshape(128, 2, 4, 8).max(axis=(1, 3)))


def test_tensor_reduce_axis_rule_v1_keeps_consecutive():
    @nki.jit
    def k(a):
        o = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(o, nisa.tensor_reduce(np.add, nl.load(a), axis=(1, 3)))
        return o
    with pytest.raises(trnsim.NkiValidationError, match="axis"):
        k(A.reshape(128, 2, 4, 8))


# -- matmul operands --------------------------------------------------------------------------------------------
def test_nl_matmul_stages_a_psum_operand_and_nisa_refuses_it():
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        p[...] = nl.copy(t)
        nl.store(out, nl.matmul(t, p, transpose_x=True))     # nl.matmul: the compiler copies p to SBUF
        return out
    np.testing.assert_allclose(k(A), f64(A).T @ f64(A), rtol=1e-5, atol=1e-4)

    @nki.jit
    def k2(x):
        out = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        p[...] = nl.copy(t)
        nl.store(out, nisa.nc_matmul(t, p))
        return out
    # NKI 2.26 reference, nc_matmul: "the stationary and moving must be SBUF tiles"
    with pytest.raises(trnsim.NkiValidationError, match="'moving'.*is in PSUM; expected in SBUF"):
        k2(A)


def test_double_row_fp8_matmul_on_trn2():
    f8 = ml_dtypes.float8_e4m3
    s = (np.arange(128 * 2 * 64) % 5 - 2).astype(f8).reshape(128, 2, 64)
    m = (np.arange(128 * 2 * 32) % 3 - 1).astype(f8).reshape(128, 2, 32)

    @nki.jit
    def k(a, b):
        out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.psum)
        ps[...] = nisa.nc_matmul(nl.load(a), nl.load(b), perf_mode="double_row")
        nl.store(out, ps)
        return out
    res = k.run(s, m)
    np.testing.assert_array_equal(res.outputs, np.einsum("kjm,kjn->mn", f64(s), f64(m)))
    mm = [r for r in res.instructions if r.opcode == "nc_matmul"][0]
    assert mm.flops == 2 * 256 * 64 * 32           # K = 2 x 128 rows in one instruction


# -- dma_transpose dtypes, typing, MX names ---------------------------------------------------------------------
def test_dma_transpose_casts():
    @nki.jit
    def k(x):
        out = nl.ndarray((64, 128), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nl.store(out, nisa.dma_transpose(x, dtype=nl.bfloat16))
        return out
    np.testing.assert_array_equal(f64(k(A)), f64(A.T.astype(ml_dtypes.bfloat16)))


def test_mutable_tensor_annotation_and_mx_names():
    @nki.jit
    def k(a: nt.tensor, b: nt.mutable_tensor):
        nl.store(b, nl.multiply(nl.load(a), 3.0))
    b = np.zeros_like(A)
    k(A, b)
    np.testing.assert_array_equal(b, A * 3)
    assert nt.mutable_tensor[128, 64] is nt.mutable_tensor
    from trnsim.memory import dtype_of
    assert dtype_of(nl.float8_e4m3fn_x4).packed == 4 and dtype_of(nl.float8_e8m0fnu).name == "float8_e8m0fnu"


# -- instructions the legacy front end now issues -----------------------------------------------------------------
def test_v1_partition_reduce_sequence_bounds_local_gather():
    seg = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.float32)
    src = (np.arange(128 * 40, dtype=np.float32).reshape(128, 40) % 23)
    idx = np.tile((np.arange(16 * 2).reshape(16, 2) % 30).astype(np.uint16), (8, 1))

    @nki.jit
    def k(a, s, g, i):
        o1 = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((1, 2, 9), dtype=nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray((128, 32, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(o1, nisa.tensor_partition_reduce(np.add, nl.load(a)))
        nl.store(o2, nisa.sequence_bounds(segment_ids=nl.load(s)))
        nl.store(o3, nisa.local_gather(nl.load(g), nl.load(i), 2))
        return o1, o2, o3
    o1, o2, o3 = k(A, seg, src, idx)
    np.testing.assert_allclose(o1[0], f64(A).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(o2[0], [[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]])
    flat = idx[:16].flatten(order="F").astype(np.int64)
    np.testing.assert_array_equal(o3[:16], src[:16][:, flat[:, None] + np.arange(2)])
