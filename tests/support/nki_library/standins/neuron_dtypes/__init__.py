"""Stand-in for AWS's ``neuron_dtypes`` (not published on PyPI), as nki-library's tests and goldens use it.

``static_cast(array, dtype)`` converts NumPy data to a dtype by rounding to nearest even (ml_dtypes for bfloat16 and
the FP8 formats) and returns an array of that dtype.

The MX ``*_x4`` formats (four FP8 or FP4 values packed into one 32-bit or 16-bit element, element 0 in the low bits,
trnsim's ``pack_x4``) are NumPy dtypes here, as the real package registers them: the snapshot's tests allocate
``np.zeros(shape, dtype=nl.float4_e2m1fn_x4)`` (an NKI dtype *name*), fill it with ``static_cast`` results, and
reinterpret it with ``.view(np.uint16)``.  Pure Python cannot register a new NumPy scalar kind, so each x4 dtype is a
structured dtype of the format's size (see ``_make_x4``) whose scalar type is an ``np.void`` subclass named
after the format, and the name is entered in NumPy's type-name table (``np.sctypeDict``) when this module is
imported, so ``np.dtype("float8_e4m3fn_x4")`` resolves to it.  trnsim's ``dtype_of`` recognises such a dtype by its
scalar type's name and size.  ``static_cast`` from an x4 array unpacks it (last axis times four).
``sizeinbytes`` and ``finfo`` as NumPy's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from trnsim.memory.dtypes import dtype_of, pack_x4, unpack_x4

_X4_NAMES = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")


def _make_x4(name):
    dt = dtype_of(name)                    # trnsim's packed format: storage integer and packing
    scalar = type(name, (np.void,), {"__module__": __name__, "_trnsim_x4": True})
    # two fields, the low and the high half of the packed integer (the layout is only for NumPy: data is reached
    # through ``.view``).  A one-field structured dtype would cast silently to float32 (giving the bit pattern as a
    # number); with two, NumPy refuses the cast with TypeError, as the real package does for x4 arrays, which sends
    # the snapshot's output validator to its packed-format comparison instead of a tolerance on bit patterns.  The
    # fields must not overlap: NumPy's promotion (np.concatenate, np.stack) rebuilds a structured dtype with
    # overlapping fields as a packed one of another size, losing the scalar type.
    half = np.dtype(f"<u{dt.itemsize // 2}")
    npd = np.dtype((scalar, {"names": ["lo", "hi"], "formats": [half, half], "offsets": [0, dt.itemsize // 2],
                             "itemsize": dt.itemsize}))
    registered = np.sctypeDict.get(name)
    if registered is not None and np.dtype(registered).kind == "V" and np.dtype(registered).type.__name__ == name:
        return np.dtype(registered)        # loaded twice (trnsim's tests load this file under another name)
    np.sctypeDict[name] = npd
    return npd


def _name_x4_dtypes_as_numpy_prints_registered_ones():
    """``str(dtype)`` of an x4 dtype is its name, ``repr`` is ``dtype('<name>')``, as NumPy prints a dtype
    registered in C (ml_dtypes' ``bfloat16``): the snapshot matches ``str(out.dtype)`` against the names
    (mx_torch_common.quantize_to_mx, output_validator's x4 unpackers).  NumPy formats dtypes with the Python
    functions of ``numpy._core._dtype``; they are wrapped once, and every other dtype prints as before."""
    try:
        from numpy._core import _dtype as fmt
    except ImportError:                       # NumPy 1.x
        from numpy.core import _dtype as fmt
    if getattr(fmt, "_trnsim_x4_names", False):
        return
    plain_str, plain_repr = fmt.__str__, fmt.__repr__

    def name(dtype):
        t = getattr(dtype, "type", None)
        return t.__name__ if getattr(t, "_trnsim_x4", False) else None

    fmt.__str__ = lambda dtype: name(dtype) or plain_str(dtype)
    fmt.__repr__ = lambda dtype: f"dtype('{name(dtype)}')" if name(dtype) else plain_repr(dtype)
    fmt._trnsim_x4_names = True


_name_x4_dtypes_as_numpy_prints_registered_ones()
float8_e4m3fn_x4 = _make_x4("float8_e4m3fn_x4")
float8_e5m2_x4 = _make_x4("float8_e5m2_x4")
float4_e2m1fn_x4 = _make_x4("float4_e2m1fn_x4")
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)


def _x4_name(dtype):
    """The x4 format a dtype argument names (an x4 NumPy dtype, its scalar type, or the name), else None."""
    if isinstance(dtype, str):
        return dtype if dtype in _X4_NAMES else None
    t = dtype if isinstance(dtype, type) else getattr(dtype, "type", None)
    if isinstance(t, type) and issubclass(t, np.void) and t.__name__ in _X4_NAMES:
        return t.__name__
    return None


def _bits(a, x4):
    """The packed integers of an x4 array (a zero-copy view)."""
    return a.view(dtype_of(x4).np)


def static_cast(array, dtype):
    x4 = _x4_name(dtype)
    a = np.asarray(array)
    src_x4 = _x4_name(a.dtype)
    if src_x4 is not None:
        if x4 is not None:
            if x4 != src_x4:
                raise TypeError(f"static_cast: {src_x4} to {x4} is not a conversion between packed formats")
            return a.copy()
        values = unpack_x4(dtype_of(src_x4), _bits(a, src_x4))
        a = values.reshape(values.shape[:-2] + (values.shape[-2] * values.shape[-1],))
    if x4 is not None:
        dt = dtype_of(x4)
        v = a.astype(np.float32)
        if v.ndim == 0 or v.shape[-1] % dt.packed:
            raise ValueError(f"static_cast to {x4}: last axis {v.shape[-1:]} is not a multiple of {dt.packed}")
        bits = pack_x4(dt, v.reshape(v.shape[:-1] + (v.shape[-1] // dt.packed, dt.packed)))
        return np.ascontiguousarray(bits).view(np.dtype(x4))
    target = np.dtype(dtype)
    if target.kind in "iub" and a.dtype.kind == "f":
        return _rint_cast(a, target)
    return a.astype(target)


_RINT_BLOCK = 1 << 16       # elements per block of _rint_cast (trnsim's choice: 512 KiB of float64)


def _rint_cast(a, target):
    """Floats to an integer dtype: each value rounded to nearest even as a float64, then NumPy's cast, a block of
    :data:`_RINT_BLOCK` elements at a time (the same values as ``np.rint(a.astype(np.float64)).astype(target)``;
    the whole-array float64 copies that took, 2x the input's bytes from float64 and 4x from float32, were held
    at once: nki-library's attention_block_tkg builds its attention mask in float32 and casts it to uint8 so)."""
    out = np.empty_like(a, dtype=target)
    if a.size == 0:
        return out
    it = np.nditer([a, out], flags=["external_loop", "buffered", "zerosize_ok"],
                   op_flags=[["readonly"], ["writeonly"]], op_dtypes=[np.float64, target], casting="unsafe",
                   buffersize=_RINT_BLOCK)
    with it:
        for x, y in it:
            y[...] = np.rint(x)
    return out



def sizeinbytes(dtype):
    x4 = _x4_name(dtype)
    if x4 is not None:
        return dtype_of(x4).itemsize
    return np.dtype(dtype).itemsize


def finfo(dtype):
    return ml_dtypes.finfo(np.dtype(dtype))


bfloat = bfloat16


def is_float_type(dtype):
    """True for floating-point dtypes, including ml_dtypes' bfloat16 / FP8 (NumPy kind 'V'); False for the packed
    x4 formats (their elements are packed integers to NumPy)."""
    if _x4_name(dtype) is not None:
        return False
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return True
    try:
        ml_dtypes.finfo(dt)
        return True
    except (ValueError, TypeError):
        return False
