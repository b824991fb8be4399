"""Random-number instructions (rng, rand2, dropout, set_rng_seed, rand_set_state, rand_get_state): the XORWOW
recurrence against a scalar re-implementation, the API contract (same seed, same bits; state saved and restored
exactly), statistics, and the rules of the NKI reference."""

import numpy as np
import pytest

from trnsim import isa
from trnsim.isa import NkiValidationError
from trnsim.isa.rng import _xorwow
from trnsim.machine import NeuronCore
from trnsim.memory import PSUM, SBUF, Tensor
from trnsim.memory.dtypes import DTYPES

LOC = ("test_rng.py", 1)


def tile(core, arr, dtype, kind=SBUF):
    arr = np.asarray(arr)
    t = Tensor.whole(core.allocate(arr.shape, DTYPES[dtype], kind, name="t"))
    t.np[...] = arr.astype(DTYPES[dtype].storage)
    t.buf.all_written = True
    return t


def empty(core, shape, dtype, kind=SBUF):
    return Tensor.whole(core.allocate(tuple(shape), DTYPES[dtype], kind, name="o"))


def xorwow_scalar(state, n):
    """Marsaglia's xorwow on Python ints, one generator."""
    x, y, z, w, v, d = state
    out = []
    for _ in range(n):
        t = (x ^ (x >> 2)) & 0xFFFFFFFF
        x, y, z, w = y, z, w, v
        v = (v ^ (v << 4) ^ t ^ (t << 1)) & 0xFFFFFFFF
        d = (d + 362437) & 0xFFFFFFFF
        out.append((v + d) & 0xFFFFFFFF)
    return out, [x, y, z, w, v, d]


def test_xorwow_matches_the_scalar_recurrence():
    rng = np.random.default_rng(3)
    gens = rng.integers(1, 2 ** 32, (5, 6), dtype=np.uint64).astype(np.uint32)
    want = [xorwow_scalar([int(w) for w in g], 40) for g in gens]
    got = _xorwow(gens, 40)
    for i, (seq, state) in enumerate(want):
        assert got[i].tolist() == seq
        assert gens[i].tolist() == state


def _seeded(core, seed):
    isa.set_rng_seed(core, LOC, tile(core, [[seed]], "uint32"))


def test_same_seed_same_bits_and_saved_state_restores_the_sequence():
    core = NeuronCore("trn2")
    _seeded(core, 42)
    a = empty(core, (128, 64), "uint32")
    isa.rng(core, LOC, a)
    _seeded(core, 42)
    b = empty(core, (128, 64), "uint32")
    isa.rng(core, LOC, b)
    np.testing.assert_array_equal(a.np, b.np)
    _seeded(core, 43)
    c = empty(core, (128, 64), "uint32")
    isa.rng(core, LOC, c)
    assert (a.np != c.np).mean() > 0.99

    # GpSimd: save the state, draw, restore, draw again -> the same bits
    st = empty(core, (128, 6), "uint32")
    isa.rand_get_state(core, LOC, st)
    d1 = empty(core, (128, 32), "int16")
    isa.rng(core, LOC, d1, engine="gpsimd")
    isa.rand_set_state(core, LOC, st)
    d2 = empty(core, (128, 32), "int16")
    isa.rng(core, LOC, d2, engine="gpsimd")
    np.testing.assert_array_equal(d1.np, d2.np)


def test_narrow_dtypes_keep_the_low_bits():
    core = NeuronCore("trn2")
    _seeded(core, 7)
    wide = empty(core, (16, 40), "uint32")
    isa.rng(core, LOC, wide)
    for dt, bits in (("uint8", 8), ("int8", 8), ("uint16", 16), ("int16", 16), ("int32", 32)):
        _seeded(core, 7)
        t = empty(core, (16, 40), dt)
        isa.rng(core, LOC, t)
        low = wide.np.astype(np.uint64) & ((1 << bits) - 1)
        if dt.startswith("int"):
            low = np.where(low >= 2 ** (bits - 1), low.astype(np.int64) - 2 ** bits, low.astype(np.int64))
        np.testing.assert_array_equal(t.np.astype(np.int64), low.astype(np.int64))


def test_bits_are_uniform():
    core = NeuronCore("trn2")
    t = empty(core, (128, 512), "uint32")
    isa.rng(core, LOC, t)
    bits = np.unpackbits(t.np.astype(">u4").view(np.uint8)).reshape(-1, 32)
    n = bits.shape[0]
    # each of the 32 bit positions is set with frequency 1/2 within 5 standard deviations
    assert np.abs(bits.mean(axis=0) - 0.5).max() < 5 * 0.5 / np.sqrt(n)


@pytest.mark.parametrize("prob", [0.0, 0.25, 1.0, "tile"])
def test_dropout_rate_and_kept_values(prob):
    core = NeuronCore("trn2")
    x = np.random.default_rng(0).uniform(1, 2, (128, 256)).astype(np.float32)
    data = tile(core, x, "float32")
    dst = empty(core, x.shape, "float32")
    pr = np.linspace(0.0, 0.9, 128).reshape(128, 1)
    isa.dropout(core, LOC, dst, data, tile(core, pr, "float32") if prob == "tile" else prob)
    out = dst.np
    kept = out != 0
    np.testing.assert_array_equal(out[kept], x[kept])               # kept elements are not rescaled
    want = (1 - pr[:, 0]) if prob == "tile" else np.full(128, 1 - prob)
    frac = kept.mean(axis=1)
    sd = np.sqrt(np.maximum(want * (1 - want), 1e-12) / 256)
    assert (np.abs(frac - want) <= 5 * sd + 1e-12).all()


def test_rand2_uniform_in_range_on_trn3_only():
    core = NeuronCore("trn3")
    dst = empty(core, (128, 512), "float32")
    isa.rand2(core, LOC, dst, -3.0, 5.0)
    v = dst.np
    assert v.min() >= -3.0 and v.max() <= 5.0
    assert abs(v.mean() - 1.0) < 5 * 8 / np.sqrt(12 * v.size)
    with pytest.raises(NkiValidationError, match="NeuronCore-v4"):
        isa.rand2(NeuronCore("trn2"), LOC, empty(NeuronCore("trn2"), (4, 4), "float32"), 0.0, 1.0)
    with pytest.raises(NkiValidationError, match="min < max"):
        isa.rand2(core, LOC, dst, 2.0, 2.0)


@pytest.mark.parametrize("call, match", [
    (lambda c: isa.rng(c, LOC, empty(c, (4, 4), "float32")), "integer dtype"),
    (lambda c: isa.rng(c, LOC, empty(c, (4, 4), "uint32", PSUM), engine="gpsimd"), "PSUM"),
    (lambda c: isa.dropout(c, LOC, empty(c, (4, 4), "float32"), tile(c, np.ones((4, 4)), "float32"), 1.5),
     r"\[0, 1\]"),
    (lambda c: isa.dropout(c, LOC, empty(c, (4, 4), "bfloat16"), tile(c, np.ones((4, 4)), "float32"), 0.5),
     "must match"),
    (lambda c: isa.set_rng_seed(c, LOC, tile(c, np.ones((2, 1)), "uint32")), r"\[1, 1\]"),
    (lambda c: isa.rand_set_state(c, LOC, tile(c, np.ones((4, 5)), "uint32")), "6 words"),
    (lambda c: isa.rand_set_state(c, LOC, tile(c, np.zeros((4, 6)), "uint32")), "all-zero"),
    (lambda c: isa.rand_get_state(c, LOC, empty(c, (4, 24), "uint32"), engine="vector"), "NeuronCore-v4"),
])
def test_rules(call, match):
    with pytest.raises(NkiValidationError, match=match) as e:
        call(NeuronCore("trn2"))
    assert "test_rng.py" in str(e.value)


def test_rng_on_gpsimd_needs_trn2():
    c = NeuronCore("trn1")
    with pytest.raises(NkiValidationError, match="NeuronCore-v3"):
        isa.rng(c, LOC, empty(c, (4, 4), "uint32"), engine="gpsimd")
