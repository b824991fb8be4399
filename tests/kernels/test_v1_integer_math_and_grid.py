"""Legacy NKI integer arithmetic and the zero-size launch grid (issue 31: nki-samples' resize_nearest and
contributed pipelined_attention), each with a small kernel of our own.

- Arithmetic whose tiles and scalar are all integers (``iota_int32 / 38``) is integer arithmetic: the result is an
  int32 tile (NKI type promotion: a weak int scalar is int32) computed in native 32-bit integer math on GpSimd
  (nki.isa.tensor_tensor, "int32/uint32 types"), so division truncates toward zero.  Through fp32 the quotient
  2224 / 38 = 58.53 would round to 59.
- ``kernel[0]`` launches one program (program_id 0).
"""

import warnings

import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402


def _trunc_div(a, b):
    """Integer division truncating toward zero, in Python ints (the reference)."""
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _ops(kernel, *args):
    p = trnsim.profile(kernel)(*args)
    return [(r.opcode, r.engine) for r in p.result.cores[0].instructions]


@nki.jit
def _int_arith(start, div, mul, add):
    """Per partition p: [ (start+p) / div, (start+p) * mul + add, (start+p) - 3*div, max(start+p, div) ] as int32."""
    out = nl.ndarray((128, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(1)[None, :]
    pos = nisa.iota(start + i_p, dtype=nl.int32)
    q = pos / div
    m = pos * mul + add
    s = pos - 3 * div
    mx = nl.maximum(pos, div)
    nl.store(out[i_p, 0 + i_f], q)
    nl.store(out[i_p, 1 + i_f], m)
    nl.store(out[i_p, 2 + i_f], s)
    nl.store(out[i_p, 3 + i_f], mx)
    return out


@pytest.mark.parametrize("start,div", [(2176, 38), (-200, 7), (0, -5), (-1000, -3)])
def test_int32_tile_by_int_scalar_is_integer_math(start, div):
    mul, add = 3, -11
    got = np.asarray(_int_arith(start, div, mul, add))
    assert got.dtype == np.int32
    pos = [start + p for p in range(128)]
    want = np.array([[_trunc_div(v, div), v * mul + add, v - 3 * div, max(v, div)] for v in pos], dtype=np.int64)
    np.testing.assert_array_equal(got.astype(np.int64), want)


def test_resize_nearest_row_index_is_the_floor():
    """The resize_nearest idiom: row = floor(pos / out_w) with int32 pos; at pos 2222..2225 (out_w 38) the row
    is 58 (pos // 38), which fp32 math rounded to nearest would make 59 (an index past a 30-row image)."""
    got = np.asarray(_int_arith(2176, 38, 1, 0))[:, 0]
    np.testing.assert_array_equal(got, (2176 + np.arange(128)) // 38)
    assert got[48] == 58                       # pos 2224: 58.526 in fp32


def test_integer_math_is_exact_beyond_fp32():
    """Native int32 math keeps integers above 2**24 exact (fp32 holds 24 significant bits)."""
    got = np.asarray(_int_arith(2 ** 24 + 1, 1, 1, 2))
    v = 2 ** 24 + 1 + np.arange(128, dtype=np.int64)
    np.testing.assert_array_equal(got[:, 0].astype(np.int64), v)          # v / 1
    np.testing.assert_array_equal(got[:, 1].astype(np.int64), v + 2)      # v * 1 + 2


def test_integer_math_wraps_at_32_bits():
    """A product that outgrows int32 wraps (32-bit integer arithmetic), it does not saturate."""
    got = np.asarray(_int_arith(2 ** 20, 1, 4096, 0))[:, 1].astype(np.int64)
    v = (2 ** 20 + np.arange(128, dtype=np.int64)) * 4096
    np.testing.assert_array_equal(got, ((v + 2 ** 31) % 2 ** 32) - 2 ** 31)


def test_integer_math_runs_on_gpsimd_and_float_scalars_keep_fp32():
    """The integer form is issued on GpSimd; a float scalar (or a float result dtype) keeps the fp32 path, whose
    write to int32 rounds to nearest."""
    @nki.jit
    def k(start):
        out = nl.ndarray((128, 3), dtype=nl.int32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(1)[None, :]
        pos = nisa.iota(start + i_p, dtype=nl.int32)
        a = pos / 38                                  # integer
        b = nl.multiply(pos, 1.0 / 38)                # float scalar: fp32 math, result int32 (rounded)
        c = nl.divide(pos, 38, dtype=nl.float32)      # float result
        nl.store(out[i_p, 0 + i_f], a)
        nl.store(out[i_p, 1 + i_f], b)
        nl.store(out[i_p, 2 + i_f], nl.floor(c, dtype=nl.int32))
        return out

    got = np.asarray(k(2176)).astype(np.int64)
    pos = 2176 + np.arange(128)
    np.testing.assert_array_equal(got[:, 0], pos // 38)
    np.testing.assert_array_equal(got[:, 1], np.rint((pos.astype(np.float32) * np.float32(1.0 / 38))))
    np.testing.assert_array_equal(got[:, 2], pos // 38)
    ops = _ops(k, 2176)
    ts = [e for op, e in ops if op == "tensor_scalar"]
    assert ts[0] == "gpsimd" and ts[1] == "vector" and ts[2] == "vector", ops


def test_integer_division_by_zero_is_refused():
    @nki.jit
    def k():
        out = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        pos = nisa.iota(i_p, dtype=nl.int32)
        nl.store(out, pos / 0)
        return out

    with pytest.raises(trnsim.NkiValidationError, match="0 in integer division"):
        k()


def test_int32_tensor_tensor_is_native_by_default_and_fp32_on_vector():
    """nki.isa.tensor_tensor on int32 tiles: GpSimd integer math by default (exact divide toward zero); with
    engine=vector the engine computes in fp32 (58.53 rounds to 59 on the write)."""
    import nki.isa as nisa2
    import nki.language as nl2
    from trnsim.kernels.jit import jit as v2jit

    @v2jit
    def k(a, b):
        ta = nl2.ndarray(a.shape, nl2.int32, buffer=nl2.sbuf)
        tb = nl2.ndarray(b.shape, nl2.int32, buffer=nl2.sbuf)
        nisa2.dma_copy(ta, a)
        nisa2.dma_copy(tb, b)
        d1 = nl2.ndarray(a.shape, nl2.int32, buffer=nl2.sbuf)
        d2 = nl2.ndarray(a.shape, nl2.int32, buffer=nl2.sbuf)
        nisa2.tensor_tensor(d1, ta, tb, nl2.divide)
        nisa2.tensor_tensor(d2, ta, tb, nl2.divide, engine=nisa2.engine.vector)
        o1 = nl2.ndarray(a.shape, nl2.int32, buffer=nl2.shared_hbm)
        o2 = nl2.ndarray(a.shape, nl2.int32, buffer=nl2.shared_hbm)
        nisa2.dma_copy(o1, d1)
        nisa2.dma_copy(o2, d2)
        return o1, o2

    a = np.array([[2224, -2224, 7, -7, 2 ** 30 + 1]], dtype=np.int32)
    b = np.array([[38, 38, 2, 2, 1]], dtype=np.int32)
    o1, o2 = (np.asarray(o).astype(np.int64) for o in trnsim.simulate(k)(a, b))
    np.testing.assert_array_equal(o1[0], [58, -58, 3, -3, 2 ** 30 + 1])
    want_fp32 = np.rint(a.astype(np.float32) / b.astype(np.float32)).astype(np.int64)
    np.testing.assert_array_equal(o2[0], want_fp32[0])
    assert o2[0, 0] == 59


# -- the launch grid ----------------------------------------------------------------------------------------------
@nki.jit
def _ids(a):
    out = nl.ndarray((1, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    i = nl.program_id(0)
    n = nl.num_programs(0)
    nl.store(out[0:1, 0:2], t)
    nl.store(out[0:1, 2:3], nl.full((1, 1), i, dtype=nl.float32))
    nl.store(out[0:1, 3:4], nl.full((1, 1), n, dtype=nl.float32))
    return out


def test_grid_of_zero_runs_one_program_with_a_warning():
    a = np.array([[5.0, 6.0]], np.float32)
    with pytest.warns(UserWarning, match=r"grid \[0\]: a dimension of 0 launches one program"):
        got = np.asarray(_ids[0](a))
    np.testing.assert_array_equal(got, [[5.0, 6.0, 0.0, 1.0]])


def test_grid_zero_in_one_axis_of_several():
    with pytest.warns(UserWarning, match=r"grid run as \[2, 1\]"):
        k = _ids[2, 0]
    assert k.grid == (2, 1)


def test_negative_grid_dimension_is_refused():
    with pytest.raises(ValueError, match=r"dimension -1 is negative"):
        _ids[-1]
    with pytest.raises(TypeError, match="is not an integer"):
        _ids["two"]


def test_positive_grid_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _ids[3].grid == (3,)
