"""fp8 rounding, encoding and decoding by lookup tables: the same bits as ml_dtypes' element-wise conversions,
several times faster on large arrays.

An fp8 format keeps at most 3 mantissa bits, so where a float32 value goes when it is rounded to the format depends
only on its top 13 bits (sign, the 8 exponent bits and the top 4 mantissa bits: the 3 kept and the round bit of a
normal result; a subnormal result rounds at a higher bit) and on whether any of its 19 lower bits is set (the
sticky bit of round to nearest even: a value exactly half-way rounds to even, anything above it up).  A NaN's
payload bits that trnsim keeps (``dtypes.to_real``: the top 2 or 3 mantissa bits) lie in the top 13 bits too.  So
one table of 2**14 entries per format and per conversion, indexed by ``(top 13 bits << 1) | sticky``, holds every
result, and a conversion is five passes of integer arithmetic and one gather instead of ml_dtypes' per-element
loop.  The tables are filled by the reference conversions themselves (ml_dtypes, and trnsim's NaN-payload rules in
``dtypes``), one representative float32 per index, so what they hold is what the reference gives: ties to even,
subnormals, overflow to infinity (``float8_e4m3``, ``float8_e5m2``) or to NaN (``float8_e4m3fn``, which has no
infinity; ``float8_e8m0fnu``), signed zeros, NaN.  tests/memory/test_fp8_tables.py checks them against ml_dtypes on
every index, with every low-bit pattern class, for every format; ``benchmarks/bench_numerics.py --exhaustive``
compares every one of the 2**32 float32 bit patterns (identical for all four formats, ml_dtypes 0.7.0).

Arrays are converted in blocks of :data:`CHUNK` elements so the temporaries stay in the processor's cache and are
allocated once per call (a whole-array temporary of a large tile costs page faults on every call).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHUNK", "Fp8Tables", "table_index", "representatives"]

CHUNK = 1 << 15          # elements per block: 128 KiB of uint32 temporaries (trnsim's choice, an L2-sized block)
_STICKY = np.uint32((1 << 18) - 1)      # bits 17..0: folded with bit 18 into one sticky bit at bit 18
_SHIFT = 18


def table_index(u: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The table index of float32 bits ``u`` (uint32) into ``out`` (uint32, ``u``'s shape):
    ``(u >> 19) << 1 | (u & 0x7FFFF != 0)``.  ``(u & 0x3FFFF) + 0x3FFFF`` carries into bit 18 exactly when one of
    bits 17..0 is set (and stays below bit 19), so OR-ing it into ``u`` leaves bit 18 set iff any of bits 18..0 is:
    the sticky bit sits under the top 13 bits, and one shift makes the index."""
    np.bitwise_and(u, _STICKY, out=out)
    out += _STICKY
    out |= u
    out >>= np.uint32(_SHIFT)
    return out


def representatives() -> np.ndarray:
    """One float32 per table index (its bits: the index's top 13 bits, and a lowest bit 1 when its sticky bit is
    set): what the reference conversions are asked to fill the tables."""
    i = np.arange(1 << 14, dtype=np.uint32)
    return (((i >> np.uint32(1)) << np.uint32(19)) | (i & np.uint32(1))).view(np.float32)


class Fp8Tables:
    """The tables of one fp8 format: ``round`` (float32: the float32 value of the rounded result, as
    ``x.astype(fmt).astype(float32)`` gives it), ``encode`` (uint8: the format's bit pattern, as ``dtypes.to_real``
    gives it) and ``decode`` (float32 per bit pattern, as ``dtypes.from_real`` gives it)."""

    __slots__ = ("name", "round", "encode", "decode")

    def __init__(self, name, round_ref, encode_ref, decode_ref):
        reps = representatives()
        self.name = name
        self.round = np.ascontiguousarray(round_ref(reps), dtype=np.float32)
        self.encode = np.ascontiguousarray(encode_ref(reps)).view(np.uint8).copy()
        self.decode = np.ascontiguousarray(decode_ref(np.arange(256, dtype=np.uint8)), dtype=np.float32)
        if self.round.shape != reps.shape or self.encode.shape != reps.shape or self.decode.shape != (256,):
            raise ValueError(f"fp8 tables of {name}: the reference conversions gave shapes {self.round.shape}, "
                             f"{self.encode.shape}, {self.decode.shape}; expected {reps.shape} and (256,)")

    def rounded(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """float32 ``x`` rounded to the format, as float32 (``out``: a float32 array of ``x``'s shape that receives
        the result; it may be ``x`` itself, but no other array overlapping it)."""
        return _gather(self.round, x, np.float32, out)

    def encoded(self, x: np.ndarray) -> np.ndarray:
        """The format's bit patterns (uint8) of float32 ``x``."""
        return _gather(self.encode, x, np.uint8, None)

    def decoded(self, codes: np.ndarray) -> np.ndarray:
        """The float32 values of bit patterns ``codes`` (uint8, any shape)."""
        c = np.asarray(codes)
        flat = np.ascontiguousarray(c).reshape(-1)
        out = np.empty(flat.size, np.float32)
        if flat.size <= CHUNK:
            np.take(self.decode, flat, out=out, mode="clip")
        else:
            idx = np.empty(CHUNK, np.intp)       # (take converts other index types to intp a block at a time)
            for i in range(0, flat.size, CHUNK):
                part = flat[i:i + CHUNK]
                k = idx[:part.size]
                np.copyto(k, part, casting="unsafe")
                np.take(self.decode, k, out=out[i:i + part.size], mode="clip")
        return out.reshape(c.shape)


def _gather(table, x, dtype, out):
    x = np.asarray(x, dtype=np.float32)
    u = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
    n = u.size
    if out is not None:
        if out.dtype != dtype or out.shape != x.shape:
            raise ValueError(f"fp8 conversion: out must be a {np.dtype(dtype)} array of shape {x.shape}, got "
                             f"{out.dtype} {out.shape}")
        if not out.flags.c_contiguous:
            np.copyto(out, _gather(table, x, dtype, None))
            return out
    res = np.empty(n, dtype) if out is None else out.reshape(-1)
    tmp = np.empty(min(n, CHUNK), np.uint32)
    for i in range(0, n, CHUNK):
        part = u[i:i + CHUNK]
        k = table_index(part, tmp[:part.size])
        # indices are < 2**14 by construction (a 32-bit word shifted right by 18): no bounds check needed
        np.take(table, k, out=res[i:i + part.size], mode="clip")
    return res.reshape(x.shape) if out is None else out
