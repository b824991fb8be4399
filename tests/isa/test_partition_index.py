"""An integer index on the partition dimension of an SBUF/PSUM tile (``t[0, :]``, ``t[k, :]``, ``t[k]``) is a
one-partition operand: partition ``k`` with the view's whole pattern along the free dimension, for every instruction
(trnsim/isa/common.py ``one_partition``, used by ``part``, ``free_size`` and ``check_same_partitions``).  AWS's
moe_tkg kernel copies a ``[1, T]`` tile into ``t[0, :]`` of a ``[128, T]`` tile (nki-library d2ad3a5,
all_expert_mx_impl.py:398).  Views that really do not map to partitions are still refused."""

import numpy as np
import pytest

import trnsim
from trnsim.isa import NkiValidationError
from trnsim.memory.tensor import IndexOutOfBounds

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(31)
P, F = 8, 64


@nki.jit
def _copy_into_rows(a, b, base):
    """``base`` loaded into a [P, F] tile, then the rows ``a`` ([1, F]) and ``b`` ([1, F]) copied into its
    partitions 0 and 3 by ``tensor_copy`` (dst ``t[0, :]`` and ``t[3, :]``), the tile stored back."""
    out = nl.ndarray(base.shape, base.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(base.shape, nl.float32, buffer=nl.sbuf)
    a_sb = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    b_sb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, base)
    nisa.dma_copy(a_sb, a)
    nisa.dma_copy(b_sb, b)
    nisa.tensor_copy(dst=t[0, :], src=a_sb[...])
    nisa.tensor_copy(dst=t[3, :], src=b_sb)
    nisa.dma_copy(out, t)
    return out


def test_tensor_copy_into_an_integer_indexed_partition():
    base = RNG.standard_normal((P, F)).astype(np.float32)
    a = RNG.standard_normal((1, F)).astype(np.float32)
    b = RNG.standard_normal((1, F)).astype(np.float32)
    out = nki.simulate(_copy_into_rows)(a, b, base)
    want = base.astype(np.float64)
    want[0] = a[0]
    want[3] = b[0]
    assert np.array_equal(out.astype(np.float64), want)      # the other partitions keep their values


@nki.jit
def _read_row(x, k: int):
    """Partition ``k`` of an SBUF tile read as ``t[k, :]`` by ``tensor_scalar`` (times 2, plus 1) into a [1, F]
    tile, and as ``t[k]`` by ``tensor_tensor`` (added to itself)."""
    out1 = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    r1 = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
    r2 = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_scalar(dst=r1, data=t[k, :], op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=1.0)
    nisa.tensor_tensor(dst=r2, data1=t[k], data2=t[k, :], op=nl.add)
    nisa.dma_copy(out1, r1)
    nisa.dma_copy(out2, r2)
    return out1, out2


@pytest.mark.parametrize("k", [0, 5, P - 1])
def test_instruction_reads_an_integer_indexed_partition(k):
    x = RNG.standard_normal((P, F)).astype(np.float32)
    out1, out2 = nki.simulate(_read_row)(x, k)
    row = x[k].astype(np.float64)
    # float32 arithmetic: (x * 2) + 1 with one rounding each; a float64 reference within float32's rounding
    np.testing.assert_allclose(out1[0], row * 2 + 1, rtol=2 ** -23, atol=2 ** -23)
    assert np.array_equal(out2[0].astype(np.float64), row + row)     # doubling is exact in float32


@nki.jit
def _row_out_of_range(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((1, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_copy(dst=r, src=t[x.shape[0], :])
    return r


def test_integer_partition_index_out_of_range_names_the_limit():
    x = RNG.standard_normal((P, F)).astype(np.float32)
    with pytest.raises(IndexOutOfBounds, match=rf"dimension 0: index range \[{P}, {P}\] exceed dimension size "
                                               rf"of {P}"):
        nki.simulate(_row_out_of_range)(x)


@nki.jit
def _row_into_many(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    r = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_copy(dst=r, src=t[2, :])        # one partition of F elements into P partitions of F: refused
    return r


def test_one_partition_operand_against_many_partitions_is_refused():
    x = RNG.standard_normal((P, F)).astype(np.float32)
    with pytest.raises(NkiValidationError, match=rf"has 1 partitions but 'dst' has {P}"):
        nki.simulate(_row_into_many)(x)


@nki.jit
def _transposed(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[1], x.shape[0]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_copy(dst=r, src=t.permute((1, 0)))     # reaches every partition through its second dimension
    return r


def test_view_across_partitions_through_a_free_dimension_still_refused():
    x = RNG.standard_normal((P, F)).astype(np.float32)
    with pytest.raises(NkiValidationError, match="does not map to partitions"):
        nki.simulate(_transposed)(x)


@nki.jit
def _shapes(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    t3 = nl.ndarray((x.shape[0], 4, x.shape[1] // 4), x.dtype, buffer=nl.psum)
    assert tuple(t[2, :].shape) == (1, x.shape[1])            # the partition dimension kept, size 1
    assert tuple(t[2].shape) == (1, x.shape[1])
    assert tuple(t[2, 8:16].shape) == (1, 8)
    assert tuple(t3[5].shape) == (1, 4, x.shape[1] // 4)
    assert tuple(t3[5, 1].shape) == (1, x.shape[1] // 4)
    assert tuple(t[:, 3].shape) == (x.shape[0],)              # an index on a free dimension: NumPy's rule
    assert tuple(t[1, 3].shape) == ()                         # one element (0-d, as before)
    assert tuple(x[2, :].shape) == (x.shape[1],)              # HBM: NumPy's rule
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(t, x)
    nisa.dma_copy(out, t)
    return out


def test_integer_partition_index_keeps_a_one_partition_dimension():
    x = RNG.standard_normal((P, F)).astype(np.float32)
    assert np.array_equal(nki.simulate(_shapes)(x), x)


@nki.jit
def _transpose_row(x, k: int):
    """Partition ``k`` of a [P, F] tile read as ``t[k, nl.ds(0, F)]`` (a [1, F] operand) by ``nc_transpose`` into
    a [F, 1] PSUM column (as moe_tkg's all_expert_mx_impl.py:582 does)."""
    out = nl.ndarray((x.shape[1], 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, nl.float32, buffer=nl.sbuf)
    ps = nl.ndarray((x.shape[1], 2), nl.float32, buffer=nl.psum)
    col = nl.ndarray((x.shape[1], 1), nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.nc_transpose(dst=ps[:, 1:2], data=t[k, nl.ds(0, x.shape[1])])
    nisa.tensor_copy(dst=col, src=ps[:, 1:2])
    nisa.dma_copy(out, col)
    return out


def test_transpose_reads_an_integer_indexed_partition():
    x = RNG.standard_normal((P, F)).astype(np.float32)
    out = nki.simulate(_transpose_row)(x, 6)
    assert np.array_equal(out[:, 0].astype(np.float64), x[6].astype(np.float64))


@nki.jit
def _copy_into_ap_row(a, base):
    """A one-partition view formed by an access pattern: ``[[1, F]]`` at partition 5's first element (a 1-D view
    whose only dimension is a free one)."""
    out = nl.ndarray(base.shape, base.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(base.shape, nl.float32, buffer=nl.sbuf)
    a_sb = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, base)
    nisa.dma_copy(a_sb, a)
    nisa.tensor_copy(dst=t.ap([[1, base.shape[1]]], offset=5 * base.shape[1]), src=a_sb)
    nisa.dma_copy(out, t)
    return out


def test_access_pattern_within_one_partition_is_a_one_partition_operand():
    base = RNG.standard_normal((P, F)).astype(np.float32)
    a = RNG.standard_normal((1, F)).astype(np.float32)
    out = nki.simulate(_copy_into_ap_row)(a, base)
    want = base.astype(np.float64)
    want[5] = a[0]
    assert np.array_equal(out.astype(np.float64), want)
