"""The rest of the legacy (neuronxcc.nki) surface (issue 13): copies at a dynamic offset, atomic read-modify-write,
loop and cross-program reductions, and the names trnsim refuses with a reason.  Numerics against float64 NumPy;
costs against the formulas the instructions claim."""

import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(7)


def f64(a):
    return np.asarray(a).astype(np.float64)


def _records(res, opcode):
    return [r for c in res.cores for r in c.instructions if r.opcode == opcode]


# -- tensor_copy_dynamic_src / _dst -------------------------------------------------------------------------------
def test_tensor_copy_dynamic_src_gathers_columns_at_offsets():
    src = RNG.standard_normal((128, 96)).astype(np.float32)
    offs = np.array([[5, 0, 95, 17, 17, 60]], dtype=np.int32)

    @nki.jit
    def k(src, offsets):
        out = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.load(src)
        o = nl.load(offsets)
        acc = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
        ix, iy = nl.mgrid[0:128, 0:1]
        for i in nl.affine_range(6):
            acc[ix, i + iy] = nisa.tensor_copy_dynamic_src(s[ix, o[0, i] + iy])
        nl.store(out, acc)
        return out

    res = k.run(src, offs)
    np.testing.assert_array_equal(f64(res.outputs), f64(src)[:, offs[0]])
    recs = _records(res, "tensor_copy_dynamic_src")
    assert len(recs) == 6
    # max(MIN_II_DYNAMIC, N): one element per partition here, so the minimum interval (about 600, the target's)
    assert all(r.cycles == res.cores[0].target.dynamic_offset_cycles == 600 for r in recs)
    # the offset tile is read by the copy: a dependency on the load that wrote it
    o_load = [r for r in res.cores[0].instructions if r.opcode == "dma_copy"][1]
    assert all(o_load.writes[0][0] in {op[0] for op in r.reads} for r in recs)


def test_tensor_copy_dynamic_src_index_alone_and_cost_of_a_wide_copy():
    src = RNG.standard_normal((64, 40, 700)).astype(np.float32)
    offs = np.array([[3, 39]], dtype=np.int32)

    @nki.jit
    def k(src, offsets):
        out = nl.ndarray((64, 2, 700), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.load(src)
        o = nl.load(offsets)
        acc = nl.ndarray((64, 2, 700), dtype=nl.float32, buffer=nl.sbuf)
        ix, _, iz = nl.mgrid[0:64, 0:1, 0:700]
        for i in nl.affine_range(2):
            acc[ix, i, iz] = nisa.tensor_copy_dynamic_src(s[ix, o[0, i], iz])
        nl.store(out, acc)
        return out

    res = k.run(src, offs)
    np.testing.assert_array_equal(f64(res.outputs), f64(src)[:, [3, 39], :])
    assert [r.cycles for r in _records(res, "tensor_copy_dynamic_src")] == [700.0, 700.0]   # N > 600


def test_tensor_copy_dynamic_dst_scatters_and_casts():
    val = RNG.standard_normal((32, 8)).astype(np.float32)
    offs = np.array([[2, 9]], dtype=np.int32)

    @nki.jit
    def k(val, offsets):
        out = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.shared_hbm)
        v = nl.load(val)
        o = nl.load(offsets)
        t = nl.zeros((32, 24), dtype=nl.float32)
        ip, jf = nl.mgrid[0:32, 0:8]
        nisa.tensor_copy_dynamic_dst(dst=t[ip, o[0, 0] + jf], src=v)
        nisa.tensor_copy_dynamic_dst(dst=t[ip, (o[0, 1] + 0 * jf) * 2 - 2 + jf], src=v)   # scaled: 16
        nl.store(out, t)
        return out

    got = k(val, offs)
    ref = np.zeros((32, 24))
    ref[:, 2:10] = val
    ref[:, 16:24] = val
    np.testing.assert_array_equal(f64(got), ref)


@nki.jit
def _four_columns_at(src, offsets):
    """Columns offsets[0, 0] .. + 3 of each of the 16 rows of ``src``, by one dynamic copy."""
    out = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.load(src)
    o = nl.load(offsets)
    ix, iy = nl.mgrid[0:16, 0:4]
    nl.store(out, nisa.tensor_copy_dynamic_src(s[ix, o[0, 0] + iy]))
    return out


def test_dynamic_offset_out_of_bounds_is_located():
    with pytest.raises(trnsim.NkiValidationError, match=r"Out-of-bound access for tensor .* \[30, 33\] exceed "
                                                         r"dimension size of 32") as e:
        _four_columns_at(np.zeros((16, 32), np.float32), np.array([[30]], np.int32))
    assert e.value.args and "test_v1_legacy_surface.py" in str(e.value)


def test_dynamic_offset_must_be_one_element_and_integer():
    @nki.jit
    def k(src, offsets):
        out = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.load(src)
        o = nl.load(offsets)
        ix, iy = nl.mgrid[0:16, 0:4]
        nl.store(out, nisa.tensor_copy_dynamic_src(s[ix, o[0, 0:2] + iy]))
        return out

    with pytest.raises(trnsim.NkiValidationError, match="a dynamic offset must be one element"):
        k(np.zeros((16, 32), np.float32), np.array([[1, 2]], np.int32))

    with pytest.raises(trnsim.NkiValidationError, match="must hold integers"):
        _four_columns_at(np.zeros((16, 32), np.float32), np.array([[1.5]], np.float32))
    np.testing.assert_array_equal(_four_columns_at(np.arange(16 * 32, dtype=np.float32).reshape(16, 32),
                                     np.array([[2.0]], np.float32))[0], [2, 3, 4, 5])   # an integral float is fine


def test_dynamic_copy_gpsimd_cannot_reach_psum():
    @nki.jit
    def k(src, offsets):
        out = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.load(src)
        p = nl.ndarray((16, 32), dtype=nl.float32, buffer=nl.psum)
        p[...] = nl.copy(s)
        o = nl.load(offsets)
        ix, iy = nl.mgrid[0:16, 0:4]
        nl.store(out, nisa.tensor_copy_dynamic_src(p[ix, o[0, 0] + iy], engine=nisa.gpsimd_engine))
        return out

    with pytest.raises(trnsim.NkiValidationError, match="GpSimd engine cannot access"):
        k(np.zeros((16, 32), np.float32), np.array([[1]], np.int32))


# -- atomic_rmw / dma_copy(dst_rmw_op=) ---------------------------------------------------------------------------
def test_atomic_rmw_indirect_rows_accumulate_repeats():
    base = RNG.standard_normal((16, 24)).astype(np.float32)
    value = RNG.standard_normal((128, 24)).astype(np.float32)
    idx = RNG.integers(0, 16, size=(128, 1)).astype(np.int32)      # many repeats of each row

    @nki.jit
    def k(rmw, value, indices):
        v = nl.load(value)
        it = nl.load(indices)
        ix = nl.arange(24)[None, :]
        nl.atomic_rmw(rmw[it, ix], value=v, op=np.add)
        return rmw

    res = k.run(base.copy(), value, idx)
    ref = f64(base)
    np.add.at(ref, idx[:, 0], f64(value))
    np.testing.assert_allclose(f64(res.outputs), ref, rtol=1e-5, atol=1e-5)
    (r,) = _records(res, "dma_copy_rmw")
    assert r.engine == "dma" and r.rows == 128
    assert r.nbytes == 2 * value.nbytes           # the source stream plus the destination rows read


def test_atomic_rmw_histogram_int32_with_slices_and_a_scalar_value():
    bins = RNG.integers(0, 8, size=(128, 1)).astype(np.int32)

    @nki.jit
    def k(values, counts):
        b = nl.load(values)
        nl.atomic_rmw(counts[b, :], value=1, op=np.add)
        return counts

    got = k(bins, np.zeros((8, 1), np.int32))
    np.testing.assert_array_equal(got[:, 0], np.bincount(bins[:, 0], minlength=8))


def test_atomic_rmw_rules():
    @nki.jit
    def k(rmw, value, indices):
        v = nl.load(value)
        it = nl.load(indices)
        nl.atomic_rmw(rmw[it, nl.arange(4)[None, :]], value=v, op=np.multiply)
        return rmw

    z = np.zeros((8, 4), np.float32)
    with pytest.raises(trnsim.NkiValidationError, match="supports only add"):
        k(z, np.ones((4, 4), np.float32), np.zeros((4, 1), np.int32))

    @nki.jit
    def k2(rmw, value, indices):
        v = nl.load(value)
        it = nl.load(indices)
        nl.atomic_rmw(rmw[it, nl.arange(4)[None, :]], value=v, op=np.add)
        return rmw

    with pytest.raises(trnsim.NkiValidationError, match=r"holds 9, outside \[0, 7\]"):
        k2(z, np.ones((4, 4), np.float32), np.array([[0], [1], [9], [2]], np.int32))
    with pytest.raises(trnsim.NkiValidationError, match="must have 4 rows"):
        k2(z, np.ones((3, 4), np.float32), np.zeros((4, 1), np.int32))


def test_dma_copy_dst_rmw_op_adds_into_hbm():
    a = RNG.standard_normal((32, 16)).astype(np.float32)
    b = RNG.standard_normal((32, 16)).astype(np.float32)

    @nki.jit
    def k(acc, x):
        t = nl.load(x)
        nisa.dma_copy(dst=acc, src=t, dst_rmw_op=np.add)
        nisa.dma_copy(dst=acc, src=t, dst_rmw_op=np.add)
        return acc

    got = k(a.copy(), b)
    np.testing.assert_allclose(f64(got), f64(a) + 2 * f64(b), rtol=1e-6, atol=1e-6)


def test_atomic_rmw_from_several_programs_lands_and_is_no_race():
    base = np.zeros((4, 8), np.float32)
    value = RNG.standard_normal((16, 8)).astype(np.float32)
    idx = (np.arange(16) % 4).reshape(16, 1).astype(np.int32)

    @nki.jit(strict_races=True)
    def k(rmw, value, indices):
        v = nl.load(value)
        it = nl.load(indices)
        nl.atomic_rmw(rmw[it, nl.arange(8)[None, :]], value=v, op=np.add)
        return rmw

    got = k[3](base.copy(), value, idx)
    ref = np.zeros((4, 8))
    for _ in range(3):
        np.add.at(ref, idx[:, 0], f64(value))
    np.testing.assert_allclose(f64(got), ref, rtol=1e-5, atol=1e-5)


# -- loop_reduce ------------------------------------------------------------------------------------------------
def test_loop_reduce_into_a_name_and_into_a_subscript():
    x = RNG.standard_normal((5, 64, 32)).astype(np.float32)

    @nki.jit
    def k(x):
        o1 = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        o3 = nl.ndarray((3, 64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        b = nl.zeros((64, 32), dtype=nl.float32)                    # the reference's example: zeroed first
        acc = nl.ndarray((2, nl.par_dim(64), 32), dtype=nl.float32, buffer=nl.sbuf)   # never written before
        per = nl.ndarray((3, nl.par_dim(64), 32), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(5):
            a = nl.load(x[i])
            b = nl.loop_reduce(a, op=np.add, loop_indices=[i], dtype=nl.float32)
            acc[1] = nl.loop_reduce(a, np.maximum, loop_indices=[i])
        for t in nl.affine_range(3):                   # an inner reduction restarts at each outer iteration
            for i in nl.affine_range(1, 5, 2):
                per[t] = nl.loop_reduce(nl.load(x[i + t - t]), np.add, loop_indices=[i])
        nl.store(o1, b)
        nl.store(o2, acc[1])
        for t in nl.affine_range(3):
            nl.store(o3[t], per[t])
        return o1, o2, o3

    res = k.run(x)
    s, m, p = res.outputs
    np.testing.assert_allclose(f64(s), f64(x).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(f64(m), f64(x).max(0))
    for t in range(3):
        np.testing.assert_allclose(f64(p[t]), f64(x[1]) + f64(x[3]), rtol=1e-6, atol=1e-6)
    # the first iteration of each reduction copies, every later one is one tensor_tensor (in place when assigned)
    assert len(_records(res, "tensor_tensor")) == 4 + 4 + 3 * 1


def test_loop_reduce_first_iteration_sets_the_destination():
    # trnsim's reading (see reductions.py): an accumulator holding something else is overwritten at the start
    x = RNG.standard_normal((3, 16, 8)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.full((16, 8), 100.0, dtype=nl.float32)
        for i in nl.affine_range(3):
            acc[...] = nl.loop_reduce(nl.load(x[i]), op=np.minimum, loop_indices=[i])
        nl.store(out, acc)
        return out

    np.testing.assert_array_equal(f64(k(x)), f64(x).min(0))


def test_loop_reduce_needs_an_accumulator_and_an_assignment():
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.load(x)
        acc = nl.loop_reduce(a, op=np.add, loop_indices=[1])   # noqa: F841  (not a first iteration)
        return out

    with pytest.raises(trnsim.NkiValidationError, match="accumulator `acc` holds no tile"):
        k(np.ones((8, 8), np.float32))

    @nki.jit
    def k2(x):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.load(x)
        nl.loop_reduce(a, op=np.add, loop_indices=[0])
        return out

    with pytest.raises(trnsim.NkiValidationError, match="assign its result"):
        k2(np.ones((8, 8), np.float32))


# -- all_reduce -------------------------------------------------------------------------------------------------
def test_all_reduce_over_one_axis_of_a_2d_grid():
    x = RNG.standard_normal((2, 3, 32, 40)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((2, 3, 32, 40), dtype=nl.float32, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        t = nl.load(x[i, j])
        r = nl.all_reduce(t, op=np.add, program_axes=[1])
        nl.store(out[i, j], r)
        return out

    res = k[2, 3].run(x)
    ref = np.broadcast_to(f64(x).sum(1, keepdims=True), x.shape)
    np.testing.assert_allclose(f64(res.outputs), ref, rtol=1e-5, atol=1e-5)
    # every member computes in the same order: the results agree bit for bit
    assert np.array_equal(res.outputs[:, 0], res.outputs[:, 2])
    # per program: 2 peer DMAs, one own copy, one reduction over 3 programs, two barriers
    c = res.cores[4]
    counts = c.instruction_counts()
    assert counts["vector.tensor_reduce"] == 1 and counts["gpsimd.core_barrier"] == 2
    assert sum(1 for r in c.instructions if r.opcode == "dma_copy") == 2 + 2     # load, store + 2 peers
    (red,) = [r for r in c.instructions if r.opcode == "tensor_reduce"]
    assert red.cycles == 40 * 3            # N = elements per partition of the gathered tile (> MIN_II)


def test_all_reduce_max_with_program_id_as_axis_and_dtype():
    x = RNG.standard_normal((4, 8, 8)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((4, 8, 8), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.load(x[i])
        nl.store(out[i], nl.all_reduce(t, op=np.maximum, program_axes=[i], dtype=nl.bfloat16))
        return out

    got = k[4](x)
    import ml_dtypes
    ref = f64(f64(x).max(0).astype(np.float32).astype(ml_dtypes.bfloat16))
    for p in range(4):
        np.testing.assert_array_equal(f64(got[p]), ref)


def test_all_reduce_with_a_mask_as_aws_moe_kernels_use_it():
    x = RNG.standard_normal((2, 128, 64)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        shard_id = nl.program_id(axis=0)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        t = nl.load(x[shard_id])
        r = nl.zeros((128, 64), dtype=nl.float32)
        r[i_p, i_f] = nl.all_reduce(t[i_p, i_f], op=np.add, program_axes=[shard_id], mask=(i_p < 100))
        nl.store(out[shard_id], r)
        return out

    got = k[2](x)
    for p in range(2):
        np.testing.assert_allclose(f64(got[p, :100]), f64(x[:, :100]).sum(0), rtol=1e-6, atol=1e-6)


def test_all_reduce_rules():
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.all_reduce(nl.load(x), op=np.add, program_axes=[1]))
        return out

    with pytest.raises(trnsim.NkiValidationError, match=r"program axis 1 is not an axis of the launch grid \[2\]"):
        k[2](np.ones((8, 8), np.float32))

    @nki.jit
    def k2(x):
        out = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        n = 8 if nl.program_id(0) == 0 else 4
        nl.store(out[0:n], nl.all_reduce(nl.load(x[0:n]), op=np.add, program_axes=0))
        return out

    with pytest.raises(trnsim.NkiValidationError, match="must reduce a tile of the same shape"):
        k2[2](np.ones((8, 8), np.float32))


def test_shape_only_runs_all_reduce_with_the_same_timeline_and_refuses_tile_held_indices():
    from trnsim.kernels.jit import run_kernel
    from trnsim.machine import schedule

    def k(x):
        out = nl.ndarray((2, 32, 40), dtype=nl.float32, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i], nl.all_reduce(nl.load(x[i]), op=np.add, program_axes=[0]))
        return out

    x = np.ones((2, 32, 40), np.float32)
    full = schedule(run_kernel(k, (x,), {}, grid=(2,)).cores).total_ns
    assert schedule(run_kernel(k, (x,), {}, grid=(2,), execute=False).cores).total_ns == full

    def k2(src, offsets):
        out = nl.ndarray((16, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        s, o = nl.load(src), nl.load(offsets)
        ix, iy = nl.mgrid[0:16, 0:4]
        nl.store(out, nisa.tensor_copy_dynamic_src(s[ix, o[0, 0] + iy]))
        return out

    with pytest.raises(NotImplementedError, match="shape-only run does not compute"):
        run_kernel(k2, (np.zeros((16, 32), np.float32), np.array([[3]], np.int32)), {}, execute=False)


# -- names with no runnable meaning -------------------------------------------------------------------------------
def test_refused_names_say_why():
    @nki.jit
    def k1(x):
        nisa.builtin_custom_op("topk", "libbuiltincustomop.so", 1, 1, srcs=[x], dsts=[x])
        return x

    with pytest.raises(NotImplementedError, match="compiled GpSimd custom-op library"):
        k1(np.ones((4, 4), np.float32))
    for fn, what in ((nl.gemm_grid, "gemm_moving_fmax"), (nl.gemm_stationary_grid, "gemm_stationary_fmax")):
        with pytest.raises(NotImplementedError, match=f"cannot run it.*{what}"):
            fn()
    for n in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "builtin_custom_op"):
        assert not getattr(getattr(nisa, n), "_trnsim_unsupported", False)
    for n in ("atomic_rmw", "loop_reduce", "all_reduce"):
        assert not getattr(getattr(nl, n), "_trnsim_unsupported", False)


# -- indirect rows in nl.load / nl.store (the tile-indexed HBM access atomic_rmw's kernels use) -------------------
def test_load_and_store_indirect_rows():
    table = RNG.standard_normal((20, 3, 8)).astype(np.float32)
    idx = RNG.integers(0, 20, size=(64, 1)).astype(np.int32)
    perm = RNG.permutation(40)[:64 // 2]

    @nki.jit
    def k(table, indices, where):
        out = nl.ndarray((64, 3, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        sc = nl.ndarray((40, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        it = nl.load(indices)
        ia, ib = nl.mgrid[0:1, 0:3, 0:8][1:]
        g = nl.load(table[it, ia, ib])                       # [64, 3, 8] gathered rows
        nl.store(out, g)
        nl.store(sc, nl.zeros((40, 8), dtype=nl.float32))
        w = nl.load(where)
        nl.store(sc[w, nl.arange(8)[None, :]], value=g[0:32, 1, :])   # scatter to distinct rows
        return out, sc

    out, sc = k(table, idx, perm.reshape(32, 1).astype(np.int32))
    np.testing.assert_array_equal(f64(out), f64(table)[idx[:, 0]])
    ref = np.zeros((40, 8))
    ref[perm] = f64(table)[idx[:32, 0], 1, :]
    np.testing.assert_array_equal(f64(sc), ref)


@pytest.mark.parametrize("mode,want", [(None, None), ("none", None), ("unknown", None), ("hwdge", 2), ("swdge", 1),
                                       (2, 2), (3, None)])
def test_v1_dma_copy_passes_dge_mode_on(mode, want):
    """``nisa.dma_copy(dge_mode=)`` of the legacy API reaches the DMA model (legacy numbering: 0 none, 1 swdge,
    2 hwdge, 3 unknown)."""
    from trnsim.isa.dma_dge import DGE_HW, DGE_SW
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    kw = {} if mode is None else {"dge_mode": mode if isinstance(mode, int) else getattr(nisa.dge_mode, mode)}

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, **kw)
        nl.store(out, t)
        return out

    res = k.run(x)
    np.testing.assert_array_equal(res.outputs, x)
    first = _records(res, "dma_copy")[0]
    got = None if first.dge is None or first.dge[0] == 0 else first.dge[0]
    assert got == {None: None, 2: DGE_HW, 1: DGE_SW}[want]
