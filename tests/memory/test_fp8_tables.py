"""fp8 and bf16 rounding and the fp8 encodings by table / blocked integer arithmetic (memory/fp8.py, dtypes.py):
the same bits as the element-by-element reference (ml_dtypes) on every table index with every class of low bits,
and the same values as an independent float64 model of round to nearest even on the edge cases (ties, subnormals,
overflow to infinity or NaN per format, signed zeros, NaN, infinities)."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.memory import dtypes as D
from trnsim.memory import fp8

FP8 = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
# (exponent bits, mantissa bits, bias, largest finite value, what an overflow gives) of the IEEE-like formats:
# float8_e4m3 and float8_e5m2 keep the top exponent for infinities and NaN; float8_e4m3fn has no infinity and one
# NaN per sign (S.1111.111), so its top exponent holds finite values up to 1.75 * 2**8 = 448 (OCP 8-bit floating
# point specification v1.0, table 1)
FORMATS = {
    "float8_e4m3": (4, 3, 7, 240.0, np.inf),
    "float8_e4m3fn": (4, 3, 7, 448.0, np.nan),
    "float8_e5m2": (5, 2, 15, 57344.0, np.inf),
    "bfloat16": (8, 7, 127, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), np.inf),
}


@pytest.fixture(autouse=True)
def tables_always(monkeypatch):
    """Every fp8 conversion by table here, however small the array (by default arrays under
    ``dtypes.TABLE_MIN`` elements go through the reference, which is what the table is checked against)."""
    monkeypatch.setattr(D, "TABLE_MIN", 0)


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    np.testing.assert_array_equal(bits(a), bits(b))


def patterns():
    """float32 bit patterns: every top-16-bit pattern with low halves 0, 1, 0x8000, 0xFFFF and a random one; and
    every top-13-bit pattern (the table's) with low 19 bits 0, 1, 0x40000 (a round bit alone for bf16's half ...)
    and 0x7FFFF."""
    rng = np.random.default_rng(31)
    top = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    lows = [0, 1, 0x8000, 0xFFFF]
    out = [top | np.uint32(lo) for lo in lows]
    out.append(top | rng.integers(0, 1 << 16, top.size, dtype=np.uint32))
    t13 = np.arange(1 << 13, dtype=np.uint32) << np.uint32(19)
    out += [t13 | np.uint32(lo) for lo in (0, 1, 0x40000, 0x7FFFF, 0x3FFFF)]
    return np.concatenate(out).view(np.float32)


def model_round(x, fmt):
    """Round float32 ``x`` to format ``fmt`` in float64 (an independent model, no ml_dtypes): the nearest value of
    the format's grid, ties to the even mantissa, on a grid continued past the largest value; a result above it
    is the format's overflow value.  Finite, non-NaN ``x`` only."""
    _, m, bias, mx, ovf = FORMATS[fmt]
    a = np.abs(x.astype(np.float64))
    _, e = np.frexp(a)
    e = np.maximum(e - 1, 1 - bias)                 # below the smallest normal, the subnormals' fixed quantum
    q = np.ldexp(1.0, e - m)
    r = np.rint(a / q) * q                           # np.rint: half to even (a / q is exact: powers of two)
    r = np.where(r > mx, ovf, r)
    return np.copysign(r, x.astype(np.float64))


@pytest.mark.parametrize("name", FP8)
def test_tables_match_ml_dtypes_on_every_index(name):
    dt = D.DTYPES[name]
    x = patterns()
    assert dt._round is not dt._round.reference             # the table path is what DTYPES uses
    same(dt._round(x), x.astype(dt.np).astype(np.float32))   # ml_dtypes directly, element by element
    same(D.to_real(dt, x), D._to_real_ref(dt, x))
    codes = np.arange(256, dtype=np.uint8).view(dt.np)
    same(D.from_real(dt, codes), D._from_real_ref(dt, codes))
    # shapes, 0-d and non-contiguous inputs; an ``out`` array (contiguous or not)
    y = x[:5 * (fp8.CHUNK + 1)].reshape(-1, 5)[:, ::2]
    same(dt._round(y), y.astype(dt.np).astype(np.float32))
    same(dt._round(np.float32(1.3)), np.float32(1.3).astype(dt.np).astype(np.float32))
    out = np.empty(y.shape, np.float32)
    assert dt._round(y, out=out) is out
    same(out, y.astype(dt.np).astype(np.float32))
    outT = np.empty(y.T.shape, np.float32).T
    dt._round(y, out=outT)
    same(outT, y.astype(dt.np).astype(np.float32))
    with pytest.raises(ValueError, match="shape"):
        dt._round(y, out=np.empty(7, np.float32))


@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e4m3fn", "float8_e5m2"])
def test_rounding_matches_float64_model(name):
    dt = D.DTYPES[name]
    x = patterns()
    fin = np.isfinite(x)
    got = dt._round(x)
    want = model_round(x[fin], name)
    np.testing.assert_array_equal(got[fin].astype(np.float64), want)
    # signs of zeros and of overflowed infinities kept; NaN results where the model overflows to NaN
    same(np.signbit(got[fin]), np.signbit(want) | (np.isnan(want) & np.signbit(x[fin])))


@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e4m3fn", "float8_e5m2"])
def test_edge_cases(name):
    dt = D.DTYPES[name]
    _, m, bias, mx, ovf = FORMATS[name]
    r = dt._round
    sub = 2.0 ** (1 - bias - m)                       # smallest subnormal
    ulp_max = 2.0 ** (np.floor(np.log2(mx)) - m)      # the spacing at the largest value
    f = np.float32
    # ties to even: 1 + half an ulp goes down to 1 (even), 1 + 3 half ulps up to 1 + 2 ulps
    h = 2.0 ** -(m + 1)
    same(r(np.array([1 + h, 1 + 3 * h, 1 + h + 2.0 ** -20], f)), np.array([1, 1 + 4 * h, 1 + 2 * h], f))
    # subnormals: half the smallest is a tie to 0, a little more goes up; 1.5 of it ties to 2 (even)
    same(r(np.array([sub / 2, sub / 2 * (1 + 2.0 ** -20), 1.5 * sub, -sub / 4], f)),
         np.array([0, sub, 2 * sub, -0.0], f))
    # the largest value and the overflow threshold (half a spacing above it): below stays, the tie goes to the
    # even neighbour (the overflow value for e4m3/e5m2, whose largest mantissa is odd; 448 for e4m3fn, even)
    tie = mx + ulp_max / 2
    res = r(np.array([mx, tie - ulp_max / 8, tie, tie + ulp_max / 8, 1e30, -1e30], f))
    assert res[0] == mx and res[1] == mx
    tie_even = mx if name == "float8_e4m3fn" else ovf
    np.testing.assert_array_equal(res[2:4], np.array([tie_even, ovf], f))
    assert (np.isnan(res[4:]) if np.isnan(ovf) else (res[4] == np.inf and res[5] == -np.inf)).all()
    # infinities: kept by formats with them, NaN in e4m3fn; signed zeros kept
    infs = r(np.array([np.inf, -np.inf, 0.0, -0.0], f))
    if np.isnan(ovf):
        assert np.isnan(infs[:2]).all()
    else:
        np.testing.assert_array_equal(infs[:2], [np.inf, -np.inf])
    same(infs[2:], np.array([0.0, -0.0], f))
    # NaN of either sign, with any payload: the quiet NaN of that sign (ml_dtypes keeps no payload)
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FFFFFFF], np.uint32).view(f)
    same(r(nans), np.array([0x7FC00000, 0xFFC00000, 0x7FC00000, 0xFFC00000, 0x7FC00000], np.uint32).view(f))


@pytest.mark.parametrize("name", FP8)
def test_every_code_round_trips(name):
    """Every bit pattern (NaN payloads included) decodes and encodes back to itself, and finite codes decode to
    the value of the format's definition."""
    dt = D.DTYPES[name]
    codes = np.arange(256, dtype=np.uint8)
    vals = D.from_real(dt, codes.view(dt.np))
    same(D.to_real(dt, vals).view(np.uint8), codes)
    if name in FORMATS:
        e, m, bias, _, _ = FORMATS[name]
        c = codes.astype(np.int64)
        ex, man = (c >> m) & ((1 << e) - 1), c & ((1 << m) - 1)
        mag = np.where(ex == 0, man * 2.0 ** (1 - bias - m), (1 + man / 2.0 ** m) * 2.0 ** (ex - bias))
        want = np.where(c >> 7, -mag, mag)
        fin = np.isfinite(vals)
        np.testing.assert_array_equal(vals[fin].astype(np.float64), want[fin])


def test_float64_input_rounds_once():
    """A float64 value just above a tie goes up when rounded directly (as ml_dtypes does); through float32 it
    would become the tie and go to even: the table rounders take only float32 and leave the rest to ml_dtypes."""
    dt = D.DTYPES["float8_e4m3fn"]
    x = np.array([1.0625 + 2.0 ** -40], np.float64)        # the tie between 1.0 and 1.125, plus a little
    assert np.float32(x[0]) == np.float32(1.0625)
    np.testing.assert_array_equal(dt._round(x), np.array([1.125], np.float32))
    np.testing.assert_array_equal(dt._round(x.astype(np.float32)), np.array([1.0], np.float32))


def test_bf16_blocked_matches_one_piece_and_model():
    x = patterns()
    big = np.concatenate([x] * 2)
    assert big.size > 8 * fp8.CHUNK                     # the blocked path
    got = D._bf16_round(big)
    same(got, D._bf16_round_block(big))
    out = np.empty_like(big)
    assert D._bf16_round(big, out=out) is out
    same(out, got)
    fin = np.isfinite(big)
    np.testing.assert_array_equal(got[fin].astype(np.float64), model_round(big[fin], "bfloat16"))
    nan = np.isnan(big)
    assert np.isnan(got[nan]).all() and np.isinf(got[np.isinf(big)]).all()
    # against ml_dtypes for the non-NaN values (NaN payloads: trnsim keeps the upper half, ml_dtypes does not)
    same(got[~nan], big[~nan].astype(ml_dtypes.bfloat16).astype(np.float32))



def test_small_arrays_take_the_reference_and_large_ones_the_table(monkeypatch):
    monkeypatch.setattr(D, "TABLE_MIN", 2048)
    dt = D.DTYPES["float8_e4m3fn"]
    sizes = []
    orig = fp8._gather

    def spy(table, x, dtype, out):
        sizes.append(np.size(x))
        return orig(table, x, dtype, out)
    monkeypatch.setattr(fp8, "_gather", spy)
    x = patterns()
    for n in (1, 2047, 2048, 70000):
        same(dt._round(x[:n]), x[:n].astype(dt.np).astype(np.float32))
        same(D.to_real(dt, x[:n]), D._to_real_ref(dt, x[:n]))
    assert sizes == [2048, 2048, 70000, 70000]
