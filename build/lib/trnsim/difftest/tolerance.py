"""Dtype-aware tolerances: an element of B matches A when

    |b - a| <= max(atol + rtol * |a|,  ulps * ulp_dtype(a),  tensor_ulps * ulp_dtype(max |A|))

where ``ulp_dtype(a)`` is the spacing of the recorded dtype's numbers at ``|a|`` (so ``ulps=2`` for bfloat16 allows
two bf16 rounding steps at that magnitude, however large) and ``max |A|`` the largest finite magnitude in the
reference tensor.  The last term is a normwise allowance: the rounding error of a sum (matmul, reduction, norm
backward) is proportional to the magnitude of its terms, not of its result, so where terms cancel an element can
be many of its own ULPs off while a fraction of an ULP of the tensor's scale.  NaN matches NaN; infinities match when equal.
Integer and boolean tensors must be equal unless ``atol`` is set for them.

Defaults per dtype: rtol/atol are ``torch.testing.assert_close``'s defaults for that dtype (torch/testing/_comparison.py,
``_DTYPE_PRECISIONS``); the ULP allowance covers different accumulation orders of a reduction (a sum of n terms
in a different order differs by a few ULP of the result).  Override per dtype or per entry path (glob patterns on
the entry key, e.g. ``op/*/blocks.1.*``), last match wins.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 0.0
    atol: float = 0.0
    ulps: float = 0.0
    tensor_ulps: float = 0.0

    def describe(self):
        return (f"rtol {self.rtol:g}, atol {self.atol:g}, {self.ulps:g} ulp, {self.tensor_ulps:g} ulp of the "
                "tensor's max")


# (significand bits including the implicit one, smallest normal exponent) of each float format
FLOAT_FORMATS = {
    "float64": (53, -1022), "float32": (24, -126), "float16": (11, -14), "bfloat16": (8, -126),
    "float8_e4m3fn": (4, -6), "float8_e4m3": (4, -6), "float8_e5m2": (3, -14), "float8_e4m3fnuz": (4, -7),
    "float8_e5m2fnuz": (3, -15), "complex64": (24, -126), "complex128": (53, -1022),
}

# rtol/atol: torch.testing.assert_close defaults (torch/testing/_comparison.py _DTYPE_PRECISIONS); fp8 rtol: one
# step of a 3-bit (e4m3) / 2-bit (e5m2) mantissa, 2^-3 and 2^-2.
DEFAULTS = {
    "float64": Tolerance(rtol=1e-7, atol=1e-7, ulps=4, tensor_ulps=4),
    "float32": Tolerance(rtol=1.3e-6, atol=1e-5, ulps=8, tensor_ulps=4),
    "float16": Tolerance(rtol=1e-3, atol=1e-5, ulps=2, tensor_ulps=2),
    "bfloat16": Tolerance(rtol=1.6e-2, atol=1e-5, ulps=2, tensor_ulps=2),
    "float8_e4m3fn": Tolerance(rtol=0.125, atol=1e-3, ulps=1, tensor_ulps=1),
    "float8_e4m3": Tolerance(rtol=0.125, atol=1e-3, ulps=1, tensor_ulps=1),
    "float8_e5m2": Tolerance(rtol=0.25, atol=1e-3, ulps=1, tensor_ulps=1),
    "complex64": Tolerance(rtol=1.3e-6, atol=1e-5, ulps=8, tensor_ulps=4),
    "complex128": Tolerance(rtol=1e-7, atol=1e-7, ulps=4, tensor_ulps=4),
}
EXACT = Tolerance()


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_FORMATS


def ulp(a: np.ndarray, dtype: str) -> np.ndarray:
    """Spacing of ``dtype``'s numbers at ``|a|`` (float64 array); subnormal spacing below the smallest normal."""
    p, emin = FLOAT_FORMATS[dtype]
    a = np.abs(np.asarray(a, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        _, e = np.frexp(np.where(np.isfinite(a), a, 0.0))     # a = m * 2**e, m in [0.5, 1)
    e = np.where(a > 0, e.astype(np.int64) - 1, emin)      # frexp(0) is (0, 0): zero is spaced as subnormals
    e = np.maximum(e, emin)
    return np.ldexp(1.0, (e - (p - 1)).astype(np.int64))


def parse_spec(spec: str, base: Tolerance = EXACT) -> Tolerance:
    """``rtol:1e-3,atol:1e-5,ulps:4`` (any subset; also ``=`` in place of ``:``) applied on top of ``base``."""
    fields = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        k, sep, v = part.replace("=", ":").partition(":")
        k = k.strip().lower()
        if not sep or k not in ("rtol", "atol", "ulps", "ulp", "tensor_ulps"):
            raise ValueError(f"tolerance {spec!r}: {part!r} is not rtol:X, atol:X, ulps:X or tensor_ulps:X")
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"tolerance {spec!r}: {v!r} is not a number") from None
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"tolerance {spec!r}: {k} must be a finite number >= 0, got {v}")
        fields["ulps" if k == "ulp" else k] = x
    if not fields:
        raise ValueError(f"tolerance {spec!r}: empty (expected e.g. rtol:1e-3,atol:1e-5,ulps:4)")
    return replace(base, **fields)


class Tolerances:
    """The tolerance for each entry: per-dtype defaults, dtype overrides, then path overrides (glob on the key)."""

    def __init__(self, dtype_overrides=None, path_overrides=None):
        self.by_dtype = dict(DEFAULTS)
        self.dtype_specs = dict(dtype_overrides or {})
        for dt, spec in self.dtype_specs.items():
            base = self.by_dtype.get(dt, EXACT)
            self.by_dtype[dt] = spec if isinstance(spec, Tolerance) else parse_spec(spec, base)
        self.paths = list((path_overrides or {}).items()) if isinstance(path_overrides, dict) \
            else list(path_overrides or [])

    def for_entry(self, key: str, dtype: str) -> Tolerance:
        tol = self.by_dtype.get(dtype, EXACT)
        for pat, spec in self.paths:
            if fnmatch.fnmatchcase(key, pat):
                tol = spec if isinstance(spec, Tolerance) else parse_spec(spec, tol)
        return tol

    def describe(self):
        lines = [f"{dt}: {t.describe()}" for dt, t in sorted(self.by_dtype.items())]
        lines += [f"{pat}: {spec if isinstance(spec, str) else spec.describe()}" for pat, spec in self.paths]
        return lines
