"""The kernel dtype name of a torch dtype (the dtype the built-in kernels and cost formulas are evaluated in).

Its own module so that ``charging`` and ``native_costs`` (which ``charging`` imports) both use it without importing
each other."""

from __future__ import annotations

import torch

_KERNEL_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
                  torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2", torch.int8: "int8",
                  torch.uint8: "uint8", torch.bool: "uint8", torch.int16: "int16"}


def kdtype(dt):
    """``"float32"`` for float32, ...; other floating dtypes are computed in float32, other integers in int32."""
    return _KERNEL_DTYPES.get(dt, "float32" if dt.is_floating_point else "int32")
