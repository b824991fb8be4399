"""Stand-in for AWS's ``neuron_dtypes`` (not published on PyPI), as nki-library's tests and goldens use it.

``static_cast(array, dtype)`` converts NumPy data to a dtype by rounding to nearest even (ml_dtypes for bfloat16 and
the FP8 formats) and returns an array of that dtype; the ``*_x4`` formats pack four values of the last axis into one
element (element 0 in the low bits, trnsim's ``pack_x4``).  ``sizeinbytes`` and ``finfo`` as NumPy's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from trnsim.memory.dtypes import dtype_of, pack_x4


class _X4:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"neuron_dtypes.{self.name}"


float8_e4m3fn_x4 = _X4("float8_e4m3fn_x4")
float8_e5m2_x4 = _X4("float8_e5m2_x4")
float4_e2m1fn_x4 = _X4("float4_e2m1fn_x4")
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)


def _x4_name(dtype):
    if isinstance(dtype, _X4):
        return dtype.name
    if isinstance(dtype, str) and dtype.endswith("_x4"):
        return dtype
    return None


def static_cast(array, dtype):
    x4 = _x4_name(dtype)
    a = np.asarray(array)
    if x4 is not None:
        dt = dtype_of(x4)
        v = a.astype(np.float32)
        if v.shape[-1] % dt.packed:
            raise ValueError(f"static_cast to {x4}: last axis {v.shape[-1]} is not a multiple of {dt.packed}")
        return pack_x4(dt, v.reshape(v.shape[:-1] + (v.shape[-1] // dt.packed, dt.packed)))
    target = np.dtype(dtype)
    if target.kind in "iub" and a.dtype.kind == "f":
        a = np.rint(a.astype(np.float64))
    return a.astype(target)


def sizeinbytes(dtype):
    x4 = _x4_name(dtype)
    if x4 is not None:
        return dtype_of(x4).itemsize
    return np.dtype(dtype).itemsize


def finfo(dtype):
    return ml_dtypes.finfo(np.dtype(dtype))


bfloat = bfloat16


def is_float_type(dtype):
    """True for floating-point dtypes, including ml_dtypes' bfloat16 / FP8 (NumPy kind 'V')."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return True
    try:
        ml_dtypes.finfo(dt)
        return True
    except (ValueError, TypeError):
        return False
