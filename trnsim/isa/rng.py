"""Random numbers on the Vector and GpSimd engines: rng, rand2, dropout, set_rng_seed, rand_set_state and
rand_get_state.

The NKI reference names the generator (XORWOW) and the size of its state per compute lane (6 32-bit words on
GpSimd, 24 on the Vector Engine) but not how a lane walks the elements of a tile, how a single seed expands to
every lane's state, or the state an engine holds before any seed.  trnsim therefore reproduces the
*algorithm* and the *API contract* (same seed, same sequence; state saved and restored exactly; the bit
widths the reference states), not the hardware's exact bits:

- a lane's state is one or more XORWOW generators of 6 words each (x, y, z, w, v and the Weyl counter d,
  Marsaglia 2003, "Xorshift RNGs", J. Stat. Softw. 8(14)); the Vector Engine's 24 words are four generators,
  and element ``i`` of a lane is drawn from generator ``i % 4`` (trnsim's choice);
- elements of a lane are drawn in row-major order of the free dimensions;
- ``set_rng_seed`` and the engine's initial state expand one 32-bit seed to every lane with trnsim's own
  mixing function (:func:`_expand_seed`), so the sequences differ from a chip's.

A kernel whose test compares random bits with a chip's will not match; one that checks statistics, masks,
reproducibility under a seed or a saved/restored state will.
"""

from __future__ import annotations

import numpy as np

from ..memory import PSUM, SBUF
from .common import as_f32, free_size, number, part, pick_engine, read, require_space, write
from .errors import fail
from .gpsimd import gpsimd_cycles
from .vector import elementwise_cycles

__all__ = ["rng", "rand2", "dropout", "set_rng_seed", "rand_set_state", "rand_get_state"]

WORDS_PER_GENERATOR = 6                               # XORWOW: five xorshift words and the Weyl counter
STATE_WORDS = {"gpsimd": 6, "vector": 24}             # NKI reference, rand_set_state: "6 elements (GpSimd) or
                                                      # 24 elements (Vector)" per compute lane
WEYL_STEP = 362437                                    # Marsaglia 2003, xorwow: d += 362437
DEFAULT_SEED = 0                                      # trnsim's: the state before any seed instruction
_INT_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")
_RAND2_DTYPES = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32") + _INT_DTYPES
_M32 = np.uint64(0xFFFFFFFF)


def _expand_seed(seed, lanes, words):
    """trnsim's seed expansion: a splitmix-style hash of (seed, lane, word) for every state word; the xorshift
    words of a generator are never all zero."""
    lane = np.arange(lanes, dtype=np.uint64)[:, None]
    word = np.arange(words, dtype=np.uint64)[None, :]
    z = (np.uint64(seed & 0xFFFFFFFF) * np.uint64(0x9E3779B9) + lane * np.uint64(0x85EBCA6B) +
         word * np.uint64(0xC2B2AE35) + np.uint64(0x27D4EB2F)) & _M32
    for sh, mul in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        z = ((z ^ (z >> np.uint64(sh))) * np.uint64(mul)) & _M32
    z = (z ^ (z >> np.uint64(16))).astype(np.uint32)
    g = z.reshape(lanes, -1, WORDS_PER_GENERATOR)
    g[:, :, 0] |= (g[:, :, :5] == 0).all(axis=2).astype(np.uint32)     # xorshift part must not be all zero
    return z


def _states(core, engine):
    """The engine's per-lane state words [128, words] (uint32), kept on the core object."""
    st = getattr(core, "rng_states", None)
    if st is None:
        st = {}
        core.rng_states = st
    if engine not in st:
        st[engine] = _expand_seed(DEFAULT_SEED, core.target.pmax, STATE_WORDS[engine])     # a set per lane
    return st[engine]


def _xorwow(gen, n):
    """Advance generators ``gen`` [G, 6] (uint32, updated in place) ``n`` times: the outputs [G, n]."""
    x, y, z, w, v, d = (gen[:, i].astype(np.uint32) for i in range(6))
    out = np.empty((gen.shape[0], n), np.uint32)
    step = np.uint32(WEYL_STEP)
    with np.errstate(over="ignore"):
        for i in range(n):
            t = x ^ (x >> np.uint32(2))
            x, y, z, w = y, z, w, v
            v = (v ^ (v << np.uint32(4))) ^ (t ^ (t << np.uint32(1)))
            d = d + step
            out[:, i] = v + d
    gen[:, 0], gen[:, 1], gen[:, 2], gen[:, 3], gen[:, 4], gen[:, 5] = x, y, z, w, v, d
    return out


def _draw(core, engine, p0, p, n):
    """``n`` 32-bit random words for each of the lanes ``p0 .. p0+p-1`` of ``engine`` (state advanced)."""
    st = _states(core, engine)
    ngen = STATE_WORDS[engine] // WORDS_PER_GENERATOR
    gens = st[p0:p0 + p].reshape(p * ngen, WORDS_PER_GENERATOR).copy()
    per = -(-n // ngen)
    bits = _xorwow(gens, per).reshape(p, ngen, per)
    st[p0:p0 + p] = gens.reshape(p, ngen * WORDS_PER_GENERATOR)
    # element i of a lane comes from generator i % ngen, its (i // ngen)-th output
    return bits.transpose(0, 2, 1).reshape(p, per * ngen)[:, :n]


def _need_version(core, I, v, loc, what=""):
    if core.target.nc_version < v:
        fail(I, None, f"{what}is not available on {core.target.name} (NeuronCore-v{v} and later)",
             core.target.name, f"NeuronCore-v{v}+", loc)


def _engine(core, I, engine, default, loc):
    eng = pick_engine(I, engine, default, ("vector", "gpsimd"), loc)
    if eng == "gpsimd":
        _need_version(core, I, 3, loc, "the GpSimd engine's generator ")
    return eng


def _uniform(bits):
    """[0, 1) from the top 24 bits of each word (exact in fp32)."""
    return (bits >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def rng(core, loc, dst, engine=None):
    """32 random bits per element of ``dst``, truncated to its integer dtype (the low bits are kept)."""
    I = "rng"
    eng = _engine(core, I, engine, "vector", loc)
    require_space(I, "dst", dst, (SBUF,) if eng == "gpsimd" else (SBUF, PSUM), loc, eng)
    p0, p = part(I, "dst", dst, loc, core.target.pmax)
    if dst.dtype.name not in _INT_DTYPES:
        fail(I, "dst", f"(tensor `{dst.name}`) has dtype {dst.dtype.name}; rng writes an integer dtype "
             f"({', '.join(_INT_DTYPES)})", dst.dtype.name, _INT_DTYPES, loc)
    n = free_size(dst)
    if core.execute:
        bits = _draw(core, eng, p0, p, n)
        width = dst.dtype.itemsize * 8
        low = bits.astype(f"uint{width}")                          # the low ``width`` bits of each word
        if dst.dtype.name.startswith("int"):
            low = low.view(f"int{width}")                          # the same bits read as a signed integer
        write(core, dst, low.astype(np.int64).reshape(dst.shape))
    cyc = gpsimd_cycles(core.target, n) if eng == "gpsimd" else elementwise_cycles(core, eng, n, dst, [], "rng")
    core.record(I, eng, (dst,), (), cyc, loc)


def _bound(core, I, name, v, p, loc):
    """A scalar or a per-partition [p, 1] fp32 tensor: values [p, 1] (float32) when executing, else None."""
    if hasattr(v, "buf"):
        require_space(I, name, v, (SBUF, PSUM), loc, "vector")
        if v.shape[0] != p or free_size(v) != 1:
            fail(I, name, f"has shape {list(v.shape)}; a per-partition operand must be [{p}, 1]", list(v.shape),
                 [p, 1], loc)
        return as_f32(read(core, v, name, I, loc)).reshape(p, 1) if core.execute else None
    return np.full((p, 1), number(I, name, v, loc, finite=True), np.float32)


def rand2(core, loc, dst, min, max):
    """Uniform random values in [min, max] (fp32, then converted to ``dst``'s dtype) on the Vector Engine."""
    I = "rand2"
    _need_version(core, I, 4, loc)
    require_space(I, "dst", dst, (SBUF, PSUM), loc, "vector")
    p0, p = part(I, "dst", dst, loc, core.target.pmax)
    if dst.dtype.name not in _RAND2_DTYPES:
        fail(I, "dst", f"(tensor `{dst.name}`) has dtype {dst.dtype.name}", dst.dtype.name, _RAND2_DTYPES, loc)
    lo = _bound(core, I, "min", min, p, loc)
    hi = _bound(core, I, "max", max, p, loc)
    if lo is not None and hi is not None and not (lo < hi).all():
        i = int(np.argmin(hi - lo))
        fail(I, "max", f"is {float(hi[i, 0])} on partition {i}, not above min {float(lo[i, 0])}; the range needs "
             "min < max", float(hi[i, 0]), f"> {float(lo[i, 0])}", loc)
    reads = tuple(t for t in (min, max) if hasattr(t, "buf"))
    n = free_size(dst)
    if core.execute:
        u = _uniform(_draw(core, "vector", p0, p, n))
        write(core, dst, (lo + u * (hi - lo)).reshape(dst.shape))
    core.record(I, "vector", (dst,), reads, elementwise_cycles(core, "vector", n, dst, list(reads), "rng"), loc)


def dropout(core, loc, dst, data, prob):
    """``dst = data`` with each element replaced by 0 with probability ``prob`` (a scalar or a [P, 1] tile),
    on the Vector Engine; kept elements are not rescaled."""
    I = "dropout"
    require_space(I, "dst", dst, (SBUF, PSUM), loc, "vector")
    require_space(I, "data", data, (SBUF, PSUM), loc, "vector")
    p0, p = part(I, "data", data, loc, core.target.pmax)
    part(I, "dst", dst, loc, core.target.pmax)
    if dst.shape[0] != p or free_size(dst) != free_size(data):
        fail(I, "dst", f"has shape {list(dst.shape)} but 'data' has {list(data.shape)}; they must hold the same "
             "elements per partition", list(dst.shape), list(data.shape), loc)
    if dst.dtype != data.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'data' has {data.dtype.name}; they must match",
             dst.dtype.name, data.dtype.name, loc)
    if hasattr(prob, "buf"):
        if not data.dtype.is_float and prob.dtype.name != "float32":
            fail(I, "prob", f"has dtype {prob.dtype.name}; with integer 'data' it must be float32",
                 prob.dtype.name, "float32", loc)
        if not prob.dtype.is_float:
            fail(I, "prob", f"has dtype {prob.dtype.name}; it must be a float dtype", prob.dtype.name, "float", loc)
    pr = _bound(core, I, "prob", prob, p, loc)
    if pr is not None and ((pr < 0) | (pr > 1)).any():
        bad = float(pr[(pr < 0) | (pr > 1)][0])
        fail(I, "prob", f"holds {bad}; a drop probability is in [0, 1]", bad, "[0, 1]", loc)
    n = free_size(data)
    reads = (data,) + ((prob,) if hasattr(prob, "buf") else ())
    if core.execute:
        u = _uniform(_draw(core, "vector", p0, p, n))
        x = read(core, data, "data", I, loc).reshape(p, n)
        keep = u >= pr
        write(core, dst, np.where(keep, x, np.zeros((), x.dtype)).reshape(dst.shape))
    core.record(I, "vector", (dst,), reads, elementwise_cycles(core, "vector", n, dst, [data], "dropout"), loc)


def set_rng_seed(core, loc, src_seeds):
    """Seed the Vector Engine's generators of every lane from the 32-bit value of a [1, 1] tensor."""
    I = "set_rng_seed"
    require_space(I, "src_seeds", src_seeds, (SBUF, PSUM), loc, "vector")
    if src_seeds.size != 1 or src_seeds.ndim != 2:
        fail(I, "src_seeds", f"has shape {list(src_seeds.shape)}; it must be [1, 1]", list(src_seeds.shape),
             [1, 1], loc)
    if src_seeds.dtype.itemsize != 4:
        fail(I, "src_seeds", f"has dtype {src_seeds.dtype.name}; the seed is a 32-bit value", src_seeds.dtype.name,
             "32-bit", loc)
    if core.execute:
        raw = np.ascontiguousarray(read(core, src_seeds, "src_seeds", I, loc).reshape(1))
        seed = int(raw.view(np.uint32)[0]) if raw.dtype.itemsize == 4 else int(raw[0]) & 0xFFFFFFFF
        _states(core, "vector")[...] = _expand_seed(seed, core.target.pmax, STATE_WORDS["vector"])
    core.record(I, "vector", (), (src_seeds,), float(core.target.min_ii_cycles), loc)


def _state_engine(core, I, engine, loc):
    """The engine holding the state (GpSimd by default; NeuronCore-v3+, the Vector Engine's from v4)."""
    _need_version(core, I, 3, loc)
    eng = pick_engine(I, engine, "gpsimd", ("gpsimd", "vector"), loc)
    if eng == "vector":
        _need_version(core, I, 4, loc, "the Vector engine's state ")
    return eng


def _state_cycles(core, eng):
    """Moving a lane's state words: a GpSimd instruction over them, or one minimal Vector instruction."""
    return gpsimd_cycles(core.target, STATE_WORDS[eng]) if eng == "gpsimd" else float(core.target.min_ii_cycles)


def _state_operand(core, I, name, t, eng, loc):
    require_space(I, name, t, (SBUF,) if eng == "gpsimd" or core.target.nc_version < 4 else (SBUF, PSUM), loc, eng)
    p0, p = part(I, name, t, loc, core.target.pmax)
    if t.dtype.name != "uint32":
        fail(I, name, f"(tensor `{t.name}`) has dtype {t.dtype.name}; PRNG state words are uint32", t.dtype.name,
             "uint32", loc)
    if t.ndim != 2 or t.shape[1] != STATE_WORDS[eng]:
        fail(I, name, f"has shape {list(t.shape)}; the {eng} engine's XORWOW state is {STATE_WORDS[eng]} words "
             "per lane: [lanes, %d]" % STATE_WORDS[eng], list(t.shape), STATE_WORDS[eng], loc)
    return p0, p


def rand_set_state(core, loc, src_seeds, engine=None):
    """Load the state words of lanes ``p0 ..`` of the engine's generators from ``src_seeds`` [lanes, 6 | 24]."""
    I = "rand_set_state"
    eng = _state_engine(core, I, engine, loc)
    p0, p = _state_operand(core, I, "src_seeds", src_seeds, eng, loc)
    if core.execute:
        words = read(core, src_seeds, "src_seeds", I, loc).reshape(p, -1).astype(np.uint32)
        g = words.reshape(p, -1, WORDS_PER_GENERATOR)
        if (g[:, :, :5] == 0).all(axis=2).any():
            lane = int(np.nonzero((g[:, :, :5] == 0).all(axis=2).any(axis=1))[0][0])
            fail(I, "src_seeds", f"gives lane {p0 + lane} an all-zero xorshift state (words 0-4 of a generator), "
                 "which XORWOW never leaves", 0, "nonzero", loc)
        _states(core, eng)[p0:p0 + p] = words
    core.record(I, eng, (), (src_seeds,), _state_cycles(core, eng), loc)


def rand_get_state(core, loc, dst, engine=None):
    """Store the state words of lanes ``p0 ..`` of the engine's generators into ``dst`` [lanes, 6 | 24]."""
    I = "rand_get_state"
    eng = _state_engine(core, I, engine, loc)
    p0, p = _state_operand(core, I, "dst", dst, eng, loc)
    if core.execute:
        write(core, dst, _states(core, eng)[p0:p0 + p].astype(np.int64).reshape(dst.shape))
    core.record(I, eng, (dst,), (), _state_cycles(core, eng), loc)
