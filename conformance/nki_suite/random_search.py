"""NKI suite entries for topk and the random-number instructions: topk against a float64 snake-layout reference;
the random instructions against their contracts (a state written then read back exactly, rng bits equal to a
scalar XORWOW run from a state the case sets, the same seed giving the same bits, dropout's fixed points,
rand2 inside its range).  Imported by ``nki_suite.run`` after the other families' registrations."""

from __future__ import annotations

import numpy as np

from .harness import _M, _ld, _new, _numerics, _sim, _st


def _xorwow_ref(state, n):
    """Marsaglia's xorwow on Python ints: ``n`` outputs of one generator and its state after them (state: x, y,
    z, w, v, d)."""
    x, y, z, w, v, d = (int(s) for s in state)
    out = []
    for _ in range(n):
        t = (x ^ (x >> 2)) & 0xFFFFFFFF
        x, y, z, w = y, z, w, v
        v = (v ^ (v << 4) ^ t ^ (t << 1)) & 0xFFFFFFFF
        d = (d + 362437) & 0xFFFFFFFF
        out.append((v + d) & 0xFFFFFFFF)
    return out, [x, y, z, w, v, d]


def _states(rng, p):
    return rng.integers(1, 2 ** 32, (p, 6), dtype=np.uint64).astype(np.uint32)


@_numerics("nisa.topk", ["bfloat16"])
def _topk(dt, rng):
    nisa = _M["nisa"]
    n, k = 200, 24
    x = rng.permutation(32 * 16).reshape(32, 16).astype(np.float32).astype(dt)     # distinct values

    def thunk():
        def body(a):
            v = _new((32, k), "bfloat16")
            i = _new((32, k), "uint32")
            nisa.memset(v, 0)
            nisa.memset(i, 0)
            nisa.topk(v, i, _ld(a), n)
            return (_st(v), _st(i))
        gv, gi = _sim(body, x)
        rv = np.zeros((32, k))
        ri = np.zeros((32, k))
        xf = x.astype(np.float64)
        for g in range(2):
            snake = np.array([xf[16 * g + s % 16, s // 16] for s in range(n)])
            order = np.argsort(-snake, kind="stable")[:k]
            for j, s in enumerate(order):
                rv[16 * g + j % 16, j // 16] = snake[s]
                ri[16 * g + j % 16, j // 16] = s
        return [("val_dst", gv, rv, 0.0), ("idx_dst", gi, ri, 0.0)]
    return [("2 groups, n=200, K=24", thunk)]


@_numerics("nisa.rand_set_state", ["uint32"])
def _set_state(dt, rng):
    nisa = _M["nisa"]
    st = _states(rng, 64)

    def thunk():
        def body(s):
            out = _new((64, 6), "uint32")
            nisa.rand_set_state(_ld(s))
            nisa.rand_get_state(out)
            return (_st(out),)
        got, = _sim(body, st, target="trn2")
        return [("state read back", got, st.astype(np.float64), 0.0)]
    return [("64 lanes", thunk)]


@_numerics("nisa.rand_get_state", ["uint32"])
def _get_state(dt, rng):
    nisa = _M["nisa"]
    st = _states(rng, 16)

    def thunk():
        def body(s):
            out = _new((16, 6), "uint32")
            bits = _new((16, 10), "uint32")
            nisa.rand_set_state(_ld(s))
            nisa.rng(bits, engine="gpsimd")
            nisa.rand_get_state(out)
            return (_st(out),)
        got, = _sim(body, st, target="trn2")
        ref = [_xorwow_ref(lane, 10)[1] for lane in st]             # the state after 10 draws
        return [("state after 10 draws", got, np.array(ref, np.float64), 0.0)]
    return [("16 lanes", thunk)]


@_numerics("nisa.rng", ["uint32", "uint16", "int8"])
def _rng(dt, rng):
    nisa = _M["nisa"]
    st = _states(rng, 32)

    def thunk():
        def body(s):
            bits = _new((32, 20), dt)
            nisa.rand_set_state(_ld(s))
            nisa.rng(bits, engine="gpsimd")
            return (_st(bits),)
        got, = _sim(body, st, target="trn2")
        width = np.dtype(dt).itemsize * 8
        ref = np.array([_xorwow_ref(lane, 20)[0] for lane in st], np.uint64) & ((1 << width) - 1)
        ref = ref.astype(np.int64)
        if dt.startswith("int"):
            ref = np.where(ref >= 2 ** (width - 1), ref - 2 ** width, ref)
        return [("bits (GpSimd)", got, ref.astype(np.float64), 0.0)]
    return [("32 lanes x 20", thunk)]


@_numerics("nisa.set_rng_seed", ["uint32"])
def _seed(dt, rng):
    nisa = _M["nisa"]
    seed = np.array([[int(rng.integers(0, 2 ** 32))]], np.uint32)

    def thunk():
        def body(s):
            a = _new((128, 16), "uint32")
            b = _new((128, 16), "uint32")
            t = _ld(s)
            nisa.set_rng_seed(t)
            nisa.rng(a)
            nisa.set_rng_seed(t)
            nisa.rng(b)
            return (_st(a), _st(b))
        a, b = _sim(body, seed)
        return [("same seed, same bits", b, a.astype(np.float64), 0.0)]
    return [("seed, draw, reseed, draw", thunk)]


@_numerics("nisa.dropout", ["float32", "bfloat16"])
def _dropout(dt, rng):
    nisa = _M["nisa"]
    x = rng.uniform(1, 2, (64, 48)).astype(dt)

    def thunk():
        def body(a):
            keep = _new((64, 48), dt)
            drop = _new((64, 48), dt)
            t = _ld(a)
            nisa.dropout(keep, t, 0.0)
            nisa.dropout(drop, t, 1.0)
            return (_st(keep), _st(drop))
        keep, drop = _sim(body, x)
        return [("prob 0 keeps all", keep, x.astype(np.float64), 0.0),
                ("prob 1 drops all", drop, np.zeros(x.shape), 0.0)]
    return [("fixed points", thunk)]


@_numerics("nisa.rand2", ["float32"])
def _rand2(dt, rng):
    nisa = _M["nisa"]

    def thunk():
        def body():
            d = _new((128, 64), dt)
            nisa.rand2(d, -2.0, 3.0)
            return (_st(d),)
        got, = _sim(body, target="trn3")
        return [("inside [min, max]", got, np.clip(got.astype(np.float64), -2.0, 3.0), 0.0)]
    return [("[-2, 3] on trn3", thunk)]
