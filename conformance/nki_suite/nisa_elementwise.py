"""Numerics cases of the element-wise ``nisa`` instructions: tensor_tensor, tensor_scalar, activation,
exponential, copies, DMA, memset, reciprocal, scalar_tensor_tensor."""

from __future__ import annotations

import numpy as np

from .references import (
    ACT, ACT_RANGE, EB, FLOATS, INTS, NP, U32, _cast, _is_int, _ref_out, _sum_bound, _tol_out, eb_binary, eb_unary,
    f64)
from .harness import (
    ARITH, BITVEC, COMPARE, SHAPES, _M, _SBUF_BUDGET, _act_input, _binary_eb, _bitvec_ref, _gen, _itemsize, _ld,
    _new, _numerics, _op_inputs, _place, _poff, _shapes, _sim, _st)


# ====================================================================================== nisa numerics
@_numerics("nisa.tensor_tensor", FLOATS + INTS)
def _tt(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    ops = BITVEC + ["add", "multiply", "maximum", "minimum"] if _is_int(dt) else ARITH + COMPARE
    cases = []
    shapes = _shapes(65536, _itemsize(dt), 2)
    for i, op in enumerate(ops):
        for j in range(6):
            p, f = shapes[(i * 6 + j) % len(shapes)]
            if op == "power" and f > 4096:
                f = 4096
            allowed = [("sbuf", "sbuf", "sbuf")] if op == "power" else \
                [("sbuf", "sbuf", "sbuf"), ("psum", "sbuf", "sbuf"), ("sbuf", "psum", "sbuf"), ("sbuf", "sbuf", "psum")]
            pl = _place(i + j, 3, allowed, f, dt)
            x, y = _op_inputs(op, rng, (p, f), dt)
            odt = dt if (j % 3 != 2 or _is_int(dt)) else "float32"
            inplace = j % 3 == 0 and pl[0] == pl[2]
            po = _poff(i + j, p) if j >= 3 else 0
            if f * (2 * _itemsize(dt) + _itemsize(odt)) > _SBUF_BUDGET:    # the free-size-limit case: in place
                odt, inplace = dt, True

            def thunk(op=op, x=x, y=y, pl=pl, odt=odt, inplace=inplace, po=po):
                def body(a, b):
                    ta, tb = _ld(a, pl[0], poff=po), _ld(b, pl[1], poff=po)
                    d = ta if (inplace and odt == dt) else _new(a.shape, odt, pl[2], po)
                    nisa.tensor_tensor(d, ta, tb, op=getattr(nl, op))
                    return (_st(d),)
                got, = _sim(body, x, y)
                eb = _binary_eb(op, x, y, odt)
                return [("dst", got, _ref_out(eb, odt), _tol_out(eb, odt))]
            cases.append((f"{op} [{p},{f}] at partition {po} {pl} -> {odt}", thunk))
    return cases


_TS_CHAINS = [("subtract", "multiply"), ("add", None), ("multiply", "add"), ("divide", "subtract"),
              ("maximum", "minimum"), ("mod", None), ("power", None)]


@_numerics("nisa.tensor_scalar", FLOATS + INTS)
def _ts(dt, rng):
    nisa = _M["nisa"]
    cases = []
    shapes = _shapes(65536, _itemsize(dt), 2)
    chains = [("bitwise_and", "bitwise_or"), ("bitwise_xor", None), ("left_shift", "right_shift"),
              ("add", "maximum")] if _is_int(dt) else _TS_CHAINS
    k = 0
    for op0, op1 in chains:
        for vec in (False, True):
            for rev in (False, True):
                k += 1
                p, f = shapes[k % len(shapes)]
                pl = _place(k, 2, [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")], f, dt)
                eng = [None, "vector", "scalar", "gpsimd"][k % 4]
                if "psum" in pl and eng == "gpsimd":
                    eng = "vector"
                if op0 == "power":
                    eng = "gpsimd" if "psum" not in pl else None
                if _is_int(dt):
                    ii = np.iinfo(NP[dt])
                    hi = 100 if ii.max > 255 else 10
                    x = _cast(rng.integers(0, hi, size=(p, f)), dt)
                    s0 = _cast(rng.integers(0, 6, size=(p, 1)), dt) if vec else int(rng.integers(0, 6))
                    s1 = int(rng.integers(0, 4))
                    rev_ = False
                else:
                    x, _ = _op_inputs(op0, rng, (p, f), dt)
                    rev_ = rev and op0 not in ("power", "mod", "divide")
                    s0 = _gen(rng, (p, 1), "float32", "pm", (0.5, 2)) if vec else float(_cast(rng.uniform(0.5, 2), dt))
                    if op0 == "power":
                        s0 = _gen(rng, (p, 1), "float32", -2, 2) if vec else 1.5
                    s1 = float(_cast(rng.uniform(-2, 2), "float32"))

                po = _poff(k, p) if k % 2 else 0

                def thunk(x=x, s0=s0, s1=s1, op0=op0, op1=op1, pl=pl, vec=vec, rev=rev_, eng=eng, p=p, po=po):
                    def body(a, *sv):
                        ta = _ld(a, pl[0], poff=po)
                        o0 = _ld(sv[0], poff=po) if vec else s0
                        d = _new(a.shape, dt, pl[1], po)
                        kw = {} if op1 is None else {"op1": op1, "operand1": s1}
                        if eng is not None:
                            kw["engine"] = getattr(nisa, f"{eng}_engine")
                        nisa.tensor_scalar(d, ta, op0, o0, reverse0=rev, **kw)
                        return (_st(d),)
                    got, = _sim(body, x, *((s0,) if vec else ()))
                    sv = EB(f64(s0)) if vec else EB(np.full((p, 1), float(s0)))
                    if op0 in BITVEC:
                        sv_i = np.broadcast_to(np.asarray(s0).astype(np.int64).reshape(-1, 1) if vec else int(s0),
                                               x.shape)
                        r = EB(_bitvec_ref(op0, x, sv_i, dt))
                        if op1 is not None:
                            r = EB(_bitvec_ref(op1, r.v.astype(np.int64), np.full(x.shape, s1), dt))
                    else:
                        xv = EB(f64(x))
                        r = eb_binary(op0, sv, xv) if rev else eb_binary(op0, xv, sv)
                        if op1 is not None:
                            r = eb_binary(op1, r, EB(np.full(x.shape, s1)))
                    return [("dst", got, _ref_out(r, dt), _tol_out(r, dt))]
                cases.append((f"{op0}{'/' + op1 if op1 else ''} {'[P,1]' if vec else 'imm'} rev={rev_} "
                              f"[{p},{f}] at partition {po} {pl} engine={eng}", thunk))
    return cases


@_numerics("nisa.activation", FLOATS)
def _act(dt, rng):
    nisa = _M["nisa"]
    cases = []
    shapes = _shapes(65536, _itemsize(dt), 2)
    for i, fn in enumerate(sorted(ACT)):
        for j in range(4):
            p, f = shapes[(4 * i + j) % len(shapes)]
            pl = _place(i + j, 2, [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")], f, dt)
            x = _act_input(fn, rng, (p, f), dt)
            # odd j: scale 0.75 and a [P,1] bias (functions with a restricted domain get scale 1 and a zero bias)
            affine = j % 2 == 1 and fn not in ACT_RANGE
            po = _poff(i + j, p) if j >= 2 else 0
            bias = _gen(rng, (p, 1), "float32", -0.5, 0.5) if affine else np.zeros((p, 1), np.float32)
            scale = 0.75 if affine else 1.0
            red = j % 2 == 1 and f <= 4096

            def thunk(fn=fn, x=x, bias=bias, scale=scale, pl=pl, red=red, p=p, f=f, po=po):
                def body(a, b):
                    ta, tb = _ld(a, pl[0], poff=po), _ld(b, poff=po)
                    d = _new(a.shape, dt, pl[1], po)
                    if red:
                        r = _new((p, 1), "float32")
                        nisa.activation(d, fn, ta, bias=tb, scale=scale, reduce_op="add", reduce_res=r)
                        return _st(d), _st(r)
                    nisa.activation(d, fn, ta, bias=tb, scale=scale)
                    return (_st(d),)
                outs = _sim(body, x, bias)
                z = eb_binary("add", eb_binary("multiply", EB(f64(x)), EB(np.full(x.shape, scale))), EB(f64(bias))) \
                    if scale != 1.0 else eb_binary("add", EB(f64(x)), EB(f64(bias)))
                y = eb_unary(fn, z)
                out = [("dst", outs[0], _ref_out(y, dt), _tol_out(y, dt))]
                if red:
                    out.append(("reduce_res", outs[1], y.v.sum(1, keepdims=True),
                                y.e.sum(1, keepdims=True) + _sum_bound(np.abs(y.v) + y.e, 1, f + 1)[:, None]))
                return out
            cases.append((f"{fn} [{p},{f}] at partition {po} {pl} scale={scale} reduce={red}", thunk))
    return cases


@_numerics("nisa.activation_reduce", FLOATS)
def _act_red(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, fn in enumerate(["exp", "tanh", "copy", "square", "relu", "sigmoid"]):
        p, f = SHAPES[(i + 2) % len(SHAPES)]
        x = _act_input(fn, rng, (p, f), dt)

        def thunk(fn=fn, x=x, p=p, f=f):
            def body(a):
                ta = _ld(a)
                d = _new(a.shape, dt)
                r = _new((p, 1), "float32")
                nisa.activation_reduce(d, fn, ta, reduce_op="add", reduce_res=r)
                return _st(d), _st(r)
            d, r = _sim(body, x)
            y = eb_unary(fn, EB(f64(x)))
            return [("dst", d, _ref_out(y, dt), _tol_out(y, dt)),
                    ("reduce_res", r, y.v.sum(1, keepdims=True),
                     y.e.sum(1, keepdims=True) + _sum_bound(np.abs(y.v) + y.e, 1, f)[:, None])]
        cases.append((f"{fn} [{p},{f}]", thunk))
    return cases


@_numerics("nisa.exponential", FLOATS)
def _expo(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate(_shapes(65536, _itemsize(dt), 2)):
        x = _gen(rng, (p, f), dt, -3, 3)
        vec = i % 2 == 0
        mv = f64(x).max(1, keepdims=True).astype(np.float32) if vec else 1.0
        red = f <= 4096
        pl = _place(i, 2, [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")], f, dt)

        def thunk(x=x, mv=mv, vec=vec, red=red, p=p, f=f, pl=pl):
            def body(a, *m):
                ta = _ld(a, pl[0])
                d = _new(a.shape, dt, pl[1])
                kw = {}
                if red:
                    r = _new((p, 1), "float32")
                    kw = {"reduce_res": r, "reduce_init": 0.5}
                nisa.exponential(d, ta, max_value=_ld(m[0]) if vec else mv, **kw)
                return (_st(d), _st(r)) if red else (_st(d),)
            outs = _sim(body, x, *((mv,) if vec else ()))
            y = eb_unary("exp", eb_binary("subtract", EB(f64(x)), EB(np.broadcast_to(f64(mv), (p, 1)))))
            out = [("dst", outs[0], _ref_out(y, dt), _tol_out(y, dt))]
            if red:
                # f + 1 terms (the f exponentials and reduce_init 0.5): gamma_f * (sum |y| + 0.5)
                out.append(("reduce_res", outs[1], y.v.sum(1, keepdims=True) + 0.5,
                            y.e.sum(1, keepdims=True) + _sum_bound(np.abs(y.v) + y.e, 1, f + 1)[:, None]
                            + 0.5 * f * U32 / (1 - f * U32)))
            return out
        cases.append((f"[{p},{f}] max_value={'[P,1]' if vec else mv} {pl} reduce={red}", thunk))
    return cases


@_numerics("nisa.tensor_copy", FLOATS + INTS)
def _tcopy(dt, rng):
    nisa = _M["nisa"]
    cases = []
    outs = (FLOATS + ["int32"]) if not _is_int(dt) else ["int32", "uint8", "float32", "bfloat16"]
    shapes = _shapes(65536, _itemsize(dt), 2)
    for i, odt in enumerate(outs):
        for j in range(3):
            k = 3 * i + j
            p, f = shapes[k % len(shapes)]
            eng = ["vector", "scalar", "gpsimd"][k % 3]
            pl = ("sbuf", "sbuf") if eng == "gpsimd" else _place(k, 2, [("sbuf", "sbuf"), ("psum", "sbuf"),
                                                                         ("sbuf", "psum"), ("psum", "psum")], f, dt)
            f = min(f, _SBUF_BUDGET // (_itemsize(dt) + _itemsize(odt)))
            if _is_int(dt):
                x = _cast(rng.integers(0, 120, size=(p, f)), dt)
            elif _is_int(odt):
                x = _cast(rng.integers(-50, 50, size=(p, f)), dt)
            else:
                x = _gen(rng, (p, f), dt, -200, 200)
            if odt == "float8_e4m3" or dt == "float8_e4m3":
                x = _cast(np.clip(f64(x), -200, 200), dt)

            def thunk(x=x, odt=odt, eng=eng, pl=pl):
                def body(a):
                    ta = _ld(a, pl[0])
                    d = _new(a.shape, odt, pl[1])
                    nisa.tensor_copy(d, ta, engine=getattr(nisa, f"{eng}_engine"))
                    return (_st(d),)
                got, = _sim(body, x)
                eb = EB(f64(x))
                return [("dst", got, _ref_out(eb, odt), _tol_out(eb, odt))]
            cases.append((f"[{p},{f}] -> {odt} {pl} engine={eng}", thunk))
    # the Vector PSUM free-size limit: 4096 elements read from PSUM
    x = _cast(rng.integers(0, 120, size=(2, 4096)), dt) if _is_int(dt) else _gen(rng, (2, 4096), dt)

    def at_limit(x=x):
        def body(a):
            d = _new(a.shape, dt)
            nisa.tensor_copy(d, _ld(a, "psum"))
            return (_st(d),)
        got, = _sim(body, x)
        return [("dst", got, f64(x), 0.0)]
    cases.append(("[2,4096] psum -> sbuf (PSUM free-size limit)", at_limit))
    return cases


@_numerics("nisa.dma_copy", FLOATS + INTS)
def _dma(dt, rng):
    nisa = _M["nisa"]
    cases = []
    routes = [("hbm", "sbuf"), ("hbm", "psum"), ("sbuf", "sbuf"), ("sbuf", "hbm"), ("psum", "sbuf"), ("hbm", "hbm")]
    outs = [dt] + (["float32", "bfloat16", "float16"] if not _is_int(dt) else ["int32"])
    for i, (p, f) in enumerate(SHAPES + [(128, 2048)]):
        src, dsp = routes[i % len(routes)]
        odt = outs[i % len(outs)]
        x = _cast(rng.integers(0, 100, size=(p, f)), dt) if _is_int(dt) else _gen(rng, (p, f), dt, -200, 200)

        def thunk(x=x, src=src, dsp=dsp, odt=odt):
            def body(a):
                s = a if src == "hbm" else _ld(a, src)
                d = _new(a.shape, odt, dsp)
                nisa.dma_copy(d, s)
                return (d if dsp == "hbm" else _st(d),)
            got, = _sim(body, x)
            eb = EB(f64(x))
            return [("dst", got, _ref_out(eb, odt), _tol_out(eb, odt))]
        cases.append((f"{src}->{dsp} [{p},{f}] -> {odt}", thunk))
    return cases


@_numerics("nisa.dma_transpose", ["float32", "bfloat16", "float16"])
def _dmat(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, shape in enumerate([(1, 1), (7, 128), (128, 77), (32, 32), (3, 5, 7), (2, 16, 128)]):
        x = _gen(rng, shape, dt)
        from_sbuf = i % 2 == 1

        def thunk(x=x, from_sbuf=from_sbuf):
            def body(a):
                s = _ld(a) if from_sbuf else a
                d = _new(tuple(reversed(a.shape)), dt)
                nisa.dma_transpose(d, s)
                return (_st(d),)
            got, = _sim(body, x)
            return [("dst", got, f64(x).transpose(tuple(range(x.ndim))[::-1]), 0.0)]
        cases.append((f"{list(shape)} from {'sbuf' if from_sbuf else 'hbm'}", thunk))
    return cases


@_numerics("nisa.memset", FLOATS + INTS)
def _memset(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate(_shapes(65536, _itemsize(dt), 1)):
        v = int(rng.integers(0, 200)) if _is_int(dt) else float(np.float32(rng.uniform(-200, 200)))
        if i == 0:
            v = 0
        eng = ["vector", "gpsimd", "scalar"][i % 3]
        space = "psum" if (eng != "gpsimd" and i % 2 and f <= 2048) else "sbuf"

        def thunk(v=v, eng=eng, space=space, p=p, f=f):
            def body():
                d = _new((p, f), dt, space)
                nisa.memset(d, v, engine=getattr(nisa, f"{eng}_engine"))
                return (_st(d),)
            got, = _sim(body)
            eb = EB(np.full((p, f), float(v)))
            return [("dst", got, _ref_out(eb, dt), _tol_out(eb, dt))]
        cases.append((f"{v!r} [{p},{f}] {space} engine={eng}", thunk))
    return cases


@_numerics("nisa.reciprocal", FLOATS)
def _recip(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f) in enumerate(_shapes(65536, _itemsize(dt), 2)):
        x = _gen(rng, (p, f), dt, "pm", (0.25, 4))
        eng = ["vector", "scalar"][i % 2]
        pl = _place(i, 2, [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")], f, dt)

        def thunk(x=x, eng=eng, pl=pl):
            def body(a):
                ta = _ld(a, pl[0])
                d = _new(a.shape, dt, pl[1])
                nisa.reciprocal(d, ta, engine=getattr(nisa, f"{eng}_engine"))
                return (_st(d),)
            got, = _sim(body, x)
            eb = eb_binary("divide", EB(np.ones(x.shape)), EB(f64(x)))
            return [("dst", got, _ref_out(eb, dt), _tol_out(eb, dt))]
        cases.append((f"[{p},{f}] {pl} engine={eng}", thunk))
    return cases


@_numerics("nisa.scalar_tensor_tensor", FLOATS)
def _stt(dt, rng):
    nisa = _M["nisa"]
    cases = []
    chains = [("multiply", "add"), ("subtract", "multiply"), ("add", "maximum"), ("divide", "subtract"),
              ("maximum", "minimum")]
    k = 0
    for op0, op1 in chains:
        for vec in (False, True):
            k += 1
            p, f = SHAPES[k % len(SHAPES)]
            rev0, rev1 = bool(k % 2), bool(k % 3 == 0)
            if op0 == "divide":
                rev0 = False
            x = _gen(rng, (p, f), dt)
            y = _gen(rng, (p, f), dt)
            s0 = _gen(rng, (p, 1), "float32", "pm", (0.5, 2)) if vec else 1.25
            pl = _place(k, 3, [("sbuf", "sbuf", "sbuf"), ("psum", "sbuf", "sbuf"), ("sbuf", "psum", "sbuf"),
                               ("sbuf", "sbuf", "psum")], f, dt)

            def thunk(x=x, y=y, s0=s0, op0=op0, op1=op1, vec=vec, rev0=rev0, rev1=rev1, pl=pl, p=p):
                def body(a, b, *sv):
                    ta, tb = _ld(a, pl[0]), _ld(b, pl[1])
                    d = _new(a.shape, dt, pl[2])
                    nisa.scalar_tensor_tensor(d, ta, op0, _ld(sv[0]) if vec else s0, op1, tb, reverse0=rev0,
                                              reverse1=rev1)
                    return (_st(d),)
                got, = _sim(body, x, y, *((s0,) if vec else ()))
                s = EB(np.broadcast_to(f64(s0), (p, 1)))
                xv, yv = EB(f64(x)), EB(f64(y))
                t = eb_binary(op0, s, xv) if rev0 else eb_binary(op0, xv, s)
                r = eb_binary(op1, yv, t) if rev1 else eb_binary(op1, t, yv)
                return [("dst", got, _ref_out(r, dt), _tol_out(r, dt))]
            cases.append((f"{op0}/{op1} rev=({rev0},{rev1}) {'[P,1]' if vec else 'imm'} [{p},{f}] {pl}", thunk))
    return cases
