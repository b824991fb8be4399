"""``nki.language.dtypes`` (also ``nki.dtype``): the dtype names of NKI v2 (strings, as ``nl.bfloat16``)."""

from .. import language as _lang

_NAMES = ("bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
          "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e5m2_x4", "float8_e4m3fn_x4",
          "float8_e8m0fnu", "float4_e2m1fn_x4")
globals().update({n: getattr(_lang, n) for n in _NAMES})
DType = _lang.DType
__all__ = list(_NAMES) + ["DType"]
