"""The data types of NeuronCore memories, backed by NumPy and ml_dtypes.

Floating-point data of every width is *stored* in float32 arrays holding values that are exactly representable
in the tensor's declared dtype (a "shadow" float32 store).  Rounding happens once, when a value is written
(:func:`round_to`); reads need no conversion.  This keeps bf16/fp8 arithmetic as fast as fp32 (converting an
ml_dtypes tile costs more than the arithmetic itself, see docs/notes/speed.md#host-side-costs) while every stored value
is bit-for-bit what the hardware would hold.  Integer and bool data is stored in its own NumPy dtype.

Rounding to bf16 and tf32 is integer arithmetic on the float32 bits (bf16 a cache-sized block at a time on large
arrays); rounding to the fp8 formats, and their encoding and decoding (:func:`to_real`, :func:`from_real`), is a
lookup in tables filled by ml_dtypes itself (``memory/fp8.py``): the same bits as ml_dtypes' element-by-element
conversions (kept here as the references, ``_via``, ``_to_real_ref``, ``_from_real_ref``), 5-7x faster on a tile
(``benchmarks/bench_numerics.py``).  float16 goes through NumPy's own conversion.

Large HBM tensors are the exception (``space.Buffer.native``: narrow floats of ``space.NATIVE_MIN_BYTES``, 1 MiB,
or more, in a precise run: kernel inputs from host arrays, ``kernels/jit.py``, borrowed from the caller's array
until the kernel writes them, ``space.Buffer.borrowed``, and ``nl.ndarray`` in HBM, ``kernels/language.py``):
they keep their real encoding (2 bytes a bf16/fp16 element, 1 an fp8) and convert to
and from the float32 form at access, the DMA boundary (``reinterpret.Native``), with :func:`to_real` and
:func:`from_real`, which are exact both ways.  On-chip tiles, small HBM tensors and the legacy front end's HBM
tensors use the shadow store.
"""

from __future__ import annotations

import sys

import numpy as np

from .fp8 import CHUNK, Fp8Tables

__all__ = ["DType", "dtype_of", "DTYPES", "round_to", "UnsupportedDTypeError", "unpack_x4", "pack_x4", "to_real",
           "from_real"]


class UnsupportedDTypeError(TypeError):
    """A dtype NKI names but trnsim does not model."""


class DType:
    """A NeuronCore dtype: its NKI name, the real NumPy dtype, and how trnsim stores it."""

    __slots__ = ("name", "_np", "storage", "itemsize", "is_float", "is_int", "is_bool", "sentinel",
                 "_round", "_min", "_max", "packed", "element")

    def __init__(self, name: str, npdtype, *, storage=None, rounder=None, packed=0, element=None, sentinel=None):
        self.name = name
        self.is_float = name in _FLOAT_NAMES
        self.packed = packed
        self.element = element
        if npdtype is None:
            # a format NumPy knows only through ml_dtypes (:data:`_ML_FORMATS`): a float of that size, stored as
            # float32; its NumPy dtype and limits come from ml_dtypes when first asked for (:meth:`_resolve`)
            self._np = None
            self.itemsize = _ML_FORMATS[name]
            self.is_bool = self.is_int = False
            self.storage = np.dtype(np.float32)
            self.sentinel = np.nan
            self._round = rounder
            return
        self._np = np.dtype(npdtype)
        self.itemsize = self._np.itemsize
        self.is_bool = self._np == np.bool_
        # packed MX formats (float8_e4m3fn_x4 ...): ``packed`` values of format ``element`` per element, stored as
        # their raw bits in an unsigned integer; neither float nor integer arithmetic applies to them
        self.is_int = self._np.kind in "iu" and not packed
        self.storage = np.dtype(storage) if storage is not None else (
            np.dtype(np.float32) if self.is_float else self._np)
        # new memory is filled with NaN (floats) or 4 (integers), as AWS's simulator does; packed formats with
        # the NaN bit pattern of each element (0 for fp4, which has no NaN)
        self.sentinel = sentinel if sentinel is not None else (
            np.nan if self.is_float else (True if self.is_bool else 4))
        self._round = rounder
        self._limits()

    def _limits(self):
        if self.is_float:
            # NumPy's own float kinds (float16, float32; tfloat32 stored as float32: its limits) by np.finfo
            fi = np.finfo(self._np) if self._np.kind == "f" else ml_dtypes().finfo(self._np)
            self._min, self._max = float(fi.min), float(fi.max)
        elif self.is_int or self.packed:
            ii = np.iinfo(self._np)
            self._min, self._max = int(ii.min), int(ii.max)
        else:
            self._min, self._max = 0, 1

    def _resolve(self):
        """The NumPy dtype of an ml_dtypes format, and its limits, on first use (imports ml_dtypes)."""
        self._np = np.dtype(getattr(ml_dtypes(), self.name))
        self._limits()
        _BY_NP[self._np] = self
        return self._np

    @property
    def np(self):
        """The format's real NumPy dtype (an ml_dtypes one for bfloat16 and the fp8 formats)."""
        npd = self._np
        return npd if npd is not None else self._resolve()

    @property
    def min(self):
        if self._np is None:
            self._resolve()
        return self._min

    @property
    def max(self):
        if self._np is None:
            self._resolve()
        return self._max

    def __repr__(self):
        return f"trnsim.dtype({self.name})"

    def __str__(self):
        return self.name

    def __eq__(self, other):
        if isinstance(other, DType):
            return self.name == other.name
        try:
            return dtype_of(other).name == self.name
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.name)


# the formats NumPy knows only through ml_dtypes, with their sizes in bytes (bfloat16: 1 sign, 8 exponent and 7
# mantissa bits; the fp8 formats one byte, as their names say): their DTypes are made without importing ml_dtypes,
# whose import costs about 0.8 s of CPU time (ml_dtypes 0.7.0, benchmarks/speed-estim11.md) that a shape-only run,
# which needs only their names and sizes, does not pay.  ml_dtypes is imported at the first use of such a format's
# NumPy dtype or limits (``DType.np``, ``.min``, ``.max``).
_ML_FORMATS = {"bfloat16": 2, "float8_e4m3": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e8m0fnu": 1}


def ml_dtypes():
    """The ml_dtypes module, imported on first use (it registers bfloat16 and the fp8 formats with NumPy)."""
    import ml_dtypes as m
    return m


_FLOAT_NAMES = {"bfloat16", "float16", "float32", "tfloat32", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
                "float8_e8m0fnu"}


def _via(npdtype):
    """The rounder of a format by a round trip through its ml_dtypes/NumPy dtype, element by element: the
    reference the table rounders (:func:`_table_rounder`) are built from and checked against."""
    target = np.dtype(npdtype)

    def rounder(x):
        return x.astype(target).astype(np.float32)
    return rounder


# the fp8 formats converted by table (memory/fp8.py): their tables, built on first use from the reference
# conversions (_via, _to_real_ref, _from_real_ref)
_FP8_NAMES = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
_FP8_TABLES: dict = {}
# arrays of fewer elements convert through the references: the table path's fixed cost (~5 us a call) is more than
# ml_dtypes' below ~2,000 elements (benchmarks/bench_numerics.py --sizes 128,1024,4096: table 0.3-0.8x the
# reference at 128 and 1,024 elements, 1.2-3.9x at 4,096); the same bits either way
TABLE_MIN = 2048


def _fp8_tables(name: str) -> Fp8Tables:
    t = _FP8_TABLES.get(name)
    if t is None:
        dt = DTYPES[name]
        t = Fp8Tables(name, _via(dt.np), lambda v: _to_real_ref(dt, v),
                      lambda c: _from_real_ref(dt, c.view(dt.np)))
        _FP8_TABLES[name] = t
    return t


def _table_rounder(name: str):
    """The rounder of fp8 format ``name``: float32 input of :data:`TABLE_MIN` elements or more by table
    (``memory/fp8.py``, the same bits as :func:`_via`), anything else through the reference (a float64 value is
    rounded once, as ml_dtypes does).  ``out``: as for :func:`_bf16_round`."""
    via = []            # _via of the format's ml_dtypes dtype, made at the first call (ml_dtypes imported then)

    def ref(x):
        if not via:
            via.append(_via(DTYPES[name].np))
        return via[0](x)

    def rounder(x, out=None):
        x = np.asarray(x)
        if x.dtype != np.float32 or x.size < TABLE_MIN:
            r = ref(x)
            if out is None:
                return r
            np.copyto(out, r)
            return out
        return _fp8_tables(name).rounded(x, out)
    rounder.reference = ref
    return rounder


def _bf16_round(x, out=None):
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32.

    Done with integer arithmetic on the float32 bits, which is several times faster than a round trip through
    ml_dtypes; NaN stays NaN (``_bf16_nan_bits``) and infinities stay infinite.  ``out``: a float32 array of
    ``x``'s shape sharing no memory with it, which receives the result (no new array).  A contiguous array of
    more than 8 blocks of ``fp8.CHUNK`` elements is worked a block at a time (:func:`_bf16_round_block` on each),
    so the temporaries stay in the cache: the same bits, element by element (below that, one piece is as fast:
    ``benchmarks/bench_numerics.py``)."""
    x = np.asarray(x, dtype=np.float32)
    n = x.size
    if n <= 8 * CHUNK or not x.flags.c_contiguous or (out is not None and not out.flags.c_contiguous):
        return _bf16_round_block(x, out)
    if out is None:
        out = np.empty(x.shape, np.float32)
    xf = x.reshape(-1)
    of = out.reshape(-1)
    for i in range(0, n, CHUNK):
        _bf16_round_block(xf[i:i + CHUNK], of[i:i + CHUNK])
    return out


def _bf16_round_block(x, out=None):
    """:func:`_bf16_round` of float32 ``x`` in one piece (whole-array temporaries)."""
    bits = x.view(np.uint32)
    # bits + 0x7FFF + lsb, masked, worked in one array (uint32 addition wraps the same in any order)
    if out is None:
        r = np.right_shift(bits, 16, out=np.empty_like(bits))     # an array also for 0-d input
    else:
        r = out.view(np.uint32)
        np.right_shift(bits, 16, out=r)
    r &= 1
    r += np.uint32(0x7FFF)
    r += bits
    r &= np.uint32(0xFFFF0000)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = _bf16_nan_bits(bits[nan])
    return r.view(np.float32)


def _bf16_nan_bits(bits):
    """The float32 bits a NaN (float32 ``bits``) keeps as a bfloat16: its upper half (sign, exponent and the top 7
    payload bits), so a bfloat16 NaN read and written back is unchanged; a NaN whose payload lies only in the lower
    half gets the quiet bit, so it stays a NaN (its upper half alone would read as an infinity).  Which NaN the
    hardware makes of such a payload is not documented; ml_dtypes gives the quiet NaN of the same sign for it too."""
    top = bits & np.uint32(0xFFFF0000)
    top[(top & np.uint32(0x007F0000)) == 0] |= np.uint32(0x00400000)
    return top


def _tf32_round(x):
    """Round float32 to tfloat32 (10 mantissa bits, ties to even), kept in float32."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    lsb = (bits >> 13) & 1
    rounded = ((bits + np.uint32(0xFFF) + lsb) & np.uint32(0xFFFFE000)).view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, x, rounded)
    return rounded


def _build():
    table = {}

    def add(dt):
        table[dt.name] = dt

    add(DType("float32", np.float32))
    add(DType("tfloat32", np.float32, rounder=_tf32_round))
    add(DType("bfloat16", None, rounder=_bf16_round))
    add(DType("float16", np.float16, rounder=_via(np.float16)))
    add(DType("float8_e4m3", None, rounder=_table_rounder("float8_e4m3")))
    add(DType("float8_e4m3fn", None, rounder=_table_rounder("float8_e4m3fn")))
    add(DType("float8_e5m2", None, rounder=_table_rounder("float8_e5m2")))
    for n in ("int8", "int16", "int32", "uint8", "uint16", "uint32"):
        add(DType(n, getattr(np, n)))
    add(DType("bool", np.bool_, storage=np.uint8))
    # the OCP microscaling (MX) formats of NeuronCore-v4: the E8M0 block scale (a power of two, NaN at 0xFF) and
    # four FP8 (or FP4) values packed little-endian into one 32-bit (16-bit) element (NKI reference, quantize_mx)
    add(DType("float8_e8m0fnu", None, rounder=_table_rounder("float8_e8m0fnu")))
    add(DType("float8_e4m3fn_x4", np.uint32, packed=4, element="float8_e4m3fn", sentinel=0x7F7F7F7F))
    add(DType("float8_e5m2_x4", np.uint32, packed=4, element="float8_e5m2", sentinel=0x7F7F7F7F))
    add(DType("float4_e2m1fn_x4", np.uint16, packed=4, element="float4_e2m1fn", sentinel=0))
    return table


DTYPES = _build()
_ALIASES = {"bool_": "bool", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
            "float": "float32", "tf32": "tfloat32", "float8e4": "float8_e4m3", "float8e5": "float8_e5m2",
            }
# NumPy dtype -> DType; an ml_dtypes format joins when its NumPy dtype is first resolved (DType._resolve)
_BY_NP = {dt._np: dt for dt in DTYPES.values() if dt.name != "tfloat32" and not dt.packed and dt._np is not None}


def _element_np(element):
    """The ml_dtypes NumPy dtype of a packed format's element ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn")."""
    return np.dtype(getattr(ml_dtypes(), element))


def unpack_x4(dt: DType, bits: np.ndarray) -> np.ndarray:
    """The float32 values of packed-format elements: shape ``bits.shape + (4,)``, value ``j`` from bits
    ``[j*w, (j+1)*w)`` (w = 8 for FP8, 4 for FP4)."""
    w = dt.itemsize * 8 // dt.packed
    b = np.asarray(bits)
    if b.dtype.kind == "V" and b.dtype.itemsize == dt.itemsize:
        b = b.view(dt.np)                      # the format's registered NumPy dtype (neuron_dtypes): same bytes
    b = b.astype(dt.np, copy=False)
    # one byte per value (the codes), filled field by field: no temporary wider than the packed array itself
    parts = np.empty(b.shape + (dt.packed,), dtype=np.uint8)
    mask = dt.np.type((1 << w) - 1)
    for j in range(dt.packed):
        parts[..., j] = (b >> dt.np.type(w * j)) & mask
    return parts.view(_element_np(dt.element)).astype(np.float32)


def pack_x4(dt: DType, values: np.ndarray) -> np.ndarray:
    """Round float32 ``values`` (last axis of 4) to the element format (nearest even, saturating as ml_dtypes
    converts) and pack them into elements of ``dt``."""
    w = dt.itemsize * 8 // dt.packed
    v = np.asarray(values, dtype=np.float32)
    # the codes one byte per value, then each field shifted into place in the packed dtype: the largest temporary
    # is one packed-width array (large MX weights: a 4-byte-per-value uint32 copy of the codes cost GiBs)
    codes = v.astype(_element_np(dt.element)).view(np.uint8)
    if w < 8:
        codes &= np.uint8((1 << w) - 1)
    out = codes[..., 0].astype(dt.np)
    for j in range(1, dt.packed):
        out |= codes[..., j].astype(dt.np) << dt.np.type(w * j)
    return out


# mantissa bits of the fp8 formats with several NaN encodings, whose NaN payloads ml_dtypes' conversions to and from
# float32 do not keep (e4m3fn and e8m0 have one NaN per sign; fp16 goes through NumPy, which keeps them)
_LITTLE = sys.byteorder == "little"
_NAN_MBITS = {"float8_e4m3": 3, "float8_e5m2": 2}


def to_real(dt: DType, vals: np.ndarray) -> np.ndarray:
    """The real-dtype array (bit patterns) of storage values ``vals`` of ``dt``: exact, NaN payloads included (a
    NaN's payload rides in the top mantissa bits of its float32, as a widening conversion puts it).  fp8 formats
    by table (``memory/fp8.py``), the same bits as :func:`_to_real_ref`."""
    if dt.name in _FP8_NAMES and np.size(vals) >= TABLE_MIN:
        return _fp8_tables(dt.name).encoded(np.ascontiguousarray(vals, dtype=np.float32)).view(dt.np)
    return _to_real_ref(dt, vals)


def _to_real_ref(dt: DType, vals: np.ndarray) -> np.ndarray:
    """:func:`to_real` element by element (ml_dtypes): the reference of the fp8 tables."""
    if not dt.is_float or dt.storage == dt.np:
        return np.asarray(vals).astype(dt.np)
    v = np.ascontiguousarray(vals, dtype=np.float32)
    if dt.name == "bfloat16":
        if _LITTLE:         # the upper halves of the float32 words, copied once (no 4-byte temporary per element)
            return np.ascontiguousarray(v.reshape(-1).view(np.uint16)[1::2]).view(dt.np).reshape(v.shape)
        return (v.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(dt.np)
    out = v.astype(dt.np)
    m = _NAN_MBITS.get(dt.name)
    if m is not None:
        nan = np.isnan(v)
        if nan.any():
            b = v.view(np.uint32)[nan]
            pay = (b >> np.uint32(23 - m)) & np.uint32((1 << m) - 1)
            code = ((b >> np.uint32(31)) << np.uint32(7)) | np.uint32(0x7F ^ ((1 << m) - 1)) | pay
            ob = out.view(np.uint8)
            ob[nan] = np.where(pay != 0, code, ob[nan]).astype(np.uint8)
    return out


def from_real(dt: DType, arr: np.ndarray) -> np.ndarray:
    """Storage values of the real-dtype array ``arr`` of ``dt`` (the inverse of :func:`to_real`, exact).  fp8
    formats by table (``memory/fp8.py``), the same bits as :func:`_from_real_ref`."""
    if dt.name in _FP8_NAMES and np.size(arr) >= TABLE_MIN:
        return _fp8_tables(dt.name).decoded(np.ascontiguousarray(arr, dtype=dt.np).view(np.uint8))
    return _from_real_ref(dt, arr)


def _from_real_ref(dt: DType, arr: np.ndarray) -> np.ndarray:
    """:func:`from_real` element by element (ml_dtypes): the reference of the fp8 tables."""
    if not dt.is_float or dt.storage == dt.np:
        return np.asarray(arr).astype(dt.storage)
    a = np.ascontiguousarray(arr, dtype=dt.np)
    if dt.name == "bfloat16":
        if _LITTLE:         # the bits into the upper halves of zeroed float32 words (one allocation)
            out = np.zeros(a.shape, np.float32)
            out.reshape(-1).view(np.uint16)[1::2] = a.reshape(-1).view(np.uint16)
            return out
        return (a.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    out = a.astype(np.float32)
    m = _NAN_MBITS.get(dt.name)
    if m is not None:
        nan = np.isnan(out)
        if nan.any():
            b = a.view(np.uint8)[nan].astype(np.uint32)
            pay = b & np.uint32((1 << m) - 1)
            out.view(np.uint32)[nan] = ((b >> np.uint32(7)) << np.uint32(31)) | np.uint32(0x7F800000) | (
                pay << np.uint32(23 - m))
    return out


def _packed_void(npd: np.dtype):
    """The packed MX format of a NumPy void dtype that stands for one: its scalar type is named after the format
    (``float8_e4m3fn_x4`` ...) and it has the format's size, as NumPy dtypes registered from Python for the MX
    formats are (a registered C dtype is named after its type and matched by name already).  Otherwise None."""
    if npd.kind != "V":
        return None
    dt = DTYPES.get(getattr(npd.type, "__name__", ""))
    if dt is None or not dt.packed:
        return None
    if npd.itemsize != dt.itemsize:
        raise TypeError(f"dtype {npd!r} is named {dt.name} but is {npd.itemsize} bytes; {dt.name} packs "
                        f"{dt.packed} values into {dt.itemsize} bytes")
    return dt


def dtype_of(x) -> DType:
    """The :class:`DType` for an NKI dtype string, a NumPy/ml_dtypes dtype, a torch dtype or a DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        key = _ALIASES.get(x, x)
        if key in DTYPES:
            return DTYPES[key]
        raise TypeError(f"unknown dtype {x!r}; supported: {', '.join(sorted(DTYPES))}")
    mod = type(x).__module__
    if mod.startswith("torch"):
        name = str(x).replace("torch.", "")
        name = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "bool": "bool"}.get(name, name)
        return dtype_of(name)
    try:
        npd = np.dtype(x)
    except TypeError:
        raise TypeError(f"unknown dtype {x!r}") from None
    if npd.name in DTYPES:
        return DTYPES[npd.name]
    packed = _packed_void(npd)
    if packed is not None:
        return packed
    dt = _BY_NP.get(npd)
    if dt is None:
        raise TypeError(f"dtype {npd} is not a NeuronCore dtype; supported: {', '.join(sorted(DTYPES))}")
    return dt


def round_to(dt: DType, values: np.ndarray, precise: bool = True) -> np.ndarray:
    """Values as the storage of ``dt`` holds them: floats rounded to nearest-even in ``dt`` (when precise),
    integers rounded to nearest and saturated to the integer range, bools as 0/1."""
    if dt.is_float:
        if dt._round is None or not precise:
            return values
        return dt._round(values)
    if dt.is_bool:
        return (np.asarray(values) != 0).astype(np.uint8)
    if dt.packed:
        return np.asarray(values).astype(dt.np)      # packed elements are written as their bits
    v = np.asarray(values)
    if v.dtype.kind == "f" or (v.dtype.kind == "V" and v.dtype.name in DTYPES and DTYPES[v.dtype.name].is_float):
        return _float_to_int(dt, v)
    if v.dtype != dt.np:
        return v.astype(dt.np)   # integer to integer: wraps like a hardware narrowing
    return v


def _float_to_int(dt: DType, v: np.ndarray) -> np.ndarray:
    """Floats ``v`` written to integer dtype ``dt``: rounded to nearest (ties to even), saturated to
    ``[dt.min, dt.max]``, NaN to 0 (NOTES.md "Numerics").

    The range test uses the exact powers of two ``2**bits`` / ``-2**(bits-1)`` as bounds, not ``dt.max`` converted
    to the float type: ``float32(4294967295)`` is ``2**32``, so clipping to it and casting would overflow (NumPy
    casts an out-of-range float to an unspecified integer, 0 on x86, with a RuntimeWarning).  Only in-range values
    are cast; the others are set to the bound directly."""
    if v.dtype.kind != "f" or v.dtype.itemsize < 4:
        v = v.astype(np.float32)       # float16 and the ml_dtypes formats: exact in float32, which holds 2**64
    bits = dt.itemsize * 8
    ft = v.dtype.type
    signed = dt.np.kind == "i"
    hi = ft(2.0 ** (bits - 1 if signed else bits))       # the first value above dt.max (exact in float32/64)
    lo = ft(-(2.0 ** (bits - 1))) if signed else ft(0.0)  # dt.min (exact)
    r = np.rint(v)
    nan = np.isnan(r)
    over = r >= hi
    under = r < lo
    bad = nan | over | under
    if bad.any():
        r = np.where(bad, ft(0.0), r)
        out = r.astype(dt.np)
        out[over] = dt.max
        out[under] = dt.min
        return out
    return r.astype(dt.np)
