"""The ALU and activation functions of the Vector, Scalar and GpSimd engines, as float32 NumPy functions.

Front ends pass an operator either as a name ("add"), a NumPy ufunc (np.add) or an object carrying
``_trnsim_op`` (the ``nl.*`` functions); :func:`alu` and :func:`activation_fn` resolve all three.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["alu", "activation_fn", "op_name", "BITVEC_OPS", "INT_ALU", "INT32_DTYPES", "REDUCE_IDENTITY",
           "REDUCE_OPS", "UNARY_ALU", "reduce_fn"]

_f32 = np.float32


def _unary_safe(f, a):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return f(a)


def _div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def _cmp(f):
    return lambda a, b: f(a, b).astype(_f32)


def _abs_max(a, b):
    return np.maximum(np.abs(a), np.abs(b))


def _abs_min(a, b):
    return np.minimum(np.abs(a), np.abs(b))


def _pow(a, b):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return np.power(a, b)


def _mod(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mod(a, b)


def _fmod(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.fmod(a, b)


# binary arithmetic ops: computed in float32
_ALU = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _div,
    "maximum": np.maximum, "minimum": np.minimum, "abs_max": _abs_max, "abs_min": _abs_min,
    "power": _pow, "mod": _mod, "fmod": _fmod,
    "equal": _cmp(np.equal), "not_equal": _cmp(np.not_equal), "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal), "greater": _cmp(np.greater), "greater_equal": _cmp(np.greater_equal),
    "logical_and": _cmp(lambda a, b: np.logical_and(a != 0, b != 0)),
    "logical_or": _cmp(lambda a, b: np.logical_or(a != 0, b != 0)),
    "logical_xor": _cmp(lambda a, b: np.logical_xor(a != 0, b != 0)),
    "bypass": lambda a, b: a,
    # the ALU's unary arithmetic operators (NKI ISA operator table, "Arithmetic Unary"): they act on the first
    # input and ignore the second (so tensor_scalar(op0=nl.abs, operand0=0.0) is |x|)
    "abs": lambda a, b: np.abs(a), "square": lambda a, b: np.square(a),
    "relu": lambda a, b: np.maximum(a, _f32(0)),
    "rsqrt": lambda a, b: _unary_safe(lambda x: (_f32(1) / np.sqrt(x)).astype(_f32), a),
    "reciprocal": lambda a, b: _unary_safe(lambda x: (_f32(1) / x).astype(_f32), a),
}
UNARY_ALU = frozenset(("abs", "square", "relu", "rsqrt", "reciprocal", "invert"))


def _int_div(a, b):
    """Integer division truncating toward zero (native integer division: -7 / 2 is -3), on int64 arrays whose
    divisors the caller checked to be nonzero."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


# arithmetic ops in native 32-bit integer math: "When all input/output tiles are int32 or uint32, the operation
# defaults to GpSimd Engine, which uses native integer arithmetic. This ensures exact results for all 32-bit
# integer values" (NKI ISA reference, nki.isa.tensor_tensor, "int32/uint32 types"; aws-neuron-sdk
# nki/api/nki/isa/__init__.py).  Computed here in int64 (exact for every 32-bit operand pair) and written back
# wrapping to 32 bits, as 32-bit integer arithmetic does (NKI reference, nki.isa.NkiScalar: "arithmetic that
# outgrows 32 bits wraps").  Division truncates toward zero, as integer division does, with no float detour:
# int32 2224 / 38 is 58 (fp32 58.526 rounded to nearest would be 59; nki-samples' resize_nearest indexes with it)
INT_ALU = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _int_div,
           "maximum": np.maximum, "minimum": np.minimum}
INT32_DTYPES = frozenset(("int32", "uint32"))
# bit-vector ops: computed on the integer bits
BITVEC_OPS = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "invert": lambda a, b: np.invert(a),
}

_NP_NAMES = {"add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
             "true_divide": "divide", "maximum": "maximum", "minimum": "minimum", "power": "power",
             "equal": "equal", "not_equal": "not_equal", "less": "less", "less_equal": "less_equal",
             "greater": "greater", "greater_equal": "greater_equal", "logical_and": "logical_and",
             "logical_or": "logical_or", "logical_xor": "logical_xor", "bitwise_and": "bitwise_and",
             "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "left_shift": "left_shift",
             "right_shift": "right_shift", "exp": "exp", "tanh": "tanh", "sqrt": "sqrt", "log": "log",
             "abs": "abs", "absolute": "abs", "negative": "negative", "sin": "sin", "cos": "cos",
             "reciprocal": "reciprocal", "square": "square", "sign": "sign", "ceil": "ceil", "floor": "floor",
             "trunc": "trunc", "arctan": "arctan", "tan": "tan", "mod": "mod", "remainder": "mod",
             "fmod": "fmod", "sum": "add", "max": "maximum", "min": "minimum", "amax": "maximum",
             "amin": "minimum", "prod": "multiply"}


def op_name(op) -> str:
    """The canonical name of an operator given as an ``nl`` function, a NumPy ufunc or a string."""
    if op is None:
        return "bypass"
    name = getattr(op, "_trnsim_op", None)
    if name is not None:
        return name
    if isinstance(op, str):
        return op
    n = getattr(op, "__name__", None)
    if n in _NP_NAMES:
        return _NP_NAMES[n]
    if n is not None:
        return n
    return str(op)


def alu(op):
    """``(name, fn, is_bitvec)`` for a binary ALU op, or raise ``KeyError`` naming the op."""
    name = op_name(op)
    if name in _ALU:
        return name, _ALU[name], False
    if name in BITVEC_OPS:
        return name, BITVEC_OPS[name], True
    raise KeyError(name)


def _gelu(x):
    erf = np.vectorize(math.erf, otypes=[np.float64])
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))).astype(_f32)


def _erf(x):
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return erf(x.astype(np.float64)).astype(_f32)


def _gelu_tanh(x):
    return (0.5 * x * (1 + np.tanh(_f32(math.sqrt(2 / math.pi)) * (x + _f32(0.044715) * x * x * x)))).astype(_f32)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(_f32)


def _gelu_sigmoid(x):
    return (x * _sigmoid(_f32(1.702) * x)).astype(_f32)


def _gelu_dx(x):
    x64 = x.astype(np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    cdf = 0.5 * (1 + erf(x64 / math.sqrt(2)))
    pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi)
    return (cdf + x64 * pdf).astype(_f32)


def _silu(x):
    return (x * _sigmoid(x)).astype(_f32)


def _silu_dx(x):
    s = _sigmoid(x)
    return (s * (1 + x * (1 - s))).astype(_f32)


def _softplus(x):
    return np.logaddexp(_f32(0), x).astype(_f32)


def _mish(x):
    return (x * np.tanh(_softplus(x))).astype(_f32)


def _safe(f):
    def g(x):
        with np.errstate(all="ignore"):
            return f(x)
    return g


_ACT = {
    "copy": lambda x: x, "identity": lambda x: x, "bypass": lambda x: x,
    "exp": _safe(np.exp), "log": _safe(np.log), "sqrt": _safe(np.sqrt),
    "rsqrt": _safe(lambda x: (1.0 / np.sqrt(x)).astype(_f32)),
    "reciprocal": _safe(lambda x: (1.0 / x).astype(_f32)),
    "tanh": np.tanh, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, _f32(0)),
    "gelu": _gelu, "gelu_apprx_tanh": _gelu_tanh, "gelu_apprx_sigmoid": _gelu_sigmoid, "gelu_dx": _gelu_dx,
    "gelu_apprx_sigmoid_dx": lambda x: (_sigmoid(_f32(1.702) * x) * (1 + _f32(1.702) * x *
                                                                     (1 - _sigmoid(_f32(1.702) * x)))),
    "silu": _silu, "silu_dx": _silu_dx, "softplus": _softplus, "mish": _mish,
    "erf": _erf, "erf_dx": lambda x: (2 / math.sqrt(math.pi) * np.exp(-x * x)).astype(_f32),
    "square": np.square, "abs": np.abs, "negative": np.negative, "sign": np.sign,
    "sin": np.sin, "cos": np.cos, "tan": _safe(np.tan), "arctan": np.arctan,
    "ceil": np.ceil, "floor": np.floor, "trunc": np.trunc,
}


def activation_fn(op):
    """``(name, fn)`` for a unary activation function, or raise ``KeyError`` naming it."""
    name = op_name(op)
    if name in _ACT:
        return name, _ACT[name]
    raise KeyError(name)


REDUCE_IDENTITY = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf, "multiply": 1.0,
                   "abs_max": 0.0, "abs_min": np.inf}

# operators legal as a reduction (NKI ISA operator table, column "Legal Reduction op"; abs_max/abs_min are
# trnsim's extension kept for existing kernels)
# subtract is in the table too, but the order in which the accumulator combines is not published: refused
REDUCE_OPS = frozenset(("add", "multiply", "maximum", "minimum", "logical_and", "logical_or",
                        "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "abs_max", "abs_min"))


def _logical_reduce(uf):
    def red(a, axis, keepdims=False):
        return uf.reduce(a != 0, axis=axis, keepdims=keepdims).astype(_f32)
    return red




def reduce_fn(name):
    """NumPy reduction over axes for a reduce op name."""
    if name == "add":
        return np.sum
    if name == "maximum":
        return np.max
    if name == "minimum":
        return np.min
    if name == "multiply":
        return np.prod
    if name == "abs_max":
        return lambda a, axis, keepdims=False: np.max(np.abs(a), axis=axis, keepdims=keepdims)
    if name == "abs_min":
        return lambda a, axis, keepdims=False: np.min(np.abs(a), axis=axis, keepdims=keepdims)
    if name in ("logical_and", "logical_or", "logical_xor"):
        return _logical_reduce(getattr(np, name))
    if name in BITVEC_OPS and name.startswith("bitwise"):
        uf = BITVEC_OPS[name]
        return lambda a, axis, keepdims=False: uf.reduce(a, axis=axis, keepdims=keepdims)
    raise KeyError(name)
