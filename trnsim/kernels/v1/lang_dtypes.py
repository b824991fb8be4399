"""Legacy NKI dtypes (NumPy dtypes, ``nl.bfloat16`` & co.), their limits, and the dtype promotion of binary ops.

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

import builtins

import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 names with NumPy)
import numpy as np

from ...memory import dtype_of


# -- dtypes (NumPy, as in legacy NKI) ------------------------------------------------------------------
bool_ = np.bool_
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
float16, float32 = np.float16, np.float32
bfloat16 = np.dtype("bfloat16")
float8_e4m3 = np.dtype("float8_e4m3")
float8_e5m2 = np.dtype("float8_e5m2")
tfloat32 = np.dtype("|V4")          # legacy NKI spells tfloat32 as a 4-byte void dtype
float8_e4m3fn = np.dtype("float8_e4m3fn")
float8_e8m0fnu = np.dtype("float8_e8m0fnu")
# the packed MX formats have no NumPy dtype of their own (their bits are a uint32/uint16): named by string
float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4 = "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"


class fp32:
    """Limits of float32 as NKI names them (``nl.fp32.min``)."""
    min = float(np.finfo(np.float32).min)


class bfp16:
    min = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)


def finfo(dtype):
    dt = dtype_of(dtype)
    return ml_dtypes.finfo(dt.np) if dt.name not in ("float32", "tfloat32") else np.finfo(np.float32)


# -- dtype promotion -----------------------------------------------------------------------------------
def _promote(a, b):
    """Result dtype of a binary op on tiles of dtypes ``a`` and ``b`` (NKI's promotion rules)."""
    a, b = dtype_of(a), dtype_of(b)
    if a == b:
        return a
    if a.is_float and b.is_float:
        if a.itemsize != b.itemsize:
            return a if a.itemsize > b.itemsize else b
        return dtype_of("float32")
    if a.is_float or b.is_float:
        return a if a.is_float else b
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    signed = a.np.kind == "i" or b.np.kind == "i"
    size = builtins.max(a.itemsize, b.itemsize)
    if a.np.kind != b.np.kind:
        # signed with unsigned: the signed type wide enough for both
        u = a if a.np.kind == "u" else b
        s = b if u is a else a
        size = s.itemsize if s.itemsize > u.itemsize else builtins.min(4, 2 * u.itemsize)
    return dtype_of(np.dtype(f"{'i' if signed else 'u'}{size}"))


def _scalar_dtype(t_dtype, s):
    dt = dtype_of(t_dtype)
    if isinstance(s, float) and not dt.is_float:
        return dtype_of("float32")
    return dt
