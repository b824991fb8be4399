"""Dtypes and float64 references carried as error-bounded values (``EB``): the bound a conforming fp32
pipeline may be from the exact result, per operation and per activation function."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np


# ---------------------------------------------------------------------------------------------- dtypes
NP = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
      "float8_e4m3": ml_dtypes.float8_e4m3, "int32": np.int32, "uint8": np.uint8, "int16": np.int16,
      "uint16": np.uint16, "uint32": np.uint32, "int8": np.int8}
FLOATS = ["float32", "bfloat16", "float16", "float8_e4m3"]
INTS = ["int32", "uint8"]
# Unit roundoff of round-to-nearest-even, u = 2^-p for a p-bit significand (implicit bit included):
# |round(x) - x| <= u * |x| for x in the normal range.  fp32 p=24, bf16 p=8, fp16 p=11, fp8 e4m3 p=4.
UNIT = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float8_e4m3": 2.0 ** -4}
# Below the smallest normal the rounding error is absolute: at most half the subnormal spacing
# (fp32 2^-149, bf16 2^-133, fp16 2^-24, e4m3 2^-9).
HALF_SUB = {"float32": 2.0 ** -150, "bfloat16": 2.0 ** -134, "float16": 2.0 ** -25, "float8_e4m3": 2.0 ** -10}
U32 = UNIT["float32"]
TINY = HALF_SUB["float32"]


def _is_int(dt):
    return dt not in UNIT


def _cast(a, dt):
    """float64/ints -> exactly representable values of ``dt`` (RNE for floats), as a NumPy array of ``dt``."""
    if _is_int(dt):
        return np.asarray(a).astype(NP[dt])
    return np.asarray(a, dtype=np.float64).astype(np.float32).astype(NP[dt])


def f64(a):
    return np.asarray(a).astype(np.float64)


def _dt_round(v, dt):
    """float64 ``v`` rounded into ``dt`` (exact float64 of the result)."""
    if _is_int(dt):
        ii = np.iinfo(NP[dt])
        return np.clip(np.rint(v), ii.min, ii.max)
    return f64(np.asarray(v, np.float64).astype(NP[dt]) if dt != "float32" else np.asarray(v).astype(np.float32))


# ------------------------------------------------------------------------------- error-bounded values
def _rnd(v, e0):
    """Bound after one fp32 rounding of a result whose exact value is ``v`` and whose operands were off by a
    bound ``e0``: |fl(r~) - v| <= e0 + u32 * (|v| + e0), plus half an fp32 subnormal spacing (IEEE 754 RNE)."""
    return e0 + U32 * (np.abs(v) + e0) + TINY


class EB:
    """A float64 exact value ``v`` with a bound ``e`` on the error of the fp32 pipeline computing it."""

    __slots__ = ("v", "e")

    def __init__(self, v, e=0.0):
        self.v = np.asarray(v, dtype=np.float64)
        self.e = np.broadcast_to(np.asarray(e, dtype=np.float64), self.v.shape) if np.ndim(e) or self.v.ndim \
            else np.asarray(e, dtype=np.float64)


def _ambiguous(a, b):
    return (a.e + b.e > 0) & (np.abs(a.v - b.v) <= a.e + b.e)


def eb_binary(name, a, b):
    """The ALU op ``name`` on error-bounded operands (fp32 ALU, one rounding per op)."""
    av, bv, ae, be = a.v, b.v, a.e, b.e
    with np.errstate(all="ignore"):
        if name in ("add", "subtract"):
            v = av + bv if name == "add" else av - bv
            return EB(v, _rnd(v, ae + be))
        if name == "multiply":
            v = av * bv
            return EB(v, _rnd(v, np.abs(av) * be + np.abs(bv) * ae + ae * be))
        if name == "divide":
            v = av / bv
            den = np.maximum(np.abs(bv) - be, 1e-300)
            return EB(v, _rnd(v, (ae + np.abs(v) * be) / den))
        if name in ("maximum", "minimum"):          # exact selection: 1-Lipschitz in each operand
            return EB(np.maximum(av, bv) if name == "maximum" else np.minimum(av, bv), np.maximum(ae, be))
        if name in ("abs_max", "abs_min"):
            f = np.maximum if name == "abs_max" else np.minimum
            return EB(f(np.abs(av), np.abs(bv)), np.maximum(ae, be))
        if name == "power":
            # libm powf: at most _LIBM_ULPS ulps of its result; input errors propagate by the partial derivatives
            v = np.power(av, bv)
            e0 = np.abs(bv * np.power(av, bv - 1)) * ae + np.abs(v * np.log(np.abs(av))) * be
            return EB(v, e0 + _LIBM_ULPS * U32 * (np.abs(v) + e0) + TINY)
        if name == "mod":
            # floored modulo = fmod (exact) then possibly + b (one rounding, at most u32*|b|)
            v = np.mod(av, bv)
            return EB(v, ae + be * (np.abs(av / bv) + 1) + U32 * np.abs(bv) + TINY)
        if name == "fmod":                           # IEEE fmod is exact
            return EB(np.fmod(av, bv), ae + be * (np.abs(av / bv) + 1))
        cmp = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
               "greater": np.greater, "greater_equal": np.greater_equal}
        if name in cmp:
            return EB(cmp[name](av, bv).astype(np.float64), np.where(_ambiguous(a, b), 1.0, 0.0))
        lg = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}
        if name in lg:
            amb = ((ae > 0) & (np.abs(av) <= ae)) | ((be > 0) & (np.abs(bv) <= be))
            return EB(lg[name](av != 0, bv != 0).astype(np.float64), np.where(amb, 1.0, 0.0))
        if name == "bypass":
            return EB(av, ae)
    raise KeyError(name)


# numpy's float32 transcendental loops are validated to at most 4 ulps (numpy/_core/tests/data/umath-validation-set-*
# ulperrortol); trnsim evaluates these functions with them, and 4 ulps is the budget of one libm evaluation.
_LIBM_ULPS = 4.0


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _softplus(x):
    return np.logaddexp(0.0, x)


_C = math.sqrt(2 / math.pi)
# name -> (float64 reference, fp32 evaluation budget k in ulps, magnitude the budget scales with (of z, v)).
# k: 0 for exact functions; 2 for one or two correctly rounded steps; 4 (_LIBM_ULPS) for one libm call; more for
# formulas of several fp32 steps, where the magnitude includes the intermediate terms that cancel.
_ABSV = lambda z, v: np.abs(v)  # noqa: E731
ACT = {
    "copy": (lambda z: z, 0, _ABSV), "identity": (lambda z: z, 0, _ABSV), "bypass": (lambda z: z, 0, _ABSV),
    "relu": (lambda z: np.maximum(z, 0), 0, _ABSV), "abs": (np.abs, 0, _ABSV), "negative": (np.negative, 0, _ABSV),
    "sign": (np.sign, 0, _ABSV), "ceil": (np.ceil, 0, _ABSV), "floor": (np.floor, 0, _ABSV),
    "trunc": (np.trunc, 0, _ABSV),
    "square": (np.square, 1, _ABSV), "sqrt": (np.sqrt, 1, _ABSV),
    "rsqrt": (lambda z: 1 / np.sqrt(z), 2, _ABSV), "reciprocal": (lambda z: 1 / z, 1, _ABSV),
    "exp": (np.exp, 4, _ABSV), "log": (np.log, 4, _ABSV), "tanh": (np.tanh, 4, _ABSV), "sin": (np.sin, 4, _ABSV),
    "cos": (np.cos, 4, _ABSV), "tan": (np.tan, 4, _ABSV), "arctan": (np.arctan, 4, _ABSV),
    # erf/gelu/gelu_dx are evaluated in float64 then rounded to fp32: one rounding, k=1; 2 for the products
    "erf": (_erf, 1, _ABSV), "gelu": (lambda z: 0.5 * z * (1 + _erf(z / math.sqrt(2))), 2, _ABSV),
    "gelu_dx": (lambda z: 0.5 * (1 + _erf(z / math.sqrt(2))) + z * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi),
                2, _ABSV),
    # exp (4) + add + divide: 6 ulps of the result
    "sigmoid": (_sig, 6, _ABSV),
    "softplus": (_softplus, 4, _ABSV),
    # x * sigmoid(x): 6 + 1 (and the rounding of the float32 constant 1.702: relative u32 on its argument)
    "silu": (lambda z: z * _sig(z), 8, _ABSV),
    "gelu_apprx_sigmoid": (lambda z: z * _sig(1.702 * z), 10, lambda z, v: np.abs(v) + z * z),
    # 1 + tanh(y) and 1 - s cancel: the budget scales with the magnitude of the terms, not the result
    "gelu_apprx_tanh": (lambda z: 0.5 * z * (1 + np.tanh(_C * (z + 0.044715 * z ** 3))), 16,
                        lambda z, v: np.abs(v) + np.abs(z) * (1 + z * z)),
    "silu_dx": (lambda z: _sig(z) * (1 + z * (1 - _sig(z))), 16, lambda z, v: np.abs(v) + 1 + np.abs(z)),
    "gelu_apprx_sigmoid_dx": (lambda z: _sig(1.702 * z) * (1 + 1.702 * z * (1 - _sig(1.702 * z))), 16,
                              lambda z, v: np.abs(v) + 1 + np.abs(z) + z * z),
    "mish": (lambda z: z * np.tanh(_softplus(z)), 16, lambda z, v: np.abs(v) + np.abs(z) * 1e-3),
    # exp(-x*x): the fp32 square has relative error u32, which exp turns into x^2*u32 relative
    "erf_dx": (lambda z: 2 / math.sqrt(math.pi) * np.exp(-z * z), 6, lambda z, v: np.abs(v) * (1 + z * z)),
}
# input ranges (float64 uniform, then rounded into the dtype) keeping every function in its domain and every result
# finite in fp8 e4m3 (max 240)
ACT_RANGE = {"log": (0.125, 4), "sqrt": (0, 4), "rsqrt": (0.125, 4), "reciprocal": ("pm", 0.25, 4),
             "tan": (-1.2, 1.2)}


# wide argument ranges for float32/bfloat16 data (both have the fp32 exponent range); "log" = log-uniform
# magnitudes; every result stays a normal fp32 number
ACT_WIDE = {"exp": (-80, 88), "log": ("log", 1e-30, 1e30), "sqrt": ("log", 1e-30, 1e30),
            "rsqrt": ("log", 1e-30, 1e30), "reciprocal": ("pmlog", 1e-30, 1e30), "tanh": (-20, 20),
            "sin": (-100, 100), "cos": (-100, 100), "arctan": ("pmlog", 1e-6, 1e6), "sigmoid": (-80, 80),
            "softplus": (-80, 80), "silu": (-80, 80), "erf": (-6, 6), "gelu": (-20, 20),
            "square": ("pmlog", 1e-15, 1e15),
            "abs": ("pmlog", 1e-30, 1e30), "negative": ("pmlog", 1e-30, 1e30), "relu": ("pmlog", 1e-30, 1e30),
            "ceil": (-1e6, 1e6), "floor": (-1e6, 1e6), "trunc": (-1e6, 1e6), "sign": ("pmlog", 1e-30, 1e30)}


def eb_unary(name, z):
    """The activation ``name`` of an error-bounded argument: the input error propagated through the function
    (measured by evaluating the float64 reference at the ends of the error interval) plus the evaluation budget."""
    f, k, mag = ACT[name]
    with np.errstate(all="ignore"):
        v = f(z.v)
        if np.any(z.e > 0):
            prop = np.maximum(np.abs(f(z.v + z.e) - v), np.abs(f(z.v - z.e) - v))
            prop = np.where(np.isfinite(prop), prop, np.inf)
        else:
            prop = 0.0
        e = prop + (k * U32 * mag(z.v, v) + TINY if k else 0.0)
    return EB(v, e)


def _tol_out(eb, dt):
    """Tolerance of an fp32 result bounded by ``eb`` after the write rounds it into ``dt``:
    e + u_dt * (|v| + e) + half a subnormal spacing of dt (for fp32 the write does not round again)."""
    if _is_int(dt):
        return np.where(eb.e > 0, eb.e + 0.5, 0.0)     # float -> int conversion rounds to nearest
    if dt == "float32":
        return eb.e + 0.0
    return eb.e + UNIT[dt] * (np.abs(eb.v) + eb.e) + HALF_SUB[dt]


def _ref_out(eb, dt):
    if _is_int(dt):
        ii = np.iinfo(NP[dt])
        return np.clip(eb.v, ii.min, ii.max)
    return eb.v


def _sum_bound(absvals, axis, n):
    """Any fp32 summation order of n terms: |fl(sum) - sum| <= gamma_{n-1} * sum|x_i|, gamma_k = k u/(1 - k u)
    (Higham, Accuracy and Stability of Numerical Algorithms, 4.2)."""
    g = (n - 1) * U32 / (1 - (n - 1) * U32) if n > 1 else 0.0
    return g * absvals.sum(axis=axis)
