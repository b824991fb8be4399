"""Float to integer writes: every integer dtype, at both ends of its range, against a Python-int reference.

NOTES.md "Numerics": a float written to an integer dtype is rounded to nearest (ties to even) and saturated to the
integer range; NaN becomes 0.  The reference computes this on the exact value the float holds (Python's ``round``
of a float is exact and ties to even) and clamps with Python ints, so no float rounding of the bounds can hide in
it.  Issue 28: ``tensor_scalar`` into uint32 of float32 4294967295.0 (which is 2**32) stored 0.
"""
import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import trnsim
from trnsim.memory.dtypes import DTYPES, round_to

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

INT_DTYPES = sorted(n for n, d in DTYPES.items() if d.is_int)
# the float types a write may carry (float16 and bfloat16: the ml_dtypes/NumPy narrow floats of tiles read back)
FLOAT_TYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def ref(x: float, lo: int, hi: int) -> int:
    """The integer a float ``x`` (exact float64 value) becomes: nearest (ties to even), saturated, NaN -> 0."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return hi if x > 0 else lo
    return min(max(round(x), lo), hi)


def edges(lo: int, hi: int):
    """Values around both ends of ``[lo, hi]`` (just inside, at, just beyond, far beyond) and the float32
    rounding traps (2**32 - 1, 2**31 - 1, 2**63 ... round up to a power of two in float32)."""
    out = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, float("inf"), -float("inf"), float("nan"), 1e30, -1e30,
           float(np.finfo(np.float32).max), -float(np.finfo(np.float32).max), 2.0 ** 31 - 1, 2.0 ** 31, 2.0 ** 32 - 1,
           2.0 ** 32, -(2.0 ** 31) - 1, 2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, 2.0 ** 63 - 1]
    for b in (lo, hi):
        for d in (-2, -1.5, -1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1, 1.5, 2, 1000):
            out.append(float(b) + d)
        out += [float(b) * 2, float(b) * 1.5, float(np.nextafter(np.float32(b), np.float32(np.inf))),
                float(np.nextafter(np.float32(b), np.float32(-np.inf)))]
    return out


def check(name, xs, ftype):
    dt = DTYPES[name]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        arr = np.array(xs, dtype=np.float64).astype(ftype)        # the values the float type really holds
    exact = [float(v) for v in arr.astype(np.float64)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # no NumPy RuntimeWarning may leak
        with np.errstate(all="raise"):
            got = round_to(dt, arr)
    assert got.dtype == dt.np, (name, got.dtype)
    want = [ref(x, dt.min, dt.max) for x in exact]
    bad = [(x, int(g), w) for x, g, w in zip(exact, got.tolist(), want) if int(g) != w]
    assert not bad, f"{name} from {np.dtype(ftype).name}: (value, got, expected) {bad[:8]}"


@pytest.mark.parametrize("ftype", list(FLOAT_TYPES))
@pytest.mark.parametrize("name", INT_DTYPES)
def test_range_edges(name, ftype):
    dt = DTYPES[name]
    check(name, edges(dt.min, dt.max), FLOAT_TYPES[ftype])


def _near_bounds(name):
    dt = DTYPES[name]
    span = st.floats(-64.0, 64.0, allow_nan=False)
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),                        # anything, NaN and inf included
        st.floats(width=32, allow_nan=True, allow_infinity=True),
        span.map(lambda d: float(dt.min) + d), span.map(lambda d: float(dt.max) + d),
        st.floats(float(dt.min) * 4 - 8, float(dt.max) * 4 + 8),
        st.integers(dt.min - 2 ** 20, dt.max + 2 ** 20).map(float))


@settings(max_examples=60, deadline=None)
@given(st.data())
@pytest.mark.parametrize("name", INT_DTYPES)
def test_property(name, data):
    ftype = data.draw(st.sampled_from(list(FLOAT_TYPES)), label="float type")
    xs = data.draw(st.lists(_near_bounds(name), min_size=1, max_size=32), label="values")
    check(name, xs, FLOAT_TYPES[ftype])


def test_integer_input_keeps_its_value():
    """Integer input keeps its value when it fits (no float detour that would lose low bits)."""
    v = np.array([2 ** 31 - 1, -2 ** 31], dtype=np.int64)
    assert round_to(DTYPES["int32"], v).tolist() == [2 ** 31 - 1, -2 ** 31]


# ---------------------------------------------------------------- through an instruction
def _run_tensor_scalar(name, x, add):
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        d = nl.ndarray(a.shape, getattr(nl, name), buffer=nl.sbuf)
        nisa.tensor_scalar(d, t, nl.add, add)
        out = nl.ndarray(a.shape, getattr(nl, name), buffer=nl.shared_hbm)
        nisa.dma_copy(out, d)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return np.asarray(nki.simulate(k)(x))


def test_issue_28_uint32_top_of_range():
    """The reported case: float32 4294967295.0 (= 2**32) + 5.0 into uint32 saturates to 4294967295."""
    got = _run_tensor_scalar("uint32", np.full((1, 1), 4294967295.0, np.float32), 5.0)
    assert got.dtype == np.uint32 and got.tolist() == [[4294967295]]


@pytest.mark.parametrize("name", INT_DTYPES)
def test_tensor_scalar_writes_saturate(name):
    """An fp32 tensor_scalar result written to each integer dtype: the engine computes in float32 (x + 0.0 is
    x), and the write rounds and saturates as the reference says."""
    dt = DTYPES[name]
    xs = np.array(edges(dt.min, dt.max), dtype=np.float64)
    with np.errstate(all="ignore"):
        x = xs.astype(np.float32).reshape(1, -1)
    got = _run_tensor_scalar(name, x, 0.0)
    want = [ref(float(v), dt.min, dt.max) for v in x.astype(np.float64).ravel()]
    assert got.ravel().tolist() == want


# ---------------------------------------------------------------- the rounding mode per path
# Every engine path that converts a float to an integer dtype rounds to nearest, ties to even (NOTES.md "Numerics";
# the engines compute in fp32 and convert on the write).  Integer arithmetic on integer tiles is another path: no
# float value exists, and division truncates toward zero (ops.INT_ALU; nki.isa.tensor_tensor "int32/uint32 types").
TIES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 58.526, -58.526, 2.0 ** 31, -(2.0 ** 31) - 256]


def _convert(path, name, x):
    @nki.jit
    def k(a):
        t = nl.ndarray(a.shape, nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        d = nl.ndarray(a.shape, getattr(nl, name), buffer=nl.sbuf)
        if path == "tensor_copy_vector":
            nisa.tensor_copy(d, t, engine=nisa.engine.vector)
        elif path == "tensor_copy_gpsimd":
            nisa.tensor_copy(d, t, engine=nisa.engine.gpsimd)
        elif path == "activation_copy":
            nisa.activation(d, nl.copy, t)
        elif path == "tensor_scalar_fp32":
            nisa.tensor_scalar(d, t, nl.multiply, 1.0)
        out = nl.ndarray(a.shape, getattr(nl, name), buffer=nl.shared_hbm)
        if path == "dma_copy":
            nisa.dma_copy(out, t)            # the DMA converts through fp32 on the way out
        else:
            nisa.dma_copy(out, d)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return np.asarray(nki.simulate(k)(x))


@pytest.mark.parametrize("name", ["int32", "int16", "uint8"])
@pytest.mark.parametrize("path", ["tensor_copy_vector", "tensor_copy_gpsimd", "activation_copy",
                                  "tensor_scalar_fp32", "dma_copy"])
def test_rounding_mode_per_engine_path(path, name):
    dt = DTYPES[name]
    x = np.array([TIES], dtype=np.float32)
    got = _convert(path, name, x)
    want = [ref(float(v), dt.min, dt.max) for v in x.astype(np.float64).ravel()]
    assert got.ravel().tolist() == want, (path, name)


def test_integer_division_path_truncates_toward_zero():
    """The other path: int32 tiles divided natively (no float value to round): toward zero, not to nearest."""
    @nki.jit
    def k(a, b):
        ta = nl.ndarray(a.shape, nl.int32, buffer=nl.sbuf)
        tb = nl.ndarray(a.shape, nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(ta, a)
        nisa.dma_copy(tb, b)
        d = nl.ndarray(a.shape, nl.int32, buffer=nl.sbuf)
        nisa.tensor_tensor(d, ta, tb, nl.divide)
        out = nl.ndarray(a.shape, nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(out, d)
        return out
    a = np.array([[5, -5, 7, -7, 2224, 2 ** 31 - 1, -(2 ** 31)]], np.int32)
    b = np.array([[2, 2, -2, -2, 38, 3, 7]], np.int32)
    got = np.asarray(nki.simulate(k)(a, b)).ravel().tolist()
    want = [int(x / y) if abs(x) < 2 ** 24 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
            for x, y in zip(a.ravel().tolist(), b.ravel().tolist())]
    assert got == want == [2, -2, -3, 3, 58, 715827882, -306783378]
