"""Numerics cases of the legacy ``neuronxcc.nki.language`` front end (a light pass: each op once)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .references import EB, INTS, _ref_out, _tol_out, eb_unary, f64
from .harness import BITVEC, COMPARE, _M, _act_input, _binary_eb, _numerics, _op_inputs


# ===================================================================================== v1 numerics (light)
_V1_UNARY = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_sigmoid",
             "gelu_apprx_tanh", "gelu_dx", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx", "reciprocal",
             "sin", "cos", "tan", "arctan", "ceil", "floor", "trunc", "negative", "sign", "abs", "square"]
_V1_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod"] + COMPARE + \
    BITVEC
_V1_NP = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "int32": np.int32, "uint8": np.uint8}


def _v1_run(fn_name, arrays, args_tiles):
    nki1, nl1 = _M["nki1"], _M["nl1"]
    fn = getattr(nl1, fn_name)

    def body(*hs):
        ts = [nl1.load(h) for h in hs]
        z = fn(*ts) if args_tiles is None else fn(*[ts[i] if isinstance(i, int) else i[1] for i in args_tiles])
        c = nl1.ndarray(z.shape, dtype=z.dtype, buffer=nl1.shared_hbm)
        nl1.store(c, value=z)
        return c
    return nki1.jit(body)(*arrays)


def _mk_v1_unary(fn):
    @_numerics(f"v1.nl.{fn}", ["float32", "bfloat16"])
    def gen(dt, rng):
        cases = []
        for p, f in [(1, 1), (32, 33), (128, 512), (77, 129)]:
            x = _act_input(fn, rng, (p, f), dt)

            def thunk(x=x):
                got = _v1_run(fn, (x,), None)
                y = eb_unary(fn, EB(f64(x)))
                return [("out", got, _ref_out(y, dt), _tol_out(y, dt))]
            cases.append((f"[{p},{f}]", thunk))
        return cases


def _mk_v1_binary(op):
    dts = INTS if op in BITVEC else ["float32", "bfloat16"]

    @_numerics(f"v1.nl.{op}", dts)
    def gen(dt, rng):
        cases = []
        for i, (p, f) in enumerate([(1, 1), (32, 33), (128, 512), (77, 129)]):
            x, y = _op_inputs(op, rng, (p, f), dt)
            col = i == 3 and op not in BITVEC       # [P,1] operand: tensor_scalar path
            if col:
                y = y[:, :1].copy()

            def thunk(x=x, y=y, col=col):
                got = _v1_run(op, (x, y), None)
                yy = np.broadcast_to(y, x.shape)
                eb = _binary_eb(op, x, yy, dt)
                odt = "uint8" if op in COMPARE else dt       # comparisons return bool tiles in legacy NKI
                return [("out", got, _ref_out(eb, odt), _tol_out(eb, odt))]
            cases.append((f"[{p},{f}]{' with [P,1] y' if col else ''}", thunk))
        return cases


for _fn in _V1_UNARY:
    _mk_v1_unary(_fn)
for _op in _V1_BINARY:
    _mk_v1_binary(_op)
