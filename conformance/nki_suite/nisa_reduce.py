"""Numerics cases of the ``nisa`` scans, reductions and statistics: tensor_tensor_scan, tensor_reduce,
tensor_scalar_reduce, tensor_copy_predicated, bn_stats, bn_aggr."""

from __future__ import annotations

import numpy as np

from .references import EB, FLOATS, INTS, NP, TINY, U32, _cast, _is_int, _ref_out, _sum_bound, _tol_out, eb_binary, f64
from .harness import BITVEC, SHAPES, _M, _gen, _itemsize, _ld, _new, _numerics, _place, _shapes, _sim, _st


@_numerics("nisa.tensor_tensor_scan", ["float32", "bfloat16", "float16"])
def _scan(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, ((p, f), (op0, op1)) in enumerate(zip([(1, 1), (32, 33), (128, 64), (7, 512), (77, 5), (128, 200)],
                                                 [("multiply", "add"), ("add", "maximum"), ("multiply", "add"),
                                                  ("maximum", "add"), ("subtract", "multiply"), ("multiply", "add")])):
        a = _gen(rng, (p, f), dt, 0, 1)
        b = _gen(rng, (p, f), dt, -1, 1)
        vec = i % 2 == 1
        init = _gen(rng, (p, 1), "float32", -1, 1) if vec else 0.5
        pl = _place(i, 3, [("sbuf", "sbuf", "sbuf"), ("psum", "sbuf", "sbuf"), ("sbuf", "psum", "psum")], f, dt)

        def thunk(a=a, b=b, init=init, vec=vec, op0=op0, op1=op1, p=p, f=f, pl=pl):
            def body(x, y, *iv):
                tx, ty = _ld(x, pl[0]), _ld(y, pl[1])
                d = _new(x.shape, dt, pl[2])
                nisa.tensor_tensor_scan(d, tx, ty, _ld(iv[0]) if vec else init, op0, op1)
                return (_st(d),)
            got, = _sim(body, a, b, *((init,) if vec else ()))
            r = EB(np.broadcast_to(f64(init), (p, 1))[:, 0].copy())
            vs, es = np.empty((p, f)), np.empty((p, f))
            A, B = f64(a), f64(b)
            for j in range(f):
                r = eb_binary(op1, eb_binary(op0, EB(A[:, j]), r), EB(B[:, j]))
                vs[:, j], es[:, j] = r.v, r.e
            eb = EB(vs, es)
            return [("dst", got, _ref_out(eb, dt), _tol_out(eb, dt))]
        cases.append((f"{op0}/{op1} init={'[P,1]' if vec else init} [{p},{f}] {pl}", thunk))
    return cases


@_numerics("nisa.tensor_reduce", FLOATS + INTS)
def _treduce(dt, rng):
    nisa = _M["nisa"]
    cases = []
    ops = ["add", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"] if _is_int(dt) else \
        ["add", "maximum", "minimum", "multiply", "abs_max", "abs_min"]
    shapes = [(1, 1), (32, 33), (128, 512), (7, 4096), (77, (4, 30)), (128, (2, 3, 8)), (3, 16384)]
    for i, op in enumerate(ops):
        for j in range(3):
            k = 3 * i + j
            p, f = shapes[k % len(shapes)]
            fs = f if isinstance(f, tuple) else (f,)
            n = int(np.prod(fs))
            shape = (p,) + fs
            if op == "multiply":
                x = _gen(rng, shape, dt, 0.9, 1.1) if n <= 512 else _gen(rng, shape, dt, 0.99, 1.01)
            elif _is_int(dt):
                ii = np.iinfo(NP[dt])
                x = _cast(rng.integers(0, min(ii.max, 1000) + 1, size=shape), dt)
            else:
                x = _gen(rng, shape, dt)
            axis = tuple(range(1, len(shape))) if j != 1 or len(shape) == 2 else len(shape) - 1
            axes = axis if isinstance(axis, tuple) else (axis,)
            keep = tuple(s for d, s in enumerate(shape) if d not in axes)
            odt = "float32" if (j == 0 and not _is_int(dt)) or op in ("add", "multiply") and dt == "float8_e4m3" \
                else dt
            if _is_int(dt) and op == "add":
                odt = "int32"
            neg = j == 2 and not _is_int(dt)
            pl = "psum" if (n * 4 <= 8192 and k % 2) else "sbuf"

            def thunk(x=x, op=op, axis=axis, axes=axes, keep=keep, odt=odt, neg=neg, pl=pl):
                def body(a):
                    ta = _ld(a, pl)
                    d = _new(keep if len(keep) > 1 else keep + (1,), odt)
                    nisa.tensor_reduce(d, op, ta, axis=axis, negate=neg)
                    return (_st(d),)
                got, = _sim(body, x)
                X = f64(x)
                cnt = int(np.prod([x.shape[a] for a in axes]))
                if op in BITVEC:
                    uf = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}[op]
                    eb = EB(f64(uf.reduce(np.asarray(x).astype(np.int64), axis=axes)))
                elif op == "add":
                    eb = EB(X.sum(axis=axes), _sum_bound(np.abs(X), axes, cnt) + TINY)
                elif op == "multiply":
                    v = X.prod(axis=axes)
                    g = (cnt - 1) * U32 / (1 - (cnt - 1) * U32)      # product of n terms: gamma_{n-1} relative
                    eb = EB(v, g * np.abs(v) + TINY)
                else:
                    fn = {"maximum": np.max, "minimum": np.min}.get(op)
                    eb = EB(fn(X, axis=axes) if fn else (np.abs(X).max(axis=axes) if op == "abs_max"
                                                         else np.abs(X).min(axis=axes)))
                if neg:
                    eb = EB(-eb.v, eb.e)
                return [("dst", got, _ref_out(eb, odt), _tol_out(eb, odt))]
            cases.append((f"{op} {list(shape)} axis={axis} negate={neg} {pl} -> {odt}", thunk))
    return cases


@_numerics("nisa.tensor_scalar_reduce", FLOATS)
def _tsr(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, ((p, f), (op0, rop)) in enumerate(zip(SHAPES, [("multiply", "add"), ("add", "maximum"),
                                                          ("subtract", "minimum"), ("multiply", "add"),
                                                          ("maximum", "add"), ("add", "maximum"),
                                                          ("multiply", "minimum"), ("subtract", "add")])):
        x = _gen(rng, (p, f), dt)
        vec = i % 2 == 1
        s0 = _gen(rng, (p, 1), "float32", 0.5, 2) if vec else 0.5
        neg = i % 3 == 2

        def thunk(x=x, s0=s0, vec=vec, op0=op0, rop=rop, p=p, f=f, neg=neg):
            def body(a, *sv):
                ta = _ld(a)
                d = _new(a.shape, dt)
                r = _new((p, 1), "float32")
                nisa.tensor_scalar_reduce(d, ta, op0, _ld(sv[0]) if vec else s0, rop, reduce_res=r,
                                          reduce_res_negate=neg)
                return _st(d), _st(r)
            d, r = _sim(body, x, *((s0,) if vec else ()))
            y = eb_binary(op0, EB(f64(x)), EB(np.broadcast_to(f64(s0), (p, 1))))
            if rop == "add":
                rr = EB(y.v.sum(1, keepdims=True), y.e.sum(1, keepdims=True) +
                        _sum_bound(np.abs(y.v) + y.e, 1, f)[:, None] + TINY)
            else:
                fn = np.max if rop == "maximum" else np.min
                rr = EB(fn(y.v, axis=1, keepdims=True), y.e.max(1, keepdims=True))
            if neg:
                rr = EB(-rr.v, rr.e)
            return [("dst", d, _ref_out(y, dt), _tol_out(y, dt)), ("reduce_res", r, rr.v, rr.e)]
        cases.append((f"{op0}->{rop} {'[P,1]' if vec else 'imm'} negate={neg} [{p},{f}]", thunk))
    return cases


@_numerics("nisa.tensor_copy_predicated", FLOATS + INTS)
def _tcp(dt, rng):
    nisa = _M["nisa"]
    cases = []
    pdts = ["uint8", "int32", "uint16", "int8"]
    for i, (p, f) in enumerate(_shapes(65536, _itemsize(dt), 3)):
        x = _cast(rng.integers(0, 100, size=(p, f)), dt) if _is_int(dt) else _gen(rng, (p, f), dt)
        y = _cast(rng.integers(0, 100, size=(p, f)), dt) if _is_int(dt) else _gen(rng, (p, f), dt)
        pdt = pdts[i % len(pdts)]
        m = _cast(rng.integers(0, 2, size=(p, f)) * rng.integers(1, 4, size=(p, f)), pdt)
        rev = i % 2 == 1
        scalar = i % 3 == 2 and not _is_int(dt)
        pl = _place(i, 3, [("sbuf", "sbuf", "sbuf"), ("psum", "sbuf", "sbuf"), ("sbuf", "psum", "sbuf"),
                           ("sbuf", "sbuf", "psum")], f, dt)

        def thunk(x=x, y=y, m=m, rev=rev, scalar=scalar, pl=pl):
            def body(a, b, pm):
                ta, tb, tm = _ld(a, pl[0]), _ld(b, pl[1]), _ld(pm, pl[2])
                nisa.tensor_copy_predicated(ta, 2.5 if scalar else tb, tm, reverse_pred=rev)
                return (_st(ta),)
            got, = _sim(body, x, y, m)
            pr = (np.asarray(m) != 0) ^ rev
            new = np.full(x.shape, f64(_cast(2.5, dt))) if scalar else f64(y)
            return [("dst", got, np.where(pr, new, f64(x)), 0.0)]
        cases.append((f"[{p},{f}] predicate={pdt} reverse={rev} src={'2.5' if scalar else 'tile'} {pl}", thunk))
    return cases


@_numerics("nisa.bn_stats", FLOATS)
def _bnstats(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate([(1, 1), (1, 2), (32, 33), (128, 512), (7, 511), (77, 129), (128, 2)]):
        x = _gen(rng, (p, f), dt, -3, 5)
        pl = "psum" if i % 2 else "sbuf"

        def thunk(x=x, pl=pl, p=p):
            def body(a):
                ta = _ld(a, pl)
                d = _new((p, 6), "float32")
                nisa.bn_stats(d, ta)
                return (_st(d),)
            got, = _sim(body, x)
            X = f64(x)
            ref, tol = np.zeros((p, 6)), np.zeros((p, 6))
            for j, sl in enumerate((X[:, 0::2], X[:, 1::2])):
                n = sl.shape[1]
                ref[:, 3 * j] = n
                if n:
                    m = sl.mean(1)
                    ref[:, 3 * j + 1] = m
                    ref[:, 3 * j + 2] = ((sl - m[:, None]) ** 2).sum(1)
                    # mean: gamma_n * sum|x| / n; M2 = sum (x - m)^2, by any fp32 algorithm over n squares:
                    # gamma_{2n+2} * sum x^2 (the one-pass bound, which also covers the two-pass one)
                    g = lambda k: k * U32 / (1 - k * U32)  # noqa: E731
                    tol[:, 3 * j + 1] = g(n + 1) * np.abs(sl).sum(1) / n + TINY
                    tol[:, 3 * j + 2] = g(2 * n + 2) * (sl * sl).sum(1) + TINY
            return [("dst", got, ref, tol)]
        cases.append((f"[{p},{f}] {pl}", thunk))
    return cases


@_numerics("nisa.bn_aggr", ["float32"])
def _bnaggr(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, k) in enumerate([(1, 1), (32, 2), (128, 4), (7, 3), (77, 8), (128, 16)]):
        cnt = rng.integers(1, 257, size=(p, k)).astype(np.float64)
        mean = _cast(rng.uniform(-3, 3, size=(p, k)), "float32").astype(np.float64)
        m2 = _cast(cnt * rng.uniform(0.1, 4, size=(p, k)), "float32").astype(np.float64)
        x = _cast(np.stack([cnt, mean, m2], axis=2).reshape(p, 3 * k), "float32")

        def thunk(x=x, p=p, k=k):
            def body(a):
                ta = _ld(a)
                d = _new((p, 2), "float32")
                nisa.bn_aggr(d, ta)
                return (_st(d),)
            got, = _sim(body, x)
            T = f64(x).reshape(p, k, 3)
            n, m, s = T[..., 0], T[..., 1], T[..., 2]
            N = n.sum(1)
            mu = (n * m).sum(1) / N
            var = (s.sum(1) + (n * (m - mu[:, None]) ** 2).sum(1)) / N
            g = lambda q: q * U32 / (1 - q * U32)  # noqa: E731
            # weighted mean of k chunks: gamma_{k+2} * sum n|m| / N; variance: sums of 2k+? terms, each carrying the
            # mean's error: gamma_{2k+4} * (sum M2 + sum n (|m| + |mu|)^2) / N
            tm = g(k + 2) * (n * np.abs(m)).sum(1) / N + TINY
            tv = g(2 * k + 4) * (s.sum(1) + (n * (np.abs(m) + np.abs(mu[:, None])) ** 2).sum(1)) / N + TINY
            return [("dst", got, np.stack([mu, var], 1), np.stack([tm, tv], 1))]
        cases.append((f"[{p}, {k} x (count, mean, M2)]", thunk))
    return cases
