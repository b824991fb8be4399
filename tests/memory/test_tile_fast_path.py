"""The fast paths of tile creation and of tensor_tensor's numerics against the general paths on the same inputs.

* ``Buffer.tile`` (what ``NeuronCore.allocate`` uses for a plain on-chip tile) against the general ``Buffer``
  constructor: every attribute, the space's free list, live and peak bytes, the refusal of a too-large tile.
* ``MemorySpace.take`` against ``MemorySpace.allocate`` over random allocate/release sequences (alignment, PSUM
  banks, overcommit, a first free range that does not fit).
* ``_tensor_tensor_values`` (operand views read inline outside strict mode) against the function it replaced
  (``read()`` for each operand), kept here as the reference: NaN/inf, non-contiguous views, bf16/fp8/fp32
  destinations, PSUM destinations (written tracking), a fresh (never-written) destination, reinterpreting views.
"""
import random

import numpy as np
import pytest

from trnsim.isa import vector
from trnsim.isa.errors import NkiValidationError
from trnsim.isa.common import as_f32, mark_written, read, write
from trnsim.machine.core import NeuronCore
from trnsim.memory import PSUM, SBUF, Buffer, MemorySpace, Tensor
from trnsim.memory.dtypes import dtype_of
from trnsim.memory import space as space_mod
from trnsim.memory.space import OutOfMemory

SLOTS = [s for s in Buffer.__slots__ if s not in ("id", "space", "_release", "_data", "written", "__weakref__")]


def _state(b: Buffer):
    d = {s: getattr(b, s) for s in SLOTS}
    d["release"] = None if b._release is None else b._release[1:]
    d["data"] = None if b._data is None else (b._data.dtype, b._data.shape)
    d["written"] = None if b.written is None else (b.written.dtype, b.written.tolist())
    return d


def _space_state(s: MemorySpace):
    return list(s._free), s.live, s.peak


@pytest.mark.parametrize("execute,track", [(True, False), (True, True), (False, False), (False, True)])
def test_buffer_tile_matches_constructor(execute, track, monkeypatch):
    # a fresh geometry memo: the process-wide one is capped (4096 entries) and may be full after other tests
    monkeypatch.setattr(space_mod, "_TILE_GEOM", {})
    rng = random.Random(7)
    dts = [dtype_of(n) for n in ("float32", "bfloat16", "float8_e4m3", "int32", "uint8")]
    shapes = [(128, 512), (1, 1), (96, 7, 3), (128, 2048), (33, 100), (128, 4096)]
    pairs = []   # (general space, fast space) made alike: SBUF-like and PSUM-like (banks)
    for kind, cap, align, bank in ((SBUF, 196608, 4, 0), (PSUM, 16384, 4, 2048), (SBUF, 3000, 64, 0)):
        pairs.append(tuple(MemorySpace(kind, cap, partitions=128, align=align, bank_bytes=bank, overcommit=True)
                           for _ in range(2)))
    live_g, live_f = [], []
    made = refused = 0
    for step in range(600):
        sg, sf = pairs[rng.randrange(len(pairs))]
        dt = rng.choice(dts)
        shape = rng.choice(shapes)
        name = rng.choice(["", "t", "acc"])
        try:
            g = Buffer(sg, dt, shape, name=name, execute=execute, track_written=track)
        except OutOfMemory as e:
            with pytest.raises(OutOfMemory) as ei:
                Buffer.tile(sf, dt, shape, name, execute, track)
            assert str(ei.value) == str(e)
            refused += 1
            continue
        assert (shape, id(dt), sg.kind) in space_mod._TILE_GEOM     # so Buffer.tile takes its own path
        f = Buffer.tile(sf, dt, shape, name, execute, track)
        assert f.space is sf and type(f) is Buffer and f.id == g.id + 1
        assert _state(f) == _state(g)
        assert _space_state(sf) == _space_state(sg)
        made += 1
        live_g.append(g)
        live_f.append(f)
        # release some (in the same order in both): the free lists fragment, so the fast path must decline
        while live_g and rng.random() < 0.45:
            i = rng.randrange(len(live_g))
            del live_g[i], live_f[i]
            for a, b in pairs:
                assert _space_state(a) == _space_state(b)
    assert made > 300 and refused > 0
    if execute:
        b = Buffer.tile(pairs[0][1], dts[0], (128, 512), "", True, track)
        assert np.isnan(b.data).all()       # the deferred sentinel fill, as the general constructor's


def test_take_matches_allocate():
    rng = random.Random(11)
    fast_first = declined = overflow = 0
    for trial in range(60):
        cap = rng.choice([1024, 4096, 16384])
        args = dict(partitions=128, align=rng.choice([1, 4, 32, 64]), bank_bytes=rng.choice([0, 0, 512, 2048]),
                    overcommit=rng.random() < 0.7)
        a, b = MemorySpace(SBUF, cap, **args), MemorySpace(SBUF, cap, **args)
        held = []
        for step in range(80):
            if held and rng.random() < 0.4:
                addr, size = held.pop(rng.randrange(len(held)))
                a.release(addr, size)
                b.release(addr, size)
            else:
                size = rng.choice([1, 3, 64, 100, 512, 700, 2048, 2100, cap, cap + 1])
                first = list(b._free[:1])
                try:
                    x = a.allocate(size)
                except OutOfMemory as e:
                    with pytest.raises(OutOfMemory) as ei:
                        b.take(size)
                    assert str(ei.value) == str(e)
                    overflow += 1
                    continue
                y = b.take(size)
                assert x == y
                if x >= 0:
                    held.append((x, size))
                    if first and first[0][0] == x:
                        fast_first += 1
                    else:
                        declined += 1
                else:
                    overflow += 1
            assert _space_state(a) == _space_state(b)
    assert fast_first > 100 and declined > 20 and overflow > 20


# ---------------------------------------------------------------- tensor_tensor values

def _reference_values(core, loc, dst, data1, data2, fn, bitvec):
    """_tensor_tensor_values as it was before the inline reads (each operand through read())."""
    a = read(core, data1, "data1", "tensor_tensor", loc)
    b = read(core, data2, "data2", "tensor_tensor", loc)
    if a.shape != b.shape:
        b = b.reshape(a.shape)
    if fn in vector._F32_OUT and a.dtype is vector._F32 and b.dtype is vector._F32 and dst.dtype._round is None:
        d = dst.np
        if d.dtype is vector._F32 and d.shape == a.shape:
            fn(a, b, out=d)
            if dst.buf.written is not None:
                mark_written(dst)
            return
    r = fn(a, b) if bitvec else fn(as_f32(a), as_f32(b))
    write(core, dst, r)


def _values(seed, shape, dt):
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(np.float32) * 3
    flat = x.reshape(-1)
    flat[r.integers(0, flat.size, 5)] = np.nan
    flat[r.integers(0, flat.size, 3)] = np.inf
    flat[r.integers(0, flat.size, 3)] = -np.inf
    flat[r.integers(0, flat.size, 3)] = 1e30       # beyond fp8's range: the destination dtype's overflow rule
    return x


def _setup(core, case, seed, touch_views):
    """Three tensors (dst, data1, data2) per case, freshly made and filled the same way for every call."""
    made = []

    def tile(shape, dt, kind=SBUF, fill=True):
        b = core.allocate(shape, dtype_of(dt), kind)
        t = Tensor.whole(b)
        made.append(b)
        if fill:
            v = _values(seed + len(made), shape, dt)
            if dt == "int32":            # the float32 values' bits (a float32 view of it reads them back)
                np.copyto(t.np, v.view(np.int32))
            elif dt == "uint16":
                np.copyto(t.np, (np.arange(v.size, dtype=np.int64) * 2654435761 % 65521).astype(np.uint16).reshape(shape))
            else:
                write(core, t, v)
            mark_written(t)
        return t
    kind, ddt, idt = case
    P, F = 64, 48
    if kind == "contig":
        d, a, b = tile((P, F), ddt), tile((P, F), idt), tile((P, F), idt)
    elif kind == "fresh":
        d, a, b = tile((P, F), ddt, fill=False), tile((P, F), idt), tile((P, F), idt)
    elif kind == "psum":
        d, a, b = tile((P, F), ddt, PSUM, fill=False), tile((P, F), idt), tile((P, F), idt)
    elif kind == "strided":
        d = tile((P, 2 * F), ddt)[:, ::2]
        a = tile((P, 3 * F), idt)[:, F:2 * F]
        b = tile((P, 2 * F), idt)[:, 1::2]
    elif kind == "aliased":
        a = tile((P, F), idt)
        d, b = a, tile((P, F), idt)
    elif kind == "reshaped":
        d, a = tile((P, F), ddt), tile((P, F), idt)
        b = tile((P, 6, 8), idt)
    elif kind == "reinterp":
        d = tile((P, F), ddt)
        a = tile((P, F), "int32").view(dtype_of(idt))
        b = tile((P, 2 * F), "uint16").view(dtype_of(idt)) if idt == "float32" else tile((P, F), idt)
    else:
        raise AssertionError(kind)
    if touch_views:          # the operands' NumPy views made (and kept) before the call, or not
        for t in (d, a, b):
            t.np
    return d, a, b


def _snapshot(d):
    buf = d.buf
    return (buf._data.view(np.uint8).tobytes(), None if buf.written is None else buf.written.tobytes(),
            buf.all_written, buf.fresh)


CASES = [(k, ddt, "float32") for k in ("contig", "fresh", "strided", "aliased", "reshaped", "reinterp")
         for ddt in ("float32", "bfloat16", "float8_e4m3")] + \
        [("psum", "float32", "float32"), ("psum", "bfloat16", "float32"), ("contig", "float32", "bfloat16"),
         ("strided", "bfloat16", "bfloat16"), ("contig", "float8_e4m3", "float8_e4m3")]
OPS = [(np.add, False), (np.multiply, False), (np.maximum, False), (np.subtract, False), (np.divide, False)]


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_tensor_tensor_values_fast_matches_reference(case):
    ran_fast = 0
    for fn, bitvec in OPS:
        for touch in (False, True):
            outs = []
            for impl in (vector._tensor_tensor_values, _reference_values):
                core = NeuronCore("trn2")
                d, a, b = _setup(core, case, 5, touch)
                impl(core, None, d, a, b, fn, bitvec)
                outs.append(_snapshot(d))
            assert outs[0] == outs[1], (case, fn, touch)
            ran_fast += 1
    assert ran_fast == 2 * len(OPS)


def test_tensor_tensor_values_bitvec_and_strict():
    for strict in (False, True):
        outs = []
        for impl in (vector._tensor_tensor_values, _reference_values):
            core = NeuronCore("trn2", strict=strict) if strict else NeuronCore("trn2")
            d, a, b = _setup(core, ("contig", "int32", "int32"), 3, False)
            impl(core, None, d, a, b, np.bitwise_xor, True)
            outs.append(_snapshot(d))
        assert outs[0] == outs[1]
        assert outs[0][0] != bytes(len(outs[0][0]))
    # strict mode: a never-written operand is refused by both
    for impl in (vector._tensor_tensor_values, _reference_values):
        core = NeuronCore("trn2", strict=True)
        d, a, b = _setup(core, ("fresh", "float32", "float32"), 3, False)
        with pytest.raises(NkiValidationError, match="never written"):
            impl(core, None, a, d, b, np.add, False)


def test_bf16_round_in_place_matches_formula():
    """_bf16_round (worked in one array) against the same formula written with temporaries, and against
    ml_dtypes' round to nearest even, on random bit patterns (NaN, inf, subnormals, ties) and 0-d input."""
    import ml_dtypes
    from trnsim.memory.dtypes import _bf16_round

    def formula(x):
        x = np.asarray(x, dtype=np.float32)
        bits = x.view(np.uint32)
        lsb = (bits >> 16) & 1
        r = (bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)
        top = bits & np.uint32(0xFFFF0000)                # a NaN keeps its upper half, quiet bit added if it
        nan_bits = np.where(top & np.uint32(0x007F0000), top, top | np.uint32(0x00400000))   # would be inf
        return np.where(np.isnan(x), nan_bits, r).view(np.float32)

    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32)
    bits[:4] = [0x7F800000, 0xFF800000, 0x7FC00001, 0xFFFFFFFF]          # +-inf, NaNs
    bits[4:8] = [0x3F808000, 0x3F818000, 0x00008000, 0x7F7FFFFF]         # ties to even, subnormal tie, max
    x = bits.view(np.float32)
    got = _bf16_round(x)
    assert got.view(np.uint32).tobytes() == formula(x).view(np.uint32).tobytes()
    fin = ~np.isnan(x)
    ref = x[fin].astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(got[fin].view(np.uint32), ref.view(np.uint32))
    assert np.isnan(got[~fin]).all() and (~fin).sum() > 100
    assert x.view(np.uint32).tobytes() == bits.tobytes()                  # the input is not modified
    assert float(_bf16_round(np.float32(1.00390625))) == 1.0              # 0-d: a tie rounds to even
    assert np.isnan(_bf16_round(np.uint32(0x7F800001).view(np.float32)))  # 0-d NaN with a low payload
