"""Numerics cases of the ``nl`` operations (element-wise, reductions, softmax, matmul, transpose, where,
fills, load)."""

from __future__ import annotations

import numpy as np

from .references import (
    ACT, ACT_WIDE, EB, FLOATS, INTS, NP, TINY, U32, _cast, _is_int, _ref_out, _sum_bound, _tol_out, eb_binary,
    eb_unary, f64)
from .harness import (
    ARITH, BITVEC, COMPARE, SHAPES, _M, _act_input, _binary_eb, _buf, _gen, _ld, _new, _numerics, _op_inputs, _sim,
    _st, _wide_input)


# ===================================================================================== nl numerics
_NL_BINARY = ARITH + COMPARE + BITVEC


def _mk_nl_binary(op):
    dts = INTS if op in BITVEC else FLOATS + (["int32"] if op in ("add", "multiply", "maximum", "minimum") else [])

    @_numerics(f"nl.{op}", dts)
    def gen(dt, rng):
        nl = _M["nl"]
        cases = []
        for i, (p, f) in enumerate(SHAPES[:6]):
            form = ["tt", "ts", "st"][i % 3]
            if op in BITVEC and form == "st":
                form = "tt"
            x, y = _op_inputs(op, rng, (p, f), dt)
            if form == "ts":
                s = y.reshape(-1)[0].item()
                s = int(s) if _is_int(dt) else float(s)
            elif form == "st":
                s = x.reshape(-1)[0].item()
                s = int(s) if _is_int(dt) else float(s)

            def thunk(x=x, y=y, form=form, s=(s if form != "tt" else None)):
                fn = getattr(nl, op)

                def body(a, b):
                    ta, tb = _ld(a), _ld(b)
                    r = fn(ta, tb) if form == "tt" else (fn(ta, s) if form == "ts" else fn(s, tb))
                    return (_st(r),)
                got, = _sim(body, x, y)
                if form == "ts":
                    yy = np.full(x.shape, s, dtype=x.dtype)
                    eb = _binary_eb(op, x, yy, dt)
                elif form == "st":
                    xx = np.full(y.shape, s, dtype=y.dtype)
                    eb = _binary_eb(op, xx, y, dt)
                else:
                    eb = _binary_eb(op, x, y, dt)
                return [("out", got, _ref_out(eb, dt), _tol_out(eb, dt))]
            cases.append((f"{form} [{p},{f}]", thunk))
        return cases


for _op in _NL_BINARY:
    _mk_nl_binary(_op)

_NL_UNARY = sorted(k for k in ACT if k != "bypass")


def _mk_nl_unary(fn):
    @_numerics(f"nl.{fn}", FLOATS)
    def gen(dt, rng):
        nl = _M["nl"]
        cases = []
        wide = [(128, 512), (3, 4096)] if fn in ACT_WIDE and dt in ("float32", "bfloat16") else []
        for p, f in SHAPES[:6] + [(2, 16384)] + wide:
            x = _wide_input(fn, rng, (p, f), dt) if (p, f) in wide else _act_input(fn, rng, (p, f), dt)

            def thunk(x=x):
                def body(a):
                    return (_st(getattr(nl, fn)(_ld(a))),)
                got, = _sim(body, x)
                y = eb_unary(fn, EB(f64(x)))
                return [("out", got, _ref_out(y, dt), _tol_out(y, dt))]
            cases.append((f"[{p},{f}]{' wide range' if (p, f) in wide else ''}", thunk))
        return cases


for _fn in _NL_UNARY:
    _mk_nl_unary(_fn)


@_numerics("nl.invert", INTS)
def _invert(dt, rng):
    nl = _M["nl"]
    cases = []
    for p, f in SHAPES[:5]:
        ii = np.iinfo(NP[dt])
        x = _cast(rng.integers(max(ii.min, -2 ** 30), min(ii.max, 2 ** 30), size=(p, f)), dt)

        def thunk(x=x):
            got, = _sim(lambda a: (_st(nl.invert(_ld(a))),), x)
            return [("out", got, f64((~np.asarray(x).astype(np.int64)).astype(NP[dt])), 0.0)]
        cases.append((f"[{p},{f}]", thunk))
    return cases


@_numerics("nl.logical_not", FLOATS + INTS)
def _lnot(dt, rng):
    nl = _M["nl"]
    cases = []
    for p, f in SHAPES[:5]:
        x = _cast(rng.integers(0, 3, size=(p, f)), dt)

        def thunk(x=x):
            got, = _sim(lambda a: (_st(nl.logical_not(_ld(a))),), x)
            return [("out", got, (f64(x) == 0).astype(np.float64), 0.0)]
        cases.append((f"[{p},{f}]", thunk))
    return cases


def _mk_nl_reduce(name):
    @_numerics(f"nl.{name}", FLOATS)
    def gen(dt, rng):
        nl = _M["nl"]
        cases = []
        for i, shape in enumerate([(1, 1), (32, 33), (128, 512), (7, 4, 30), (77, 129)]):
            lo, hi = (0.9, 1.1) if name == "prod" else (-4, 4)
            x = _gen(rng, shape, dt, lo, hi)
            keep = i % 2 == 1
            odt = "float32"

            def thunk(x=x, keep=keep, odt=odt):
                def body(a):
                    return (_st(getattr(nl, name)(_ld(a), axis=tuple(range(1, a.ndim)), dtype=odt, keepdims=keep)),)
                got, = _sim(body, x)
                X = f64(x).reshape(x.shape[0], -1)
                n = X.shape[1]
                if name in ("max", "min"):
                    eb = EB((X.max if name == "max" else X.min)(1))
                elif name == "sum":
                    eb = EB(X.sum(1), _sum_bound(np.abs(X), 1, n) + TINY)
                elif name == "prod":
                    v = X.prod(1)
                    eb = EB(v, (n - 1) * U32 * np.abs(v) + TINY)
                elif name == "mean":    # sum, then one multiply by the fp32-rounded 1/n
                    s = EB(X.sum(1), _sum_bound(np.abs(X), 1, n) + TINY)
                    inv = EB(np.full(s.v.shape, 1.0 / n), U32 / n)
                    eb = eb_binary("multiply", s, inv)
                else:                   # var: mean, x - mean, square, mean again
                    mu = eb_binary("multiply", EB(X.sum(1), _sum_bound(np.abs(X), 1, n) + TINY),
                                   EB(np.full(X.shape[0], 1.0 / n), U32 / n))
                    d = eb_binary("subtract", EB(X), EB(mu.v[:, None], mu.e[:, None]))
                    sq = eb_binary("multiply", d, d)
                    s = EB(sq.v.sum(1), sq.e.sum(1) + _sum_bound(np.abs(sq.v) + sq.e, 1, n) + TINY)
                    eb = eb_binary("multiply", s, EB(np.full(s.v.shape, 1.0 / n), U32 / n))
                return [("out", got, eb.v, _tol_out(eb, odt))]
            cases.append((f"{list(shape)} keepdims={keep}", thunk))
        return cases


for _fn in ("sum", "max", "min", "prod", "mean", "var"):
    _mk_nl_reduce(_fn)


@_numerics("nl.softmax", FLOATS)
def _softmax(dt, rng):
    nl = _M["nl"]
    cases = []
    for p, f in [(1, 1), (32, 33), (128, 512), (7, 129), (77, 4096)]:
        x = _gen(rng, (p, f), dt)

        def thunk(x=x, f=f):
            got, = _sim(lambda a: (_st(nl.softmax(_ld(a))),), x)
            X = f64(x)
            mx = X.max(1, keepdims=True)
            e = eb_unary("exp", eb_binary("add", EB(X), EB(-mx)))
            s = EB(e.v.sum(1, keepdims=True), e.e.sum(1, keepdims=True) + _sum_bound(e.v + e.e, 1, f)[:, None] + TINY)
            r = eb_binary("divide", EB(np.ones_like(s.v)), s)
            y = eb_binary("multiply", e, r)
            return [("out", got, y.v, _tol_out(y, dt))]
        cases.append((f"[{p},{f}]", thunk))
    return cases


@_numerics("nl.matmul", ["float32", "bfloat16", "float16"])
def _nlmm(dt, rng):
    nl = _M["nl"]
    cases = []
    for M, K, N, tx in [(1, 1, 1, False), (128, 128, 512, False), (13, 77, 100, True), (32, 5, 1, False),
                        (128, 128, 512, True)]:
        x = _gen(rng, (K, M) if tx else (M, K), dt, -2, 2)
        y = _gen(rng, (K, N), dt, -2, 2)

        def thunk(x=x, y=y, tx=tx, K=K):
            def body(a, b):
                ps = nl.matmul(_ld(a), _ld(b), transpose_x=tx)
                sb = _new(ps.shape, "float32")
                _M["nisa"].tensor_copy(sb, ps)
                return (_st(sb),)
            got, = _sim(body, x, y)
            A = f64(x) if tx else f64(x).T
            B = f64(y)
            n = K + 1
            return [("out", got, A.T @ B, n * U32 / (1 - n * U32) * (np.abs(A).T @ np.abs(B)) + TINY)]
        cases.append((f"M={M} K={K} N={N} transpose_x={tx}", thunk))
    return cases


@_numerics("nl.transpose", FLOATS)
def _nlT(dt, rng):
    nl = _M["nl"]
    cases = []
    for p, f in [(1, 1), (32, 32), (7, 13), (128, 128), (77, 100), (1, 128)]:
        x = _gen(rng, (p, f), dt)

        def thunk(x=x):
            def body(a):
                t = nl.transpose(_ld(a))
                if t.buf.kind == "psum":
                    sb = _new(t.shape, t.dtype)
                    _M["nisa"].tensor_copy(sb, t)
                    t = sb
                return (_st(t),)
            got, = _sim(body, x)
            return [("out", got, f64(x).T, 0.0)]
        cases.append((f"[{p},{f}]", thunk))
    return cases


@_numerics("nl.where", FLOATS)
def _nlwhere(dt, rng):
    nl = _M["nl"]
    cases = []
    for i, (p, f) in enumerate(SHAPES[:6]):
        x, y = _gen(rng, (p, f), dt), _gen(rng, (p, f), dt)
        c = _cast(rng.integers(0, 2, size=(p, f)), "uint8")
        scalar = i % 2 == 1

        def thunk(x=x, y=y, c=c, scalar=scalar):
            def body(a, b, cc):
                return (_st(nl.where(_ld(cc), _ld(a), -3.0 if scalar else _ld(b))),)
            got, = _sim(body, x, y, c)
            other = np.full(x.shape, -3.0) if scalar else f64(y)
            return [("out", got, np.where(np.asarray(c) != 0, f64(x), other), 0.0)]
        cases.append((f"[{p},{f}] y={'-3.0' if scalar else 'tile'}", thunk))
    return cases


def _mk_nl_fill(name):
    @_numerics(f"nl.{name}", FLOATS + INTS)
    def gen(dt, rng):
        nl = _M["nl"]
        cases = []
        for i, (p, f) in enumerate(SHAPES[:6]):
            v = int(rng.integers(0, 100)) if _is_int(dt) else float(np.float32(rng.uniform(-100, 100)))
            space = "psum" if i % 2 else "sbuf"

            def thunk(v=v, p=p, f=f, space=space):
                def body(a):
                    buf = _buf(space)
                    if name == "zeros":
                        t = nl.zeros((p, f), dt, buffer=buf)
                    elif name == "ones":
                        t = nl.ones((p, f), dt, buffer=buf)
                    elif name == "full":
                        t = nl.full((p, f), v, dt, buffer=buf)
                    else:
                        src = _ld(a)
                        t = {"zeros_like": lambda: nl.zeros_like(src, buffer=buf),
                             "ones_like": lambda: nl.ones_like(src, buffer=buf),
                             "full_like": lambda: nl.full_like(src, v, buffer=buf)}[name]()
                    return (_st(t),)
                got, = _sim(body, np.zeros((p, f), NP[dt]))
                val = {"zeros": 0.0, "ones": 1.0, "zeros_like": 0.0, "ones_like": 1.0}.get(name, v)
                eb = EB(np.full((p, f), float(val)))
                return [("out", got, _ref_out(eb, dt), _tol_out(eb, dt))]
            cases.append((f"[{p},{f}] {space} value={v}", thunk))
        return cases


for _fn in ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like"):
    _mk_nl_fill(_fn)


@_numerics("nl.load", FLOATS + INTS)
def _nlload(dt, rng):
    nl = _M["nl"]
    cases = []
    for i, (p, f) in enumerate(SHAPES):
        x = _cast(rng.integers(0, 100, size=(p, f)), dt) if _is_int(dt) else _gen(rng, (p, f), dt)
        odt = None if i % 2 == 0 or _is_int(dt) else "float32"

        def thunk(x=x, odt=odt, p=p, f=f):
            def body(a):
                t = nl.load(a[0:p, nl.ds(0, f)], dtype=odt)
                o = nl.ndarray(a.shape, t.dtype, buffer=nl.shared_hbm)
                nl.store(o, t)
                return (o,)
            got, = _sim(body, x)
            return [("out", got, f64(x), 0.0)]
        cases.append((f"[{p},{f}] dtype={odt}", thunk))
    return cases
