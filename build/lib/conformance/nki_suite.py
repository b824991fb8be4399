"""NKI instruction conformance: every ``nisa`` instruction and ``nl`` operation trnsim implements, run over
generated shapes, dtypes and operand placements against float64 NumPy references, plus every documented
hardware rule broken on purpose (``NkiValidationError`` naming the operand must be raised).

Interface (used by ``conformance.runner`` and the report writers):

``run_nki(pattern=None, dtypes=None, progress=None) -> list[dict]``
    ``pattern``: fnmatch pattern on the name (``"nisa.tensor_*"``, ``"nl.exp"``, ``"v1.nl.*"``);
    ``dtypes``: restrict the numerics groups to these dtypes (rule groups, dtype ``"-"``, always run);
    ``progress(done, total, name)``: called after each group.
    One record per name x dtype x mode (``numerics`` | ``rule``), aggregated over that group's cases:
    ``{"suite": "nki", "name", "dtype", "mode", "status", "counts", "samples", "detail", "seconds"}``.
``list_nki_names() -> list[str]``

Tolerances
----------
Inputs are generated exactly representable in their dtype, so the only error is the engine's fp32 arithmetic and
the final rounding into the output dtype.  Every expected value is carried as an *error-bounded value* (``EB``):
the float64 exact result ``v`` and a bound ``e`` on how far a conforming fp32 pipeline may be from it, built
step by step from the rounding of each fp32 operation (see ``EB`` and ``_fn_eval_ulps``), then widened by the
rounding into the output dtype (``_tol_out``).  Nothing is loosened beyond those bounds.
"""

from __future__ import annotations

import fnmatch
import math
import re
import time
import zlib

import ml_dtypes
import numpy as np

__all__ = ["run_nki", "list_nki_names"]

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


def _wide_input(name, rng, shape, dt):
    r = ACT_WIDE[name]
    if r[0] in ("log", "pmlog"):
        v = np.exp(rng.uniform(math.log(r[1]), math.log(r[2]), size=shape))
        if r[0] == "pmlog":
            v = v * rng.choice([-1.0, 1.0], size=shape)
        return _cast(v, dt)
    return _gen(rng, shape, dt, *r)


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


# ------------------------------------------------------------------------------------------- harness
_M = {}


def _setup():
    if not _M:
        import trnsim
        nki = trnsim.install_nki()
        import nki.isa as nisa
        import nki.language as nl
        import neuronxcc.nki as nki1
        import neuronxcc.nki.language as nl1
        _M.update(trnsim=trnsim, nki=nki, nisa=nisa, nl=nl, nki1=nki1, nl1=nl1, err=trnsim.NkiValidationError)
    return _M


def _sim(body, *arrays, target=None):
    nki = _M["nki"]
    k = nki.jit(body)
    if target is not None:
        k = nki.simulate(k, target=target)
    out = k(*arrays)
    return out if isinstance(out, tuple) else (out,)


def _buf(space):
    nl = _M["nl"]
    return {"sbuf": nl.sbuf, "psum": nl.psum, "hbm": nl.shared_hbm}[space]


def _ld(x, space="sbuf", dt=None, poff=0):
    """A copy of HBM ``x`` in ``space``; with ``poff`` a view starting at partition ``poff`` of a larger tile."""
    nisa = _M["nisa"]
    t = _new(x.shape, dt or x.dtype, space, poff)
    nisa.dma_copy(t, x)
    return t


def _new(shape, dt, space="sbuf", poff=0):
    if not poff:
        return _M["nl"].ndarray(shape, dt, buffer=_buf(space))
    big = _M["nl"].ndarray((poff + shape[0],) + tuple(shape[1:]), dt, buffer=_buf(space))
    return big[poff:poff + shape[0]]


def _poff(i, p):
    """A legal non-zero start partition for a tile of p partitions (start-partition rule), cycling with i."""
    if p > 64:
        return 0
    if p > 32:
        return 64 if i % 2 else 0
    return (32 * (i % 4)) if i % 4 else (0 if p == 32 else 1 + (i % (32 - p + 1)))


def _st(t):
    nl, nisa = _M["nl"], _M["nisa"]
    o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(o, t)
    return o


def _gen(rng, shape, dt, lo=-4.0, hi=4.0):
    """Exactly representable inputs: uniform in [lo, hi] (or +-[lo, hi] with lo='pm'), rounded into dt."""
    if lo == "pm":
        a, b = hi
        v = rng.uniform(a, b, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    else:
        v = rng.uniform(lo, hi, size=shape)
    return _cast(v, dt)


def _check(label, got, ref, tol):
    """None if every element is within tolerance, else the worst element described."""
    g = f64(got)
    ref = np.asarray(ref, dtype=np.float64)
    if g.size != ref.size:
        return f"{label}: got shape {list(g.shape)}, expected {list(ref.shape)}"
    g = g.reshape(ref.shape)
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), ref.shape)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - ref)
        ok = (np.isnan(g) & np.isnan(ref)) | (g == ref) | (err <= tol)
    if ok.all():
        return None
    score = np.where(ok, -np.inf, np.nan_to_num(err - tol, nan=np.inf, posinf=np.inf))
    i = np.unravel_index(int(np.argmax(score)), ref.shape)
    return (f"{label}: worst at {list(int(j) for j in i)}: got {g[i]!r}, expected {ref[i]!r}, tolerance "
            f"{float(tol[i]):.3g} ({int((~ok).sum())} of {ok.size} elements out)")


# registry: name -> {"numerics": {dtype: gen(dt, rng) -> [(desc, thunk)]}, "rules": gen() -> [...], "skip": reason}
_REG: dict = {}


def _numerics(name, dtypes):
    def deco(fn):
        _REG.setdefault(name, {}).setdefault("numerics", {})
        for d in dtypes:
            _REG[name]["numerics"][d] = fn
        return fn
    return deco


SHAPES = [(1, 1), (1, 7), (32, 33), (128, 1), (7, 512), (77, 129), (128, 512), (127, 3)]


def _shapes(limit=None, itemsize=4, ntensors=3, sbuf_bytes=None):
    """The standard (partitions, free) list plus one case at the instruction's free-size limit (or the largest
    free size that the operands fit into SBUF at)."""
    out = list(SHAPES)
    if limit:
        fit = (sbuf_bytes or _SBUF_BUDGET) // (ntensors * itemsize)
        out.append((2, min(limit, fit)))
    return out


_SBUF_BUDGET = 176 * 1024      # bytes per partition the operands of one case may use (trn1 SBUF: 192 KiB)


def _itemsize(dt):
    return np.dtype(NP[dt]).itemsize


def _place(i, n, allowed, f, dt, psum_fmax=4096):
    """Placement of n operands for case i, cycling through ``allowed`` (tuples of 'sbuf'/'psum'); PSUM only while
    the PSUM operands fit its 16 KiB per partition and the Vector PSUM free limit."""
    combos = [c for c in allowed if c.count("psum") * f * 4 <= 12 * 1024 and ("psum" not in c or f <= psum_fmax)]
    if not combos:
        return ("sbuf",) * n
    return combos[i % len(combos)]


# -------------------------------------------------------------------------------- ALU op inputs/refs
ARITH = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "abs_max", "abs_min", "power", "mod",
         "fmod"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
           "logical_xor"]
BITVEC = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]


def _op_inputs(op, rng, shape, dt):
    """Operands for ALU op ``op`` in dtype ``dt`` inside its domain (results finite in fp8 e4m3)."""
    if op in BITVEC:
        ii = np.iinfo(NP[dt])
        if op in ("left_shift", "right_shift"):
            x = rng.integers(0, min(ii.max, 2 ** 20) // 256 + 1, size=shape)
            y = rng.integers(0, 8, size=shape)
        else:
            x = rng.integers(max(ii.min, -2 ** 30), min(ii.max, 2 ** 30) + 1, size=shape)
            y = rng.integers(max(ii.min, -2 ** 30), min(ii.max, 2 ** 30) + 1, size=shape)
        return _cast(x, dt), _cast(y, dt)
    if _is_int(dt):                              # integer data through the fp32 ALU: small non-negative values
        return _cast(rng.integers(0, 12, size=shape), dt), _cast(rng.integers(1, 12, size=shape), dt)
    if op in COMPARE:
        return _cast(rng.integers(-2, 3, size=shape), dt), _cast(rng.integers(-2, 3, size=shape), dt)
    if op == "divide":
        return _gen(rng, shape, dt), _gen(rng, shape, dt, "pm", (0.5, 4))
    if op == "power":
        return _gen(rng, shape, dt, 0.5, 2), _gen(rng, shape, dt, -2, 2)
    if op in ("mod", "fmod"):
        return _gen(rng, shape, dt, -8, 8), _gen(rng, shape, dt, "pm", (0.5, 3))
    return _gen(rng, shape, dt), _gen(rng, shape, dt)


def _bitvec_ref(op, x, y, dt):
    a, b = np.asarray(x).astype(np.int64), np.asarray(y).astype(np.int64)
    r = {"bitwise_and": a & b, "bitwise_or": a | b, "bitwise_xor": a ^ b, "left_shift": a << b,
         "right_shift": a >> b}[op]
    return f64(r.astype(NP[dt]))       # wraps to the dtype's width like the hardware's integer ALU


def _binary_eb(op, x, y, dt):
    if op in BITVEC:
        return EB(_bitvec_ref(op, x, y, dt))
    return eb_binary(op, EB(f64(x)), EB(f64(y)))


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


def _act_input(name, rng, shape, dt):
    r = ACT_RANGE.get(name, (-4.0, 4.0))
    if r[0] == "pm":
        return _gen(rng, shape, dt, "pm", r[1:])
    return _gen(rng, shape, dt, *r)


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


@_numerics("nisa.nc_matmul", ["float32", "bfloat16", "float16", "float8_e4m3"])
def _mm(dt, rng):
    nisa = _M["nisa"]
    cases = []
    specs = [(1, 1, 1, 1), (128, 128, 512, 1), (32, 13, 100, 2), (77, 128, 1, 1), (127, 1, 512, 3), (128, 64, 33, 1),
             (5, 7, 511, 1)]
    for i, (K, M, N, reps) in enumerate(specs):
        a = _gen(rng, (reps, K, M), dt, -2, 2)
        b = _gen(rng, (reps, K, N), dt, -2, 2)
        offset = 0 if N > 256 else (i % 2) * (512 - N)     # dst placed at the end of its bank

        def thunk(a=a, b=b, K=K, M=M, N=N, reps=reps, offset=offset):
            def body(x, y):
                ps = _new((M, 512), "float32", "psum")
                d = ps[:, offset:offset + N]
                for r in range(reps):
                    tx, ty = _ld(x[r]), _ld(y[r])
                    nisa.nc_matmul(d, tx, ty, accumulate=None if r == 0 else True)
                sb = _new((M, N), "float32")
                nisa.tensor_copy(sb, d)
                return (_st(sb),)
            got, = _sim(body, a, b)
            A, B = f64(a), f64(b)
            ref = sum(A[r].T @ B[r] for r in range(reps))
            # K products (exact in fp32 for <=12-bit significands; one rounding for fp32) summed in fp32 per
            # matmul, then reps PSUM accumulations: gamma_{reps*K+1} * sum |a||b| (Higham 3.1)
            n = reps * K + 1
            mag = sum(np.abs(A[r]).T @ np.abs(B[r]) for r in range(reps))
            return [("dst", got, ref, n * U32 / (1 - n * U32) * mag + TINY)]
        cases.append((f"K={K} M={M} N={N} accumulate x{reps} psum offset={offset}", thunk))
    # PE-array tiling: a 64x64 (or 32x32) tile of the array at a tile position computes the same product
    for (K, M, N), size, pos in [((64, 64, 512), (64, 64), (64, 0)), ((32, 17, 100), (32, 32), (96, 32)),
                                 ((64, 128, 7), (64, 128), (0, 0))]:
        a = _gen(rng, (K, M), dt, -2, 2)
        b = _gen(rng, (K, N), dt, -2, 2)

        def tiled(a=a, b=b, K=K, M=M, N=N, size=size, pos=pos):
            def body(x, y):
                ps = _new((M, N), "float32", "psum")
                nisa.nc_matmul(ps, _ld(x), _ld(y), tile_position=pos, tile_size=size)
                sb = _new((M, N), "float32")
                nisa.tensor_copy(sb, ps)
                return (_st(sb),)
            got, = _sim(body, a, b, target="trn2")        # 32-row tiles: NeuronCore-v3 and later
            A, B = f64(a), f64(b)
            n = K + 1
            return [("dst", got, A.T @ B, n * U32 / (1 - n * U32) * (np.abs(A).T @ np.abs(B)) + TINY)]
        cases.append((f"K={K} M={M} N={N} tile_size={size} tile_position={pos}", tiled))
    if dt == "float8_e4m3":
        for K, M, N in [(1, 1, 1), (128, 128, 512), (64, 33, 100)]:
            a = _gen(rng, (K, 2, M), dt, -2, 2)
            b = _gen(rng, (K, 2, N), dt, -2, 2)

            def thunk(a=a, b=b, K=K, M=M, N=N):
                def body(x, y):
                    ps = _new((M, N), "float32", "psum")
                    nisa.nc_matmul(ps, _ld(x), _ld(y), perf_mode="double_row")
                    sb = _new((M, N), "float32")
                    nisa.tensor_copy(sb, ps)
                    return (_st(sb),)
                got, = _sim(body, a, b, target="trn2")      # fp8 double-row: trn2 and later
                A = f64(a).transpose(1, 0, 2).reshape(2 * K, M)
                B = f64(b).transpose(1, 0, 2).reshape(2 * K, N)
                n = 2 * K
                return [("dst", got, A.T @ B, n * U32 / (1 - n * U32) * (np.abs(A).T @ np.abs(B)) + TINY)]
            cases.append((f"double_row K=2x{K} M={M} N={N}", thunk))
    return cases


@_numerics("nisa.nc_transpose", FLOATS)
def _ncT(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f, eng) in enumerate([(1, 1, "tensor"), (128, 128, "tensor"), (77, 13, "tensor"), (1, 128, "tensor"),
                                     (1, 1, "vector"), (32, 32, "vector"), (7, 31, "vector"), (32, 1, "vector")]):
        x = _gen(rng, (p, f), dt)
        pl = ("sbuf", "psum") if eng == "tensor" else [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")][i % 3]

        def thunk(x=x, p=p, f=f, eng=eng, pl=pl):
            def body(a):
                ta = _ld(a, pl[0])
                d = _new((f, p), dt, pl[1])
                nisa.nc_transpose(d, ta, engine=getattr(nisa, f"{eng}_engine"))
                return (_st(d),)
            got, = _sim(body, x)
            return [("dst", got, f64(x).T, 0.0)]
        cases.append((f"[{p},{f}] {eng} engine {pl}", thunk))
    return cases


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


# ============================================================================================= rules
class Rule:
    """A kernel breaking one documented rule: it must raise NkiValidationError naming ``operand`` (or, when
    ``operand`` is None, naming the instruction).  Rules run on trn2 unless they name another target (the limits
    differ per target: PSUM bf16 accumulation on trn3, no double-row or range_select on trn1)."""

    def __init__(self, desc, body, operand, arrays=(), target="trn2", instr=None, match=None):
        self.desc, self.body, self.operand, self.arrays, self.target, self.instr, self.match = \
            desc, body, operand, arrays, target, instr, match


def _R(name, *rules):
    _REG.setdefault(name, {})["rules"] = lambda: list(rules)


def _nd(shape, dt="float32", space="sbuf"):
    return _new(shape, dt, space)


def _define_rules():
    nisa, nl = _M["nisa"], _M["nl"]
    mm = nisa.nc_matmul

    def mm_body(s_shape, m_shape, d_shape, sdt="bfloat16", mdt="bfloat16", ddt="float32", s_sp="sbuf",
                m_sp="sbuf", d_sp="psum", dslice=None, **kw):
        def body():
            s, m = _nd(s_shape, sdt, s_sp), _nd(m_shape, mdt, m_sp)
            d = _nd(d_shape, ddt, d_sp)
            mm(d if dslice is None else d[:, dslice[0]:dslice[1]], s, m, **kw)
        return body

    def wide_view(dt="bfloat16"):
        a = _nd((128, 2, 64), dt)
        return a.ap([[64, 256], [1, 64]])      # a view spanning 256 partitions

    _R("nisa.nc_matmul",
       Rule("stationary in PSUM (Tensor Engine reads SBUF only)", mm_body((128, 128), (128, 512), (128, 512),
                                                                          s_sp="psum"), "stationary"),
       Rule("moving in PSUM", mm_body((128, 128), (128, 64), (128, 64), m_sp="psum"), "moving"),
       Rule("dst in SBUF (Tensor Engine writes PSUM only)", mm_body((128, 128), (128, 512), (128, 512), d_sp="sbuf"),
            "dst"),
       Rule("contraction over 128 partitions (a 256-partition stationary view)",
            lambda: mm(_nd((64, 64), "float32", "psum"), wide_view(), _nd((128, 64), "bfloat16")), "stationary"),
       Rule("contraction over the PE tile's rows (tile_size (64, 128), K=128)",
            mm_body((128, 64), (128, 64), (64, 64), tile_position=(0, 0), tile_size=(64, 128)), "stationary"),
       Rule("stationary free size 129 > 128", mm_body((128, 129), (128, 64), (128, 64)), "stationary"),
       Rule("moving free size 513 > 512", mm_body((128, 128), (128, 513), (128, 513)), "moving"),
       Rule("output crosses a 2 KiB PSUM bank", mm_body((128, 128), (128, 512), (128, 1024), dslice=(256, 768)), "dst"),
       Rule("output of 1 element at the end of a bank plus one", mm_body((1, 1), (1, 2), (1, 1024), dslice=(511, 513)),
            "dst"),
       Rule("fp32 stationary with bf16 moving", mm_body((128, 128), (128, 64), (128, 64), sdt="float32"), "moving"),
       Rule("integer operands", mm_body((128, 128), (128, 64), (128, 64), sdt="int32", mdt="int32"), "stationary"),
       Rule("bf16 PSUM output on trn2", mm_body((128, 128), (128, 64), (128, 64), ddt="bfloat16"), "dst",
            target="trn2"),
       Rule("contraction sizes differ", mm_body((128, 128), (64, 64), (128, 64)), "moving"),
       Rule("dst shape is not [M, N]", mm_body((128, 64), (128, 64), (64, 32)), "dst"),
       Rule("stationary start partition 16 with 48 partitions",
            lambda: mm(_nd((64, 64), "float32", "psum"), _nd((128, 64), "bfloat16")[16:64],
                       _nd((48, 64), "bfloat16")), "stationary"),
       Rule("double_row on trn1", mm_body((128, 2, 64), (128, 2, 256), (64, 256), sdt="float8_e4m3",
                                          mdt="float8_e4m3", perf_mode="double_row"), "perf_mode", target="trn1"),
       Rule("double_row with bf16 inputs", mm_body((128, 2, 64), (128, 2, 256), (64, 256),
                                                   perf_mode="double_row"), "stationary"),
       Rule("tile_position not a multiple of tile_size",
            mm_body((64, 64), (64, 512), (64, 512), tile_position=(32, 0), tile_size=(64, 64)), "tile_position[0]"))

    _R("nisa.nc_transpose",
       Rule("vector engine over 32x32", lambda: nisa.nc_transpose(_nd((64, 64)), _nd((64, 64)),
                                                                   engine=nisa.vector_engine), "data"),
       Rule("dtype mismatch", lambda: nisa.nc_transpose(_nd((64, 128), "float32", "psum"), _nd((128, 64), "bfloat16")),
            "dst"),
       Rule("tensor engine output to SBUF", lambda: nisa.nc_transpose(_nd((64, 128)), _nd((128, 64)),
                                                                       engine=nisa.tensor_engine), "dst"),
       Rule("tensor engine input in PSUM", lambda: nisa.nc_transpose(_nd((64, 128), space="psum"),
                                                                      _nd((128, 64), space="psum"),
                                                                      engine=nisa.tensor_engine), "data"),
       Rule("dst shape not the transpose", lambda: nisa.nc_transpose(_nd((16, 16)), _nd((16, 8))), "dst"))

    def tt(d, a, b, op=None, **kw):
        return lambda: nisa.tensor_tensor(d(), a(), b(), op=op or nl.add, **kw)

    _R("nisa.tensor_tensor",
       Rule("operand view over 128 partitions", lambda: (lambda v: nisa.tensor_tensor(v, v, v, op=nl.add))(
           wide_view("float32")), "dst"),
       Rule("both inputs in PSUM", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64), space="psum"),
                                      lambda: _nd((128, 64), space="psum")), "data2"),
       Rule("free sizes differ", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 32))), "data2"),
       Rule("partition counts differ", tt(lambda: _nd((128, 64)), lambda: _nd((64, 64)), lambda: _nd((128, 64))),
            "data1"),
       Rule("bitwise op on float tiles", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 64)),
                                            op=nl.bitwise_and), "dst"),
       Rule("on the tensor engine", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 64)),
                                       engine=nisa.tensor_engine), "engine"),
       Rule("GpSimd (power) reading PSUM", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64), space="psum"),
                                              lambda: _nd((128, 64)), op=nl.power), "data1"),
       Rule("input in HBM", lambda: nisa.tensor_tensor(_nd((128, 64)), _nd((128, 64), space="hbm"), _nd((128, 64)),
                                                       op=nl.add), "data1"),
       Rule("start partition 16 with 48 partitions", lambda: (lambda a: nisa.tensor_tensor(a[16:64], a[16:64],
                                                                                           a[16:64], op=nl.add))(
           _nd((128, 64))), "dst"),
       Rule("unknown ALU op", tt(lambda: _nd((128, 64)), lambda: _nd((128, 64)), lambda: _nd((128, 64)),
                                 op="frobnicate"), "op"))

    _R("nisa.memset",
       Rule("48 partitions starting at 16", lambda: nisa.memset(_nd((128, 64))[16:64], 0.0), "dst"),
       Rule("96 partitions starting at 32", lambda: nisa.memset(_nd((128, 64))[32:128], 0.0), "dst"),
       Rule("20 partitions crossing a 32-partition quadrant (16..36)", lambda: nisa.memset(_nd((128, 64))[16:36], 0.0),
            "dst"),
       Rule("PSUM free size 4097 > 4096", lambda: nisa.memset(_nd((128, 4097), "bfloat16", "psum"), 0.0), "dst"),
       Rule("SBUF free size 65537 > 65536", lambda: nisa.memset(_nd((2, 65537), "uint8"), 0), "dst"),
       Rule("dst in HBM", lambda: nisa.memset(_nd((128, 64), space="hbm"), 0.0), "dst"),
       Rule("GpSimd writing PSUM", lambda: nisa.memset(_nd((128, 64), space="psum"), 0.0, engine=nisa.gpsimd_engine),
            "dst"),
       Rule("on the tensor engine", lambda: nisa.memset(_nd((128, 64)), 0.0, engine=nisa.tensor_engine), "engine"))

    _R("nisa.tensor_copy",
       Rule("GpSimd reading PSUM", lambda: nisa.tensor_copy(_nd((128, 64)), _nd((128, 64), space="psum"),
                                                            engine=nisa.gpsimd_engine), "src"),
       Rule("dst in HBM", lambda: nisa.tensor_copy(_nd((128, 64), space="hbm"), _nd((128, 64))), "dst"),
       Rule("partition counts differ", lambda: nisa.tensor_copy(_nd((64, 64)), _nd((128, 64))), "src"),
       Rule("free sizes differ", lambda: nisa.tensor_copy(_nd((128, 64)), _nd((128, 65))), "src"),
       Rule("SBUF free size 65537", lambda: nisa.tensor_copy(_nd((1, 65537), "uint8"), _nd((1, 65537), "uint8")),
            "dst"))

    _R("nisa.tensor_scalar",
       Rule("operand0 not [P, 1]", lambda: nisa.tensor_scalar(_nd((128, 64)), _nd((128, 64)), nl.add, _nd((128, 2))),
            "operand0"),
       Rule("op1 without operand1", lambda: nisa.tensor_scalar(_nd((128, 64)), _nd((128, 64)), nl.add, 1.0,
                                                               op1=nl.multiply), "operand1"),
       Rule("bitwise op1 after arithmetic op0", lambda: nisa.tensor_scalar(_nd((128, 64), "int32"),
                                                                           _nd((128, 64), "int32"), nl.add, 1,
                                                                           op1=nl.bitwise_and, operand1=3), "op1"),
       Rule("GpSimd reading PSUM", lambda: nisa.tensor_scalar(_nd((128, 64)), _nd((128, 64), space="psum"), nl.add,
                                                              1.0, engine=nisa.gpsimd_engine), "data"))

    _R("nisa.activation",
       Rule("bias not [P, 1]", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 64)), bias=_nd((64, 1))),
            "bias"),
       Rule("data in HBM", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 64), space="hbm")), "data"),
       Rule("unknown function", lambda: nisa.activation(_nd((128, 64)), "frobnicate", _nd((128, 64))), "op"),
       Rule("reduce_res not [P, 1]", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 64)), reduce_op=nl.add,
                                                             reduce_res=_nd((128, 2))), "reduce_res"),
       Rule("free sizes differ", lambda: nisa.activation(_nd((128, 64)), nl.exp, _nd((128, 32))), "data"))
    _R("nisa.activation_reduce",
       Rule("reduce_res not [P, 1]", lambda: nisa.activation_reduce(_nd((128, 64)), nl.exp, _nd((128, 64)), nl.add,
                                                                    _nd((64, 1))), "reduce_res"))
    _R("nisa.exponential",
       Rule("max_value not [P, 1]", lambda: nisa.exponential(_nd((128, 64)), _nd((128, 64)), max_value=_nd((128, 4))),
            "max_value"),
       Rule("src in HBM", lambda: nisa.exponential(_nd((128, 64)), _nd((128, 64), space="hbm")), "src"))
    _R("nisa.reciprocal",
       Rule("on the GpSimd engine", lambda: nisa.reciprocal(_nd((128, 64)), _nd((128, 64)), engine=nisa.gpsimd_engine),
            "engine"),
       Rule("free sizes differ", lambda: nisa.reciprocal(_nd((128, 64)), _nd((128, 8))), "data"))
    _R("nisa.scalar_tensor_tensor",
       Rule("operand1 free size differs", lambda: nisa.scalar_tensor_tensor(_nd((128, 64)), _nd((128, 64)), nl.add,
                                                                            1.0, nl.add, _nd((128, 32))), "operand1"),
       Rule("operand0 not [P, 1]", lambda: nisa.scalar_tensor_tensor(_nd((128, 64)), _nd((128, 64)), nl.add,
                                                                     _nd((128, 3)), nl.add, _nd((128, 64))),
            "operand0"))
    _R("nisa.tensor_tensor_scan",
       Rule("both inputs in PSUM", lambda: nisa.tensor_tensor_scan(_nd((128, 64)), _nd((128, 64), space="psum"),
                                                                   _nd((128, 64), space="psum"), 0.0, nl.multiply,
                                                                   nl.add), "data1"),
       Rule("initial not [P, 1]", lambda: nisa.tensor_tensor_scan(_nd((128, 64)), _nd((128, 64)), _nd((128, 64)),
                                                                  _nd((128, 2)), nl.multiply, nl.add), "initial"))
    _R("nisa.tensor_scalar_reduce",
       Rule("reduce_res not [P, 1]", lambda: nisa.tensor_scalar_reduce(_nd((128, 64)), _nd((128, 64)), nl.add, 1.0,
                                                                       nl.add, reduce_res=_nd((128, 2))), "reduce_res"))
    _R("nisa.tensor_reduce",
       Rule("reducing the partition axis", lambda: nisa.tensor_reduce(_nd((1, 64)), nl.add, _nd((128, 64)), axis=0),
            "axis"),
       Rule("axis not the last free dims", lambda: nisa.tensor_reduce(_nd((128, 8)), nl.add, _nd((128, 4, 8)), axis=1),
            "axis"),
       Rule("dst size wrong", lambda: nisa.tensor_reduce(_nd((128, 2)), nl.add, _nd((128, 64)), axis=1), "dst"),
       Rule("not a reduction op", lambda: nisa.tensor_reduce(_nd((128, 1)), nl.subtract, _nd((128, 64)), axis=1),
            "op"))
    _R("nisa.tensor_copy_predicated",
       Rule("float predicate", lambda: nisa.tensor_copy_predicated(_nd((128, 64)), _nd((128, 64)), _nd((128, 64))),
            "predicate"),
       Rule("src dtype differs from dst", lambda: nisa.tensor_copy_predicated(
           _nd((128, 64)), _nd((128, 64), "bfloat16"), _nd((128, 64), "uint8")), "src"))
    _R("nisa.bn_stats",
       Rule("free size 513 > 512 (bn_stats_fmax)", lambda: nisa.bn_stats(_nd((128, 6)), _nd((128, 513))), "data"),
       Rule("dst not 6 per partition", lambda: nisa.bn_stats(_nd((128, 4)), _nd((128, 64))), "dst"))
    _R("nisa.bn_aggr",
       Rule("free size not a multiple of 3", lambda: nisa.bn_aggr(_nd((128, 2)), _nd((128, 7))), "data"),
       Rule("dst not 2 per partition", lambda: nisa.bn_aggr(_nd((128, 3)), _nd((128, 6))), "dst"))
    _R("nisa.iota",
       Rule("dst in PSUM (GpSimd)", lambda: nisa.iota(_nd((128, 64), "int32", "psum"), [[1, 64]]), "dst"),
       Rule("pattern does not cover dst", lambda: nisa.iota(_nd((128, 64), "int32"), [[1, 32]]), "pattern"),
       Rule("more than 4 pattern entries", lambda: nisa.iota(_nd((128, 32), "int32"), [[1, 2]] * 5), "pattern"))
    _R("nisa.affine_select",
       Rule("on_true_tile in PSUM (GpSimd)", lambda: nisa.affine_select(_nd((128, 64)), [[-1, 64]], 1,
                                                                        _nd((128, 64), space="psum"), 0.0),
            "on_true_tile"),
       Rule("dst in PSUM (GpSimd)", lambda: nisa.affine_select(_nd((128, 64), space="psum"), [[-1, 64]], 1,
                                                               _nd((128, 64)), 0.0), "dst"),
       Rule("on_true_tile shape differs", lambda: nisa.affine_select(_nd((128, 64)), [[-1, 64]], 1, _nd((128, 32)),
                                                                     0.0), "on_true_tile"))
    _R("nisa.max8",
       Rule("src free size 7 < 8", lambda: nisa.max8(_nd((128, 8)), _nd((128, 7))), "src"),
       Rule("dst not 8 per partition", lambda: nisa.max8(_nd((128, 4)), _nd((128, 64))), "dst"))
    _R("nisa.nc_find_index8",
       Rule("float index dst", lambda: nisa.nc_find_index8(_nd((128, 8)), _nd((128, 64)), _nd((128, 8))), "dst"),
       Rule("vals not 8 per partition", lambda: nisa.nc_find_index8(_nd((128, 8), "uint32"), _nd((128, 64)),
                                                                    _nd((128, 4))), "vals"))
    _R("nisa.nc_match_replace8",
       Rule("dst free size differs", lambda: nisa.nc_match_replace8(_nd((128, 32)), _nd((128, 64)), _nd((128, 8)),
                                                                    0.0), "dst"))
    _R("nisa.nc_stream_shuffle",
       Rule("mask of 16 entries", lambda: nisa.nc_stream_shuffle(_nd((32, 8)), _nd((32, 8)), list(range(16))),
            "shuffle_mask"),
       Rule("mask entry 40", lambda: nisa.nc_stream_shuffle(_nd((32, 8)), _nd((32, 8)), [40] + [0] * 31),
            "shuffle_mask"),
       Rule("dtype mismatch", lambda: nisa.nc_stream_shuffle(_nd((32, 8), "bfloat16"), _nd((32, 8)), list(range(32))),
            "dst"))
    _R("nisa.select_reduce",
       Rule("predicate partitions differ", lambda: nisa.select_reduce(_nd((128, 64)), _nd((64, 64), "uint8"),
                                                                      _nd((128, 64)), 0.0), "predicate"))
    _R("nisa.range_select",
       Rule("not available on trn1", lambda: nisa.range_select(_nd((128, 64)), _nd((128, 64)), nl.greater_equal,
                                                               nl.less, 0.0, 8.0), None, target="trn1",
            instr="range_select"),
       Rule("bound0 not [P, 1]", lambda: nisa.range_select(_nd((128, 64)), _nd((128, 64)), nl.greater_equal, nl.less,
                                                           _nd((128, 2)), 8.0), "bound0"))
    _R("nisa.dma_copy",
       Rule("element counts differ", lambda: nisa.dma_copy(_nd((128, 32)), _nd((128, 64), space="hbm")), "dst"))
    _R("nisa.dma_transpose",
       Rule("dst in HBM", lambda: nisa.dma_transpose(_nd((64, 128), space="hbm"), _nd((128, 64), space="hbm")), "dst"),
       Rule("hardware DGE moves 2-byte dtypes only",
            lambda: nisa.dma_transpose(_nd((64, 16)), _nd((16, 64), space="hbm"), dge_mode=nisa.dge_mode.hwdge),
            "src"),
       Rule("unsupported axes", lambda: nisa.dma_transpose(_nd((64, 128)), _nd((128, 64), space="hbm"), axes=(0, 1)),
            "axes"))
    _R("nl.ndarray",
       Rule("256 partitions in SBUF", lambda: nl.ndarray((256, 64), nl.float32, buffer=nl.sbuf), "shape",
            match="number of partitions 256 exceed architecture limitation of 128"),
       Rule("129 partitions in PSUM", lambda: nl.ndarray((129, 64), nl.float32, buffer=nl.psum), "shape",
            match="number of partitions 129 exceed architecture limitation of 128"),
       Rule("over SBUF capacity", lambda: _both_live((128, 32 * 1024), nl.sbuf), "shape",
            match="SBUF allocation of .* does not fit"),
       Rule("over PSUM capacity", lambda: _both_live((128, 4096), nl.psum), "shape",
            match="PSUM allocation of .* does not fit"))


def _both_live(shape, buffer):
    """Two tiles live at the same time in program order (capacity counts live ranges, not Python objects)."""
    nisa, nl = _M["nisa"], _M["nl"]
    a, b = (nl.ndarray(shape, nl.float32, buffer=buffer) for _ in range(2))
    nisa.memset(a, 0.0)
    nisa.memset(b, 1.0)
    nisa.tensor_copy(a, b)


# ---------------------------------------------------------------------------------- not implemented
def _discover_unsupported():
    """nisa / nl names trnsim declares but does not implement (they raise NotImplementedError when called)."""
    out = {}
    for prefix, mod in (("nisa", _M["nisa"]), ("nl", _M["nl"])):
        for n in sorted(dir(mod)):
            f = getattr(mod, n)
            if n.startswith("_") or not callable(f) or isinstance(f, type) or \
                    not getattr(f, "_trnsim_unsupported", False):
                continue
            try:
                f()
            except NotImplementedError as e:
                out[f"{prefix}.{n}"] = str(e).splitlines()[0]
            except Exception:
                pass
    return out


_DEFINED = []


def _ensure():
    _setup()
    if not _DEFINED:
        from . import nki_suite_mx  # noqa: F401  (registers the issue-13 instructions' cases)
        _define_rules()
        for name, reason in _discover_unsupported().items():
            _REG.setdefault(name, {})["skip"] = reason
        _DEFINED.append(True)


def list_nki_names() -> list[str]:
    """Every instruction/op name the suite covers (including the declared-but-unimplemented ones it skips)."""
    _ensure()
    return sorted(_REG)


# --------------------------------------------------------------------------------------------- running
_ORDER = {"mismatch": 3, "error": 2, "pass": 1, "skip": 0}


def _first_line(e):
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0] if s else ''}"[:300]


def _run_numerics(name, dt, gen):
    counts = {"pass": 0, "mismatch": 0, "error": 0, "skip": 0}
    details = {}
    rng = np.random.default_rng(zlib.crc32(f"{name}/{dt}".encode()))
    try:
        cases = gen(dt, rng)
    except NotImplementedError as e:
        return counts | {"skip": 1}, {"skip": _first_line(e)}
    except Exception as e:      # the generator itself failed: one error for the group
        return counts | {"error": 1}, {"error": f"case generation: {_first_line(e)}"}
    for desc, thunk in cases:
        try:
            checks = thunk()
        except NotImplementedError as e:
            counts["skip"] += 1
            details.setdefault("skip", f"{desc}: {_first_line(e)}")
            continue
        except Exception as e:
            counts["error"] += 1
            details.setdefault("error", f"{desc}: {_first_line(e)}")
            continue
        bad = None
        for label, got, ref, tol in checks:
            bad = _check(label, got, ref, tol)
            if bad:
                break
        if bad:
            counts["mismatch"] += 1
            details.setdefault("mismatch", f"{desc}: {bad}")
        else:
            counts["pass"] += 1
    return counts, details


def _run_rules(name, rules):
    err_t = _M["err"]
    counts = {"pass": 0, "mismatch": 0, "error": 0, "skip": 0}
    details = {}
    for r in rules:
        def body(*_):
            r.body()
        try:
            _sim(body, target=r.target)
        except err_t as e:
            msg = str(e)
            if r.operand is None:
                ok = e.instruction == r.instr and msg.startswith(r.instr)
                what = f"the instruction {r.instr}"
            elif r.match is not None:       # allocation errors name the shape in words, not as 'operand'
                ok = e.operand == r.operand and re.search(r.match, msg) is not None
                what = f"operand {r.operand} (message matching {r.match!r})"
            else:
                ok = e.operand == r.operand and f"'{r.operand}'" in msg
                what = f"operand '{r.operand}'"
            if ok:
                counts["pass"] += 1
            else:
                counts["mismatch"] += 1
                details.setdefault("mismatch", f"rule {r.desc!r}: raised, but does not name {what}: {msg[:200]}")
            continue
        except NotImplementedError as e:
            counts["skip"] += 1
            details.setdefault("skip", f"rule {r.desc!r}: {_first_line(e)}")
            continue
        except Exception as e:
            counts["mismatch"] += 1
            details.setdefault("mismatch", f"rule {r.desc!r}: raised {_first_line(e)} instead of NkiValidationError")
            continue
        counts["mismatch"] += 1
        details.setdefault("mismatch", f"rule {r.desc!r}: no error raised")
    return counts, details


def _record(name, dt, mode, counts, details, seconds):
    present = [s for s in ("mismatch", "error", "pass") if counts.get(s)]
    status = present[0] if present else "skip"
    detail = details.get(status, "") if status != "pass" else ""
    if status == "skip" and not detail:
        detail = details.get("skip", "")
    return {"suite": "nki", "name": name, "dtype": dt, "mode": mode, "status": status,
            "counts": {k: int(v) for k, v in counts.items()}, "samples": int(sum(counts.values())),
            "detail": detail, "seconds": round(float(seconds), 4)}


def _groups(pattern, dtypes):
    _ensure()
    out = []
    for name in sorted(_REG):
        if pattern and not fnmatch.fnmatchcase(name, pattern):
            continue
        ent = _REG[name]
        if "skip" in ent and "numerics" not in ent and "rules" not in ent:
            out.append((name, "-", "numerics", None))
            continue
        for dt in sorted(ent.get("numerics", {})):
            if dtypes is None or dt in dtypes:
                out.append((name, dt, "numerics", ent["numerics"][dt]))
        if "rules" in ent:
            out.append((name, "-", "rule", ent["rules"]))
    return out


def run_nki(pattern: str | None = None, dtypes: list[str] | None = None, progress=None) -> list[dict]:
    """Run the NKI conformance groups whose name matches ``pattern`` (fnmatch) for ``dtypes`` (default: every dtype
    each instruction allows); one record per name x dtype x mode."""
    groups = _groups(pattern, set(dtypes) if dtypes else None)
    records = []
    import warnings
    for i, (name, dt, mode, gen) in enumerate(groups):
        t0 = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if gen is None:
                counts = {"pass": 0, "mismatch": 0, "error": 0, "skip": 1}
                details = {"skip": _REG[name]["skip"]}
            elif mode == "rule":
                counts, details = _run_rules(name, gen())
            else:
                counts, details = _run_numerics(name, dt, gen)
        records.append(_record(name, dt, mode, counts, details, time.perf_counter() - t0))
        if progress is not None:
            progress(i + 1, len(groups), name)
    return records


if __name__ == "__main__":      # python -m conformance.nki_suite [PATTERN]
    import sys
    t = time.perf_counter()
    recs = run_nki(sys.argv[1] if len(sys.argv) > 1 else None)
    tot = {}
    for r in recs:
        tot[r["status"]] = tot.get(r["status"], 0) + 1
        if r["status"] in ("mismatch", "error"):
            print(f"{r['name']} {r['dtype']} {r['mode']} {r['status']}: {r['detail']}")
    print(f"{len(recs)} groups, {len({r['name'] for r in recs})} names, {sum(r['samples'] for r in recs)} cases, "
          f"{tot}, {time.perf_counter() - t:.1f}s")
