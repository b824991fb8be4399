"""Legacy NKI (neuronxcc.nki) kernels on the same engine: numerics against float64 NumPy, identical instruction
streams to their v2 transcriptions, and the SDK 2.26-shaped errors."""

import inspect
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim

sys.path.insert(0, os.path.dirname(__file__))

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def v1(nki):
    import neuronxcc.nki as v1nki
    return v1nki


@pytest.fixture(scope="module")
def k(v1):
    import v1_team_kernels
    return v1_team_kernels


@pytest.fixture(scope="module")
def l1(v1):
    import neuronxcc.nki.language as l1
    return l1


@pytest.fixture(scope="module")
def i1(v1):
    import neuronxcc.nki.isa as i1
    return i1


def f64(a):
    return np.asarray(a).astype(np.float64)


def line_of(fn, marker):
    """Line number of the source line of ``fn`` containing ``marker``."""
    src, start = inspect.getsourcelines(fn)
    for i, s in enumerate(src):
        if marker in s:
            return start + i
    raise AssertionError(f"{marker!r} not in {fn.__name__}")


# -- module tree ---------------------------------------------------------------------------------------------
def test_module_tree(v1):
    import neuronxcc
    import neuronxcc.nki.compiler as ncc
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing as nt
    from neuronxcc import nki as same
    assert same is v1 and neuronxcc.nki is v1 and v1.language is nl and v1.isa is nisa
    assert nl.bfloat16 == np.dtype("bfloat16") and nl.float32 is np.float32 and nl.tfloat32 == np.dtype("|V4")
    assert nl.float8_e4m3 == np.dtype("float8_e4m3")
    assert int(nisa.dge_mode.hwdge) == 2 and int(nisa.nc_version.gen3) == 3 and int(nisa.engine.vector) == 5
    assert nt.tensor is v1.tensor
    assert callable(ncc.skip_middle_end_transformations) and hasattr(ncc.sbuf, "mod_alloc")


def test_not_shadowed_without_sim(tmp_path):
    """Unset TORCHNEURON_TARGET and no install_nki(): neuronxcc is not importable through trnsim."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHNEURON_TARGET"}
    code = "import trnsim\ntry:\n    import neuronxcc\n    print('imported', neuronxcc.__name__)\nexcept ImportError:\n" \
           "    print('absent')\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "absent"
    env["TORCHNEURON_TARGET"] = "sim"
    code = "import trnsim\nfrom neuronxcc import nki\nimport neuronxcc.nki.language as nl\nprint(nki.__name__)\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "trnsim.kernels.neuronxcc.nki"


# -- team kernels against float64 references ------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(300, 1000), (256, 1024), (5, 7)])
def test_add_spmd_ragged(k, shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    grid = (-(-shape[0] // 128), -(-shape[1] // 512))
    res = k.add_spmd[grid].run(a, b)
    np.testing.assert_allclose(res.outputs, f64(a) + f64(b), rtol=1e-6, atol=1e-6)
    # the ragged edge is trimmed by the masks: every DMA moves only rows/columns inside the tensor
    total = sum(r.nbytes for r in res.instructions if r.opcode == "dma_copy")
    assert total == 3 * a.nbytes


def test_add_spmd_bf16(k):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((130, 520)).astype(BF16)
    b = rng.standard_normal((130, 520)).astype(BF16)
    out = k.add_spmd[2, 2](a, b)
    assert out.dtype == BF16
    ref = (f64(a) + f64(b)).astype(np.float32).astype(BF16)      # fp32 sum rounded once to bf16
    np.testing.assert_array_equal(f64(out), f64(ref))


@pytest.mark.parametrize("dt,tol", [(np.float32, 1e-5), (BF16, 1e-5)])
def test_matmul_tiled(k, dt, tol):
    rng = np.random.default_rng(2)
    at = rng.standard_normal((384, 256)).astype(dt)
    b = rng.standard_normal((384, 1024)).astype(dt)
    res = k.matmul_tiled.run(at, b)
    ref = f64(at).T @ f64(b)
    err = np.max(np.abs(f64(res.outputs) - ref)) / np.max(np.abs(ref))
    assert err < tol
    ops = [r.opcode for r in res.instructions]
    assert ops.count("nc_matmul") == 3 * 2 * 2            # K/128 x M/128 x N/512, no extra adds for `+=`
    assert "tensor_tensor" not in ops


def test_softmax(k):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 200)) * 4).astype(np.float32)
    out = k.softmax[3](x)
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-7)


def test_layernorm(k):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((200, 384)) * 3 + 1).astype(np.float32)
    g = rng.standard_normal((1, 384)).astype(np.float32)
    b = rng.standard_normal((1, 384)).astype(np.float32)
    out = k.layernorm(x, g, b)
    xd = f64(x)
    m = xd.mean(axis=1, keepdims=True)
    v = ((xd - m) ** 2).mean(axis=1, keepdims=True)
    ref = (xd - m) / np.sqrt(v + 1e-5) * f64(g) + f64(b)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pool", [2, 3])
def test_avg_pool2d_mgrid(k, pool):
    rng = np.random.default_rng(5)
    C, H, W = 96, 12, 18
    x = rng.standard_normal((C, H, W)).astype(np.float32)
    res = k.avg_pool2d.run(x, pool)
    ref = f64(x).reshape(C, H // pool, pool, W // pool, pool).mean(axis=(2, 4))
    np.testing.assert_allclose(res.outputs, ref, rtol=1e-5, atol=1e-6)
    # one strided DMA brings every window in: no gather, a view
    loads = [r for r in res.instructions if r.opcode == "dma_copy"]
    assert len(loads) == 2 and loads[0].nbytes == x.nbytes


@pytest.mark.parametrize("dt", [np.float32, BF16])
def test_load_transpose2d(k, dt):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((384, 128)).astype(dt)
    res = k.transpose2d.run(x)
    np.testing.assert_array_equal(f64(res.outputs), f64(x).T)
    assert [r.opcode for r in res.instructions] == ["dma_transpose", "dma_copy"]


def test_output_argument_written_back(k):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    c = np.zeros_like(a)
    k.add_into(a, a, c)
    np.testing.assert_array_equal(c, 2 * a)


def test_entry_points(v1, k):
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    b = np.ones_like(a)
    for run in (lambda: v1.simulate_kernel(k.add_spmd[1, 1], a, b), lambda: v1.baremetal(k.add_spmd)[1, 1](a, b),
                lambda: v1.jit(k.add_spmd.fn, mode="simulation")[1, 1](a, b),
                lambda: v1.jit(mode="baremetal")(k.add_spmd.fn)[1, 1](a, b)):
        out = run()
        assert isinstance(out, np.ndarray)
        np.testing.assert_array_equal(out, a + b)
    for mode in ("jax", "torchxla", "trace"):      # framework modes run here too, on host arrays
        np.testing.assert_array_equal(v1.jit(k.add_spmd.fn, mode=mode)[1, 1](a, b), a + b)
    with pytest.raises(ValueError, match="unknown mode"):
        v1.jit(k.add_spmd.fn, mode="fast")


def test_torch_inputs(k):
    torch = pytest.importorskip("torch")
    a = torch.randn(128, 512)
    out = k.add_spmd[1, 1](a, a)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, a + a)


def test_benchmark_latency(v1, k):
    """Latency percentiles come from the timing model; without it, a clear error (never a made-up number)."""
    a = np.ones((256, 1024), np.float32)
    bk = v1.benchmark(warmup=1, iters=3)(k.add_spmd)[2, 2]
    try:
        from trnsim.machine import schedule
    except ImportError:
        with pytest.raises(NotImplementedError, match="timing model"):
            bk(a, a)
        return
    out = bk(a, a)
    np.testing.assert_array_equal(out, a + a)
    lat = bk.benchmark_result.nc_latency
    tl = schedule(bk.run(a, a).cores)          # a run is deterministic: the same timeline
    assert lat.get_latency_percentile(50) == pytest.approx(tl.total_ns / 1000.0)
    assert lat.get_latency_percentile(99) == lat.get_latency_percentile(50) > 0
    with pytest.raises(ValueError):
        lat.get_latency_percentile(101)


# -- v1 and v2 give identical results and instruction streams ------------------------------------------------
def _stream(res):
    """The instruction stream with buffer ids renumbered by first use (ids are global counters)."""
    ids = {}

    def ren(ranges):
        out = []
        for r in ranges:
            ids.setdefault(r[0], len(ids))
            out.append((ids[r[0]],) + tuple(r[1:]))
        return tuple(out)
    return [(r.opcode, r.engine, r.cycles, r.ns, r.flops, r.nbytes, ren(r.writes), ren(r.reads))
            for r in res.instructions]


def _v2_kernels(nki, nl, nisa):
    @nki.jit
    def add_tile(a, b):
        M, N = a.shape
        c = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        r0, c0 = i * 128, j * 512
        nr, nc = min(128, M - r0), min(512, N - c0)
        x = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(x[0:nr, 0:nc], a[r0:r0 + nr, c0:c0 + nc])
        nisa.dma_copy(y[0:nr, 0:nc], b[r0:r0 + nr, c0:c0 + nc])
        z = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(z[0:nr, 0:nc], x[0:nr, 0:nc], y[0:nr, 0:nc], op=nl.add)
        nisa.dma_copy(c[r0:r0 + nr, c0:c0 + nc], z[0:nr, 0:nc])
        return c

    @nki.jit
    def matmul(a_t, b):
        K, M = a_t.shape
        _, N = b.shape
        c = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        for m in range(M // 128):
            for n in range(N // 512):
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                nisa.memset(acc, 0)
                for kk in range(K // 128):
                    s = nl.ndarray((128, 128), dtype=a_t.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(s, a_t[kk * 128:(kk + 1) * 128, m * 128:(m + 1) * 128])
                    mv = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(mv, b[kk * 128:(kk + 1) * 128, n * 512:(n + 1) * 512])
                    nisa.nc_matmul(acc, s, mv, accumulate=True)
                r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(r, acc)
                nisa.dma_copy(c[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], r)
        return c

    @nki.jit
    def softmax(x):
        R, F = x.shape
        out = nl.ndarray((R, F), dtype=x.dtype, buffer=nl.shared_hbm)
        r0 = nl.program_id(0) * 128
        n = min(128, R - r0)
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t[0:n], x[r0:r0 + n])
        mx = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(mx[0:n], nl.maximum, t[0:n], axis=1, keepdims=True)
        d = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(d[0:n], t[0:n], nl.subtract, mx[0:n])
        e = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(e[0:n], nl.exp, d[0:n])
        s = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(s[0:n], nl.add, e[0:n], axis=1, keepdims=True)
        y = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(y[0:n], e[0:n], nl.divide, s[0:n])
        nisa.dma_copy(out[r0:r0 + n], y[0:n])
        return out

    return add_tile, matmul, softmax


def test_v1_v2_identical_streams(nki, nl, nisa, k):
    add2, mm2, sm2 = _v2_kernels(nki, nl, nisa)
    rng = np.random.default_rng(8)
    cases = [
        (k.add_spmd[3, 2], add2[3, 2], (rng.standard_normal((300, 1000)).astype(np.float32),
                                        rng.standard_normal((300, 1000)).astype(np.float32))),
        (k.matmul_tiled, mm2, (rng.standard_normal((256, 256)).astype(BF16),
                               rng.standard_normal((256, 512)).astype(BF16))),
        (k.softmax[3], sm2[3], ((rng.standard_normal((300, 200))).astype(np.float32),)),
    ]
    for v1k, v2k, args in cases:
        r1 = v1k.run(*args)
        r2 = v2k.run(*args)
        np.testing.assert_array_equal(f64(r1.outputs), f64(r2.outputs))
        s1, s2 = _stream(r1), _stream(r2)
        assert len(s1) == len(s2) > 0
        for a, b in zip(s1, s2):
            assert a == b


# -- errors shaped like the SDK 2.26 catalogue, at the user's line --------------------------------------------
def _errors_kernels(v1, nl):
    @v1.jit
    def too_many_partitions(a):
        t = nl.load(a)  # LOAD-256
        return t

    @v1.jit
    def out_of_bounds(a):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(4096)[None, :]
        t = nl.load(a[i_p, i_f])  # LOAD-OOB
        return t

    @v1.jit
    def load_from_sbuf(a):
        t = nl.load(a)
        u = nl.load(t)  # LOAD-SBUF
        return u

    @v1.jit
    def store_to_sbuf(a):
        t = nl.load(a)
        u = nl.zeros(t.shape, nl.float32)
        nl.store(u, value=t)  # STORE-SBUF

    @v1.jit
    def masked_fine(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(4096)[None, :]
        t = nl.load(a[i_p, i_f], mask=(i_f < 4000))
        nl.store(out[i_p, i_f], value=t, mask=(i_f < 4000))
        return out

    @v1.jit
    def triangular_mask(a):
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(a[i_p, i_f], mask=(i_p >= i_f))  # TRI
        return t

    return too_many_partitions, out_of_bounds, load_from_sbuf, store_to_sbuf, masked_fine, triangular_mask


def test_error_messages(v1, l1):
    tmp, oob, lsb, ssb, fine, tri = _errors_kernels(v1, l1)
    cases = [
        (tmp, np.zeros((256, 64), np.float32), "LOAD-256",
         "number of partitions 256 exceed architecture limitation of 128"),
        (oob, np.zeros((128, 4000), np.float32), "LOAD-OOB",
         "Out-of-bound access for tensor `a` on dimension 1: index range [0, 4095] exceed dimension size of 4000"),
        (lsb, np.zeros((128, 64), np.float32), "LOAD-SBUF",
         "Expected operand 'src' of 'load' to be in address space 'hbm', but got a tile in 'sbuf' instead"),
        (ssb, np.zeros((128, 64), np.float32), "STORE-SBUF",
         "Expected operand 'dst' of 'store' to be in address space 'hbm', but got a tile in 'sbuf' instead"),
        (tri, np.zeros((128, 128), np.float32), "TRI", "involves 2 index axes"),
    ]
    for kern, arg, marker, msg in cases:
        with pytest.raises(trnsim.NkiValidationError) as ei:
            kern(arg)
        assert msg in str(ei.value)
        assert ei.value.location == (inspect.getsourcefile(kern.fn), line_of(kern.fn, marker))
    # the same out-of-range index under a mask that trims it is fine
    a = np.arange(128 * 4000, dtype=np.float32).reshape(128, 4000)
    np.testing.assert_array_equal(fine(a), a)


def test_index_expression_views(v1, l1):
    """arange/mgrid indexing is a strided view: reversed, strided and broadcast reads match NumPy."""
    nl = l1

    @v1.jit
    def views(a):
        out = nl.ndarray((64, 32), dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(64)[:, None]
        i_f = nl.arange(32)[None, :]
        t = nl.load(a[2 * i_p + 1, 63 - 2 * i_f])
        nl.store(out[i_p, i_f], value=t)
        return out

    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_array_equal(views(a), a[1::2, 63::-2][:, :32])


def test_iota_and_affine_select(v1, l1, i1):
    nl, nisa = l1, i1

    @v1.jit
    def causal(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        idx = nl.ndarray((128, 128), dtype=nl.int32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(128)[None, :]
        t = nl.load(a)
        m = nisa.affine_select(i_p - i_f >= 0, t, -1e4)
        nl.store(out, value=m)
        nl.store(idx, value=nisa.iota(i_p * 128 + i_f, nl.int32))
        return out, idx

    a = np.random.default_rng(9).standard_normal((128, 128)).astype(np.float32)
    out, idx = causal(a)
    np.testing.assert_array_equal(out, np.where(np.tril(np.ones((128, 128), bool)), a, np.float32(-1e4)))
    np.testing.assert_array_equal(idx, np.arange(128 * 128).reshape(128, 128))


def test_operators_and_promotion(v1, l1):
    nl = l1

    @v1.jit
    def ops(a, b):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nl.load(b)
        z = (x * 2.0 - y) / 4.0 + 1.0
        z += x
        z -= 3 * y
        w = -z
        c = nl.copy(x > y, dtype=nl.float32)
        nl.store(out, value=w + c)
        return out, (x + y).dtype

    rng = np.random.default_rng(10)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(BF16)
    res = ops.run(a, b)
    out, dt = res.outputs
    ad, bd = f64(a), f64(b)
    y3 = f64((3 * bd).astype(np.float32).astype(BF16))     # `3 * y` is a bfloat16 tile: rounded once
    z = (ad * 2.0 - bd) / 4.0 + 1.0 + ad - y3
    np.testing.assert_allclose(out, -z + (ad > bd), rtol=1e-5, atol=1e-5)
    assert dt == np.float32          # float32 + bfloat16 promotes to float32


def test_par_dim_tile_buffers(v1, l1):
    """A [B, par_dim(P), F] buffer holds B tiles of P partitions; each t[i] is a [P, F] tile."""
    nl = l1

    @v1.jit
    def blocks(a):
        B = a.shape[0] // 128
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((B, nl.par_dim(128), a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(B):
            buf[i] = nl.load(a[i * 128:(i + 1) * 128, :])
        for i in nl.sequential_range(B):
            nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(buf[i], 2.0))
        return out

    a = np.random.default_rng(11).standard_normal((384, 32)).astype(np.float32)
    np.testing.assert_array_equal(blocks(a), 2 * a)


def test_grid_rank3_and_program_queries(v1, l1):
    nl = l1

    @v1.jit
    def ids(a):
        out = nl.ndarray((2, 3, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        i, j, kk = nl.program_id(0), nl.program_id(1), nl.program_id(2)
        v = nl.full((1, 1), 100 * i + 10 * j + kk + 1000 * (nl.num_programs() == 24) + 5000 * nl.program_ndim()
                    + 0 * nl.num_programs((0, 2)), nl.int32)
        nl.store(out[i, j:j + 1, kk:kk + 1], value=v)
        return out

    out = ids[2, 3, nl.spmd_dim(2, 2)](np.zeros(1, np.float32))
    i, j, kk = np.meshgrid(range(2), range(3), range(4), indexing="ij")
    np.testing.assert_array_equal(out, 100 * i + 10 * j + kk + 1000 + 15000)


def test_matmul_transpose_constants_and_casts(v1, l1):
    nl = l1
    import neuronxcc.nki.compiler as ncc

    @v1.jit
    def mm(x, y):
        out = nl.ndarray((64, 96), dtype=nl.float32, buffer=nl.shared_hbm)
        xt = nl.load(x)                                    # [64, 128]: M x K
        yt = nl.load(y, dtype=nl.bfloat16)                 # [128, 96]: K x N, cast by the DMA
        xb = nl.static_cast(xt, nl.bfloat16)
        acc = nl.zeros((64, 96), nl.float32, buffer=nl.psum)
        acc += nl.matmul(xb, yt)                           # x @ y: x transposed on the PE array first
        xT = nl.copy(nl.transpose(xb))                     # [128, 64] = K x M
        acc += nl.matmul(xT, yt, transpose_x=True)
        eye = nl.load(nl.shared_constant(np.eye(64, dtype=np.float32)))
        buf = nl.ndarray((64, 96), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        buf[...] = acc
        nl.store(out, value=nl.multiply(buf, 0.5))
        return out, eye.shape

    rng = np.random.default_rng(12)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    y = rng.standard_normal((128, 96)).astype(np.float32)
    out, eshape = mm(x, y)
    xb = f64(x.astype(BF16))
    yb = f64(y.astype(BF16))
    np.testing.assert_allclose(out, xb @ yb, rtol=1e-5, atol=1e-4)
    assert eshape == (64, 64)


def test_profile_writes_trace(v1, k, tmp_path):
    import json
    a = np.ones((128, 512), np.float32)
    pk = v1.profile(working_directory=str(tmp_path), save_trace_name="add.json")(k.add_spmd)[1, 1]
    np.testing.assert_array_equal(pk(a, a), a + a)
    data = json.loads((tmp_path / "add.json").read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = [e.get("name", "") for e in events if e.get("ph") == "X"]
    # 3 transfers of 128 partitions, each spread over 16 DMA engines (8 partitions each): 48 slices; one add
    assert sum(n.startswith("dma_copy") for n in names) == 3 * 16
    assert sum(n.startswith("tensor_tensor") for n in names) == 1
    assert any(e.get("ph") == "s" for e in events)            # dependency flows
