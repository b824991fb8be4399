"""The last nki-samples idioms (issue 31), each with a small kernel of our own against float64 NumPy:
block tensors and direct allocation (PSUM banks), dense ``nl.mgrid``, indirect rows after integer indices with
masks, slices past a tensor kept in bounds by a mask, one-element loads, partition and free broadcasts, the legacy
``double_row_gen3`` spelling, loop directives."""

import functools

import ml_dtypes
import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.compiler as ncc  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(3131)


def f64(a):
    return np.asarray(a).astype(np.float64)


# -- block tensors: each block is a tile with its own live range ----------------------------------------------------
def test_psum_block_tensor_larger_than_psum_runs_block_by_block():
    """A [4, 8, par_dim(128), 512] fp32 PSUM tensor is 128 KiB per partition logically (PSUM holds 16 KiB), but each
    block is written and read before the next one: only the live blocks count (the block dimension is logical)."""
    @nki.jit
    def k(a_t, b):
        out = nl.ndarray((4 * 128, 8 * 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((4, 8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        at = nl.load(a_t)
        bt = nl.load(b)
        for i in nl.affine_range(4):
            for j in nl.affine_range(8):
                acc[i, j, :, :] = nisa.nc_matmul(at[:, i * 128:(i + 1) * 128], bt[:, j * 512:(j + 1) * 512])
                nl.store(out[i * 128:(i + 1) * 128, j * 512:(j + 1) * 512], nl.copy(acc[i, j]))
        return out

    a_t = RNG.standard_normal((64, 512)).astype(np.float32)
    b = RNG.standard_normal((64, 4096)).astype(np.float32)
    got = k(a_t, b)
    np.testing.assert_allclose(got, f64(a_t).T @ f64(b), rtol=1e-4, atol=1e-3)


def _placement(buffer, kind):
    from trnsim.kernels.v1 import language as v1l
    from trnsim.kernels.context import KernelContext, pop, push
    from trnsim.machine.core import NeuronCore
    from trnsim.targets import get_target
    prev = push(KernelContext([NeuronCore(get_target("trn2"))]))
    try:
        return v1l._direct_placement(buffer, kind, None)
    finally:
        pop(prev)


def test_psum_mod_alloc_places_blocks_on_banks_modulo():
    """ncc.psum.mod_alloc(base_bank=b, num_bank_tiles=(n,)): block i goes to bank b + i % n, byte 0 of the bank
    (nki.compiler.psum.mod_alloc reference: its table for num_bank_tiles=(2,) is banks 0, 1, 0, 1)."""
    place = _placement(ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2,)), "psum")
    assert [place((i,), 128, 2048) for i in range(4)] == [(0, 0), (0, 2048), (0, 0), (0, 2048)]
    place = _placement(ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2, 3)), "psum")
    assert place((1, 2), 128, 512) == (0, (2 + 5) * 2048)
    assert place((3, 4), 128, 512) == (0, (2 + 1 * 3 + 1) * 2048)        # (3 % 2, 4 % 3) = (1, 1)


def test_psum_alloc_function_is_called_with_the_documented_parameter_names():
    """ncc.psum.alloc(func): func(idx=, pdim_size=, fdim_size=) -> (bank, start partition, byte address); a
    functools.partial binding its first parameter by keyword (as kernels do) works."""
    def where(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)
    place = _placement(ncc.psum.alloc(functools.partial(where, bank_map={(0,): 1, (1,): 5})), "psum")
    assert place((0,), 128, 512) == (0, 2048) and place((1,), 128, 512) == (0, 5 * 2048)


def test_psum_mod_alloc_double_buffer_runs_and_a_shared_bank_is_refused():
    def make(nbanks):
        @nki.jit
        def k(a_t, b):
            out = nl.ndarray((128, 4 * 512), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(nbanks,)))
            at = nl.load(a_t)
            bt = nl.load(b)
            for j in nl.affine_range(4):
                acc[j] = nisa.nc_matmul(at, bt[:, j * 512:(j + 1) * 512])
            for j in nl.affine_range(4):        # every block still live here: each needs a bank of its own
                nl.store(out[:, j * 512:(j + 1) * 512], nl.copy(acc[j]))
            return out
        return k

    a_t = RNG.standard_normal((32, 128)).astype(np.float32)
    b = RNG.standard_normal((32, 2048)).astype(np.float32)
    np.testing.assert_allclose(make(4)(a_t, b), f64(a_t).T @ f64(b), rtol=1e-4, atol=1e-3)
    with pytest.raises(trnsim.NkiValidationError, match="placed on the same bytes"):
        make(2)(a_t, b)                         # blocks 0 and 2 share bank 0 while both are live


def test_sbuf_mod_alloc_in_a_loop_body_keeps_its_first_trace_address():
    """neuronx-cc traces a loop body once: an address computed from a counter the body advances
    (``cur += size`` after each declaration) is the first iteration's, in every iteration."""
    @nki.jit
    def k(x):
        out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        cur = 0
        for i in nl.affine_range(8):
            t = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                           buffer=ncc.sbuf.mod_alloc(base_addr=cur, num_free_tiles=(2,)))
            cur += 2 * 512 * 4                   # 32 KiB per iteration: past SBUF's 192 KiB if it accumulated
            t[i % 2] = nl.load(x[i])
            nl.store(out[i], nl.multiply(t[i % 2], 2.0))
        return out

    x = RNG.standard_normal((8, 128, 512)).astype(np.float32)
    np.testing.assert_allclose(k(x), 2 * f64(x), rtol=1e-6)


# -- nl.mgrid is dense ----------------------------------------------------------------------------------------
def test_mgrid_components_span_the_whole_grid():
    """An expression of some components (``3 * g.y + g.z``) keeps the grid's shape, partitions included, as NumPy's
    dense mgrid does: an iota of it has one row per partition."""
    @nki.jit
    def k():
        out = nl.ndarray((128, 4, 3, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        g = nl.mgrid[0:128, 0:4, 0:3, 0:3]
        nl.store(out[g.p, g.x, g.y, g.z], nisa.iota(3 * g.y + g.z, dtype=nl.int32))
        return out

    want = np.broadcast_to((3 * np.arange(3)[:, None] + np.arange(3)[None, :]), (128, 4, 3, 3))
    np.testing.assert_array_equal(k(), want)


# -- indirect rows after integer indices, with masks ---------------------------------------------------------------
def _gather_kernel():
    @nki.jit
    def k(t, idx, n_valid):
        out = nl.ndarray((2, 128, 64), dtype=t.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        ix = nl.load(idx)
        for b in nl.affine_range(2):
            rows = nl.load(t[b, ix, i_f], mask=(i_p < n_valid))
            nl.store(out[b, i_p, i_f], value=rows, mask=(i_p < n_valid))
        return out
    return k


def test_indirect_rows_after_an_integer_index_with_a_mask():
    """``t[b, indices_tile, i_f]`` gathers rows of ``t[b]``; partitions the mask leaves out are neither moved nor
    bounds-checked (their indices may be anything)."""
    t = RNG.standard_normal((2, 600, 64)).astype(np.float32)
    idx = RNG.integers(0, 600, (128, 1)).astype(np.int32)
    idx[100:] = 1000                                   # out of bounds, but masked out
    got = _gather_kernel()(t, idx, 100)
    for b in range(2):
        np.testing.assert_array_equal(got[b, :100], t[b, idx[:100, 0]])


def test_indirect_rows_out_of_bounds_on_a_kept_partition_is_refused():
    t = RNG.standard_normal((2, 600, 64)).astype(np.float32)
    idx = RNG.integers(0, 600, (128, 1)).astype(np.int32)
    idx[100] = 610
    with pytest.raises(trnsim.NkiValidationError, match=r"on dimension 1: index tile .* holds 610, outside \[0, 599\]"):
        _gather_kernel()(t, idx, 101)


# -- a slice past the tensor, kept in bounds by the mask -------------------------------------------------------
def _tail_copy(n_rows):
    @nki.jit
    def k(x):
        out = nl.ndarray((32, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None] + 256
        t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=x[256:384, 0:8], dst=t[:, :], mask=(i_p < n_rows))
        nl.store(out, t[0:32, :])
        return out
    return k


def test_slice_past_the_tensor_is_checked_against_the_masked_region():
    x = RNG.standard_normal((288, 8)).astype(np.float32)
    np.testing.assert_array_equal(_tail_copy(288)(x), x[256:288])
    with pytest.raises(trnsim.NkiValidationError, match=r"Out-of-bound access .* index range \[256, 288\]"):
        _tail_copy(289)(x)                  # the mask lets row 288 through


# -- one element, partition and free broadcasts ------------------------------------------------------------
def test_one_element_load_and_store_and_a_partition_broadcast_add():
    """``nl.load(t[b, h])`` is a [1, 1] tile; adding it to a [128, 1] tile replicates it over the partitions first
    (engines read consecutive partitions), as nl.broadcast_to does."""
    @nki.jit
    def k(s, x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        tot = nl.ndarray((2, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        v = nl.load(s[1, 2])
        nl.store(out, nl.add(nl.load(x), v))
        nl.store(tot[0, 1], nl.multiply(v, 3.0))
        return out, tot

    s = RNG.standard_normal((2, 3)).astype(np.float32)
    x = RNG.standard_normal((128, 1)).astype(np.float32)
    out, tot = k(s, x)
    np.testing.assert_allclose(out, f64(x) + f64(s[1, 2]), rtol=1e-6)
    assert tot[0, 1] == pytest.approx(3 * float(s[1, 2]), rel=1e-6)


def test_tensor_tensor_reads_a_column_against_a_tile():
    @nki.jit
    def k(x, c):
        out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(c), nl.multiply))
        return out

    x = RNG.standard_normal((128, 256)).astype(np.float32)
    c = RNG.standard_normal((128, 1)).astype(np.float32)
    np.testing.assert_allclose(k(x, c), f64(x) * f64(c), rtol=1e-6)


def test_loop_reduce_with_the_dtype_of_a_kernel_tensor():
    """``dtype=out.dtype`` (a tensor's dtype object, as contributed/matmul.py passes it)."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float16, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), dtype=nl.float16, buffer=nl.sbuf)
        for i in nl.affine_range(3):
            acc[...] = nl.loop_reduce(nl.load(x[i]), op=np.add, loop_indices=[i], dtype=out.dtype)
        nl.store(out, acc)
        return out

    x = RNG.standard_normal((3, 128, 64)).astype(np.float16)
    np.testing.assert_allclose(f64(k(x)), f64(x).sum(axis=0), rtol=3e-3, atol=3e-3)


# -- the legacy double_row_gen3 spelling ------------------------------------------------------------------
def test_double_row_gen3_is_double_row():
    """perf_mode='double_row_gen3' (neuronxcc) contracts [K, 2, M] x [K, 2, N] over K and the pair, as
    einsum("kli,klj->ij") (AWS's own nc_matmul example on trn2)."""
    @nki.jit
    def k(a, b):
        out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nisa.nc_matmul(nl.load(a), nl.load(b), perf_mode="double_row_gen3")))
        return out

    a = RNG.standard_normal((128, 2, 64)).astype(ml_dtypes.float8_e4m3)
    b = RNG.standard_normal((128, 2, 512)).astype(ml_dtypes.float8_e4m3)
    want = np.einsum("kli,klj->ij", f64(a), f64(b))
    np.testing.assert_allclose(k(a, b), want, rtol=1e-5, atol=1e-4)    # exact products, fp32 accumulation


# -- directives ------------------------------------------------------------------------------------------
def test_no_reorder_loop_directive_and_a_directive_above_a_baremetal_kernel():
    @ncc.skip_middle_end_transformations
    @nki.baremetal(artifacts_dir="unused")
    def k(x):
        out = nl.ndarray((2, 128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        for i in nl.sequential_range(2, directives=ncc.no_reorder()):
            nl.store(out[i], nl.exp(nl.load(x[i])))
        return out

    x = RNG.standard_normal((2, 128, 32)).astype(np.float32)
    np.testing.assert_allclose(k[1](x), np.exp(f64(x)), rtol=1e-5)


def test_indirect_rows_in_a_shape_only_run_move_one_row_per_index():
    """Without values (shape-only), ``t[b, indices_tile, i_f]`` still issues one row per kept partition."""
    t = RNG.standard_normal((2, 600, 64)).astype(np.float32)
    idx = RNG.integers(0, 600, (128, 1)).astype(np.int32)
    k = _gather_kernel()
    full = trnsim.profile(k)(t, idx, 100)
    shape_only = trnsim.profile(k, execute=False)(t, idx, 100)
    n_dma = [sum(1 for r in p.result.cores[0].instructions if "dma" in r.opcode) for p in (full, shape_only)]
    assert n_dma[0] == n_dma[1] >= 2 * 100
