"""Numerics cases of the ``nisa`` index and selection instructions: iota, affine_select, select_reduce,
range_select, max8, nc_find_index8, nc_match_replace8, nc_stream_shuffle."""

from __future__ import annotations

import numpy as np

from .references import EB, FLOATS, INTS, TINY, _cast, _dt_round, _is_int, _ref_out, _sum_bound, _tol_out, f64
from .harness import SHAPES, _M, _gen, _ld, _new, _numerics, _place, _sim, _st


@_numerics("nisa.iota", ["int32", "float32", "bfloat16"])
def _iota(dt, rng):
    nisa = _M["nisa"]
    cases = []
    pats = [([[1, 1]], 0, 0, 1), ([[1, 7]], 3, 1, 1), ([[1, 33]], -5, 2, 32), ([[2, 4], [1, 8]], 0, 32, 128),
            ([[-1, 129]], 100, 1, 77), ([[0, 3], [3, 5]], 7, -1, 127), ([[1, 512]], 0, 512, 128),
            ([[1, 2], [2, 3], [6, 2], [12, 2]], 1, 0, 5)]
    for pat, off, cm, p in pats:
        f = int(np.prod([n for _, n in pat]))

        def thunk(pat=pat, off=off, cm=cm, p=p, f=f):
            def body():
                d = _new((p, f), dt)
                nisa.iota(d, pat, offset=off, channel_multiplier=cm)
                return (_st(d),)
            got, = _sim(body)
            v = np.full((p,) + tuple(n for _, n in pat), float(off))
            v += (np.arange(p) * cm).reshape((p,) + (1,) * len(pat))
            for i, (s, n) in enumerate(pat):
                sh = [1] * (len(pat) + 1)
                sh[i + 1] = n
                v += (np.arange(n) * s).reshape(sh)
            eb = EB(v.reshape(p, f))
            return [("dst", got, _ref_out(eb, dt), _tol_out(eb, dt))]
        cases.append((f"pattern={pat} offset={off} channel_multiplier={cm} [{p},{f}]", thunk))
    return cases


@_numerics("nisa.affine_select", FLOATS)
def _aff(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    cases = []
    specs = [(1, [[-1, 1]], 1, "greater_equal", 0), (128, [[-1, 128]], 1, "greater_equal", 0),
             (32, [[1, 33]], -1, "equal", 0), (77, [[-1, 129]], 1, "less", 3), (7, [[2, 4], [-1, 8]], 3, "greater", -5),
             (128, [[-1, 512]], 1, "not_equal", 10)]
    for p, pat, cm, cmp, off in specs:
        f = int(np.prod([n for _, n in pat]))
        x = _gen(rng, (p, f), dt)
        fv = [-1e4, -9.0, 0.0, 3.3][len(cases) % 4]

        def thunk(x=x, p=p, pat=pat, cm=cm, cmp=cmp, off=off, f=f, fv=fv):
            def body(a):
                ta = _ld(a)
                d = _new(a.shape, dt)
                nisa.affine_select(d, pat, cm, ta, fv, cmp_op=getattr(nl, cmp), offset=off)
                return (_st(d),)
            got, = _sim(body, x)
            v = np.full((p,) + tuple(n for _, n in pat), float(off))
            v += (np.arange(p) * cm).reshape((p,) + (1,) * len(pat))
            for i, (s, n) in enumerate(pat):
                sh = [1] * (len(pat) + 1)
                sh[i + 1] = n
                v += (np.arange(n) * s).reshape(sh)
            keep = {"equal": np.equal, "greater_equal": np.greater_equal, "less": np.less, "greater": np.greater,
                    "not_equal": np.not_equal}[cmp](v.reshape(p, f), 0)
            # the on_false constant is rounded into dst's dtype (RNE): the reference rounds it the same way
            return [("dst", got, np.where(keep, f64(x), _dt_round(fv, dt)), 0.0)]
        cases.append((f"pattern={pat} cm={cm} {cmp} offset={off} [{p},{f}] on_false={fv}", thunk))
    return cases


@_numerics("nisa.select_reduce", FLOATS)
def _selred(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate(SHAPES):
        x = _gen(rng, (p, f), dt)
        m = _cast(rng.integers(0, 2, size=(p, f)), "uint8")
        kind = ["imm", "vec", "tile"][i % 3]
        fal = -9.0 if kind == "imm" else (_gen(rng, (p, 1), dt) if kind == "vec" else _gen(rng, (p, f), dt))
        rop = ["maximum", "minimum", "add"][i % 3]
        rev = i % 2 == 1

        def thunk(x=x, m=m, kind=kind, fal=fal, rop=rop, rev=rev, p=p, f=f):
            def body(a, pm, *fa):
                ta, tm = _ld(a), _ld(pm)
                d = _new(a.shape, dt)
                r = _new((p, 1), "float32")
                nisa.select_reduce(d, tm, ta, fal if kind == "imm" else _ld(fa[0]), reduce_res=r, reduce_op=rop,
                                   reverse_pred=rev)
                return _st(d), _st(r)
            d, r = _sim(body, x, m, *(() if kind == "imm" else (fal,)))
            pr = (np.asarray(m) != 0) ^ rev
            fv = np.broadcast_to(f64(fal) if kind != "imm" else np.float64(fal), (p, f)) if kind != "vec" else \
                np.broadcast_to(f64(fal), (p, f))
            out = np.where(pr, f64(x), fv)
            if rop == "add":
                rr = EB(out.sum(1, keepdims=True), _sum_bound(np.abs(out), 1, f)[:, None] + TINY)
            else:
                rr = EB((np.max if rop == "maximum" else np.min)(out, axis=1, keepdims=True))
            return [("dst", d, out, _tol_out(EB(out), dt)), ("reduce_res", r, rr.v, rr.e)]
        cases.append((f"[{p},{f}] on_false={kind} reduce={rop} reverse={rev}", thunk))
    return cases


@_numerics("nisa.range_select", FLOATS)
def _rsel(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate(SHAPES):
        x = _gen(rng, (p, f), dt)
        b0 = _cast(rng.integers(-2, f + 2, size=(p, 1)), "float32")
        b1 = _cast(f64(b0) + rng.integers(0, f + 2, size=(p, 1)), "float32")
        c0, c1 = [("greater_equal", "less"), ("greater", "less_equal"), ("greater_equal", "less_equal")][i % 3]
        start = [0, 3, -2][i % 3]
        fv = [None, -100.0][i % 2]

        def thunk(x=x, b0=b0, b1=b1, c0=c0, c1=c1, start=start, fv=fv, p=p, f=f):
            def body(a, lo, hi):
                ta = _ld(a)
                d = _new(a.shape, dt)
                r = _new((p, 1), "float32")
                kw = {} if fv is None else {"on_false_value": fv}
                nisa.range_select(d, ta, c0, c1, _ld(lo), _ld(hi), reduce_res=r, reduce_op="maximum",
                                  range_start=start, **kw)
                return _st(d), _st(r)
            d, r = _sim(body, x, b0, b1, target="trn2")     # NeuronCore-v3 and later
            idx = np.arange(f)[None, :] + start
            cmp = {"greater_equal": np.greater_equal, "greater": np.greater, "less": np.less,
                   "less_equal": np.less_equal}
            keep = cmp[c0](idx, f64(b0)) & cmp[c1](idx, f64(b1))
            fval = float(np.finfo(np.float32).min) if fv is None else fv
            out32 = np.where(keep, f64(x), fval)
            return [("dst", d, np.where(keep, f64(x), _dt_round(fval, dt)), 0.0),
                    ("reduce_res", r, out32.max(1, keepdims=True), 0.0)]
        cases.append((f"[{p},{f}] {c0}/{c1} range_start={start} on_false={fv}", thunk))
    return cases


@_numerics("nisa.max8", FLOATS)
def _max8(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for p, f in [(1, 8), (32, 33), (128, 512), (7, 16384), (77, 129), (128, 8)]:
        x = _gen(rng, (p, f), dt, -100, 100)
        pl = "psum" if f <= 2048 and p % 2 else "sbuf"

        def thunk(x=x, p=p, pl=pl):
            def body(a):
                ta = _ld(a, pl)
                d = _new((p, 8), dt)
                nisa.max8(d, ta)
                return (_st(d),)
            got, = _sim(body, x)
            return [("dst", got, -np.sort(-f64(x), axis=1)[:, :8], 0.0)]
        cases.append((f"[{p},{f}] {pl}", thunk))
    return cases


def _first_occ(X, V):
    out = np.full(V.shape, -1, dtype=np.int64)
    for r in range(X.shape[0]):
        for j in range(V.shape[1]):
            hit = np.flatnonzero(X[r] == V[r, j])
            if hit.size:
                out[r, j] = hit[0]
    return out


@_numerics("nisa.nc_find_index8", FLOATS)
def _find8(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate([(1, 8), (32, 33), (128, 512), (7, 4096), (77, 129)]):
        x = _gen(rng, (p, f), dt, -100, 100)
        vals = np.take_along_axis(x, rng.integers(0, f, size=(p, 8)), 1)
        if i % 2:
            vals = vals.copy()
            vals[:, 7] = _cast(1000.0 if dt != "float8_e4m3" else 224.0, dt)     # absent: not found
        idt = ["uint32", "int32"][i % 2]

        def thunk(x=x, vals=vals, idt=idt, p=p):
            def body(a, v):
                ta, tv = _ld(a), _ld(v)
                d = _new((p, 8), idt)
                nisa.nc_find_index8(d, ta, tv)
                return (_st(d),)
            got, = _sim(body, x, vals)
            ref = _first_occ(f64(x), f64(vals))
            ref = np.where(ref < 0, np.iinfo(np.uint32).max if idt == "uint32" else -1, ref)
            return [("dst", np.asarray(got).astype(np.float64), ref.astype(np.float64), 0.0)]
        cases.append((f"[{p},{f}] vals with {'one absent' if i % 2 else 'all present'} -> {idt}", thunk))
    return cases


@_numerics("nisa.nc_match_replace8", FLOATS)
def _match8(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate([(1, 8), (32, 33), (128, 512), (7, 4096), (77, 129)]):
        x = _gen(rng, (p, f), dt, -100, 100)
        vals = -np.sort(-x.astype(np.float32), axis=1)[:, :8].astype(x.dtype)
        imm = -1000.0 if dt != "float8_e4m3" else -224.0
        with_idx = i % 2 == 1

        def thunk(x=x, vals=vals, imm=imm, with_idx=with_idx, p=p):
            def body(a, v):
                ta, tv = _ld(a), _ld(v)
                d = _new(a.shape, dt)
                if with_idx:
                    ix = _new((p, 8), "int32")
                    nisa.nc_match_replace8(d, ta, tv, imm, dst_idx=ix)
                    return _st(d), _st(ix)
                nisa.nc_match_replace8(d, ta, tv, imm)
                return (_st(d),)
            outs = _sim(body, x, vals)
            X = f64(x).copy()
            V = f64(vals)
            idx = np.full((p, 8), -1.0)
            for r in range(p):
                for j in range(8):   # each value replaces its first remaining occurrence, in order
                    hit = np.flatnonzero(X[r] == V[r, j])
                    if hit.size:
                        X[r, hit[0]] = imm
                        idx[r, j] = hit[0]
            out = [("dst", outs[0], np.where(X == imm, _dt_round(imm, dt), X), 0.0)]
            if with_idx:
                out.append(("dst_idx", outs[1], idx, 0.0))
            return out
        cases.append((f"[{p},{f}] imm={imm} dst_idx={with_idx}", thunk))
    return cases


@_numerics("nisa.nc_stream_shuffle", FLOATS + INTS)
def _shuffle(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate([(1, 1), (32, 33), (128, 512), (7, 64), (77, 129), (128, 1)]):
        x = _cast(rng.integers(0, 100, size=(p, f)), dt) if _is_int(dt) else _gen(rng, (p, f), dt)
        mask = [int(v) for v in rng.integers(0, min(p, 32), size=32)]
        if i % 2:
            mask[int(rng.integers(0, 32))] = 255
        pl = _place(i, 2, [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")], f, dt)

        def thunk(x=x, mask=mask, p=p, pl=pl):
            def body(a):
                ta = _ld(a, pl[0])
                d = _new(a.shape, dt, pl[1])
                nisa.memset(d, 0)
                nisa.nc_stream_shuffle(d, ta, mask)
                return (_st(d),)
            got, = _sim(body, x)
            X = f64(x)
            ref = np.zeros_like(X)
            for r in range(p):
                q, j = divmod(r, 32)
                if mask[j] != 255 and q * 32 + mask[j] < p:
                    ref[r] = X[q * 32 + mask[j]]
            return [("dst", got, ref, 0.0)]
        cases.append((f"[{p},{f}] {pl} mask={mask[:6]}...", thunk))
    return cases
