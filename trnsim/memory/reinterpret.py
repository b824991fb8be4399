"""Bit reinterpretation of a buffer's bytes as another dtype (``t.view(dtype)``, ``t.ap(..., dtype=)``).

A view whose dtype differs from its buffer's sees the buffer as the hardware holds it: a run of bytes, each
element of the buffer in its real encoding (little-endian), read ``itemsize`` bytes at a time in the view's dtype.
Its offset and strides count elements of the *view's* dtype over that byte image.

trnsim stores narrow floats (bf16, fp16, fp8, e8m0) as float32 values (``dtypes.py``: the shadow store), so such a
view cannot be a NumPy view of the storage.  A :class:`Reinterp` then converts on every access:

- read: the buffer elements under the view are encoded to their real bit patterns (ml_dtypes; bf16 by taking the
  float32's upper half, which keeps NaN payloads), the bytes are read as the view's dtype and decoded to that
  dtype's storage (float32 values for narrow floats);
- write (:meth:`Reinterp.store`, called by the ISA's ``write`` after the instruction filled the array ``.np``
  gave it): the values are encoded in the view's dtype, spliced into the byte image of the buffer elements under
  the view (bytes the view does not cover keep their value) and decoded back into the buffer's storage.

A buffer held in its real encoding (``Buffer.native``: large narrow-float kernel inputs in HBM) is its own byte
image: a view of another dtype reads and writes those bytes directly (``Reinterp(..., native=True)``), and a view
in the buffer's own dtype converts its elements to and from float32 at access (:class:`Native`).

When neither side is stored in a shadow form (float32, tfloat32, integers, bool, packed x4 formats), the view is
a plain NumPy view of the storage's bytes (zero copy, writes go through) and no conversion is done.

Views of a different element size count offsets in other units than the buffer, so the scheduler (which tracks
dependencies by buffer element ranges) is given the range of buffer elements the view's bytes touch, as a
conservative access pattern (:meth:`Reinterp.sched`).  NaN payloads are kept (``dtypes.to_real`` /
``from_real``), so any byte pattern survives a trip through a shadow-stored buffer.
"""

from __future__ import annotations

import numpy as np

from .dtypes import from_real, to_real

__all__ = ["Reinterp", "Native", "reinterp", "view_rv", "is_real"]


def is_real(dt) -> bool:
    """Whether ``dt``'s storage holds its real bit patterns (so a NumPy view of the bytes is exact)."""
    return dt.storage.itemsize == dt.itemsize and (not dt.is_float or dt.storage == dt.np)


def _encode(dt, vals: np.ndarray) -> np.ndarray:
    """A fresh, writable, contiguous uint8 array: the real bytes of storage values ``vals`` of dtype ``dt``."""
    if is_real(dt):
        return np.ascontiguousarray(vals, dtype=dt.storage).copy().view(np.uint8)
    return np.ascontiguousarray(to_real(dt, vals)).view(np.uint8)


def _decode(dt, arr: np.ndarray) -> np.ndarray:
    """Storage values of ``arr`` holding elements of dtype ``dt`` in their real encoding (``arr.dtype`` is the
    real NumPy dtype of ``dt``, or its storage when that is the real encoding)."""
    if is_real(dt):
        return np.array(arr, dtype=dt.storage)
    return from_real(dt, arr)


def _real_np(dt):
    return dt.storage if is_real(dt) else dt.np


class Reinterp:
    """How a view of dtype ``dt`` reads a buffer of dtype ``bt``: ``conv`` when values are converted (a shadow
    store on either side), ``osz``/``nsz`` the buffer's and the view's element sizes."""

    __slots__ = ("bt", "dt", "osz", "nsz", "conv", "native")

    def __init__(self, bt, dt, native=False):
        self.bt = bt
        self.dt = dt
        self.osz = bt.itemsize
        self.nsz = dt.itemsize
        # native: the buffer holds its real encoding (Buffer.native), so its bytes are the image as they are
        self.native = native
        self.conv = not ((native or is_real(bt)) and is_real(dt))

    # -- geometry ------------------------------------------------------------------------------------
    def buffer_range(self, lo, hi):
        """The buffer elements ``[bl, bh)`` holding the bytes of view elements ``[lo, hi)``."""
        return (lo * self.nsz) // self.osz, -(-(hi * self.nsz) // self.osz)

    def sched(self, t):
        """A conservative access pattern in buffer elements for the scheduler: the buffer elements the view's
        bytes touch, as a pattern that never counts as dense (a write through it does not hide earlier writes,
        as it may cover only part of an element) and has no row structure (overlaps anything in its range)."""
        if self.osz == self.nsz:
            return (t.offset, t.shape, t.strides)
        lo, hi = t.extent()
        return (lo, (2, hi - lo), (0, 1))

    def pfree(self, buf):
        """Elements of the view's dtype per partition of an on-chip buffer (None when not whole)."""
        b = buf.pfree * self.osz
        return b // self.nsz if b % self.nsz == 0 else None

    # -- data ----------------------------------------------------------------------------------------
    def _image(self, t):
        """``(raw, bl, bh, off)``: the bytes of the buffer elements under view ``t`` and the byte offset of the
        view's element 0 in ``raw``."""
        lo, hi = t._extent()
        bl, bh = self.buffer_range(lo, hi)
        data = t.buf.data[bl:bh]
        raw = data.copy().view(np.uint8) if self.native else _encode(self.bt, data)
        return raw, bl, bh, t.offset * self.nsz - bl * self.osz

    def _over(self, t, raw, off):
        nsz = self.nsz
        return np.ndarray(t.shape, dtype=_real_np(self.dt), buffer=raw, offset=off,
                          strides=tuple(st * nsz for st in t.strides))

    def read(self, t) -> np.ndarray:
        """The view's values in its dtype's storage form (a copy)."""
        if t.size == 0:
            return np.zeros(t.shape, dtype=self.dt.storage)
        raw, _, _, off = self._image(t)
        return _decode(self.dt, self._over(t, raw, off))

    def store(self, t, values: np.ndarray):
        """Write ``values`` (storage form of the view's dtype, already rounded to it) through view ``t``."""
        if t.size == 0:
            return
        raw, bl, bh, off = self._image(t)
        dst = self._over(t, raw, off)
        v = np.broadcast_to(np.asarray(values), t.shape)
        if is_real(self.dt):
            dst[...] = v
        else:
            dst.view(np.uint8 if self.nsz == 1 else np.uint16)[...] = to_real(self.dt, v).view(
                np.uint8 if self.nsz == 1 else np.uint16)
        if self.native:
            t.buf.writable()[bl:bh] = raw.view(self.bt.np)
        else:
            t.buf.writable()[bl:bh] = _decode(self.bt, raw.view(_real_np(self.bt)))

    def zero_copy(self, t) -> np.ndarray:
        """The NumPy view of a view whose both dtypes are stored in their real encoding (writes go through: a
        borrowed buffer is copied first, ``Buffer.writable``)."""
        data = t.buf.writable()
        if self.native:
            data = data.view(np.uint8)
        nsz = self.nsz
        return np.ndarray(t.shape, dtype=self.dt.storage, buffer=data, offset=t.offset * nsz,
                          strides=tuple(st * nsz for st in t.strides))

    def _bytes_mask(self, t, w):
        lo, hi = t._extent()
        bl, bh = self.buffer_range(lo, hi)
        return np.repeat(w[bl:bh], self.osz).astype(np.uint8), bl, bh, t.offset * self.nsz - bl * self.osz

    def written(self, t, w) -> np.ndarray:
        """Per view element: whether every byte of it was written (``w``: the buffer's written flags)."""
        if t.size == 0:
            return np.ones(t.shape, dtype=np.bool_)
        mb, _, _, off = self._bytes_mask(t, w)
        nsz = self.nsz
        per = np.ndarray(t.shape + (nsz,), dtype=np.uint8, buffer=mb, offset=off,
                         strides=tuple(st * nsz for st in t.strides) + (1,))
        return per.all(axis=-1)

    def mark_written(self, t, w):
        """Mark the buffer elements the view's bytes touch as written."""
        if t.size == 0:
            return
        mb, bl, bh, off = self._bytes_mask(t, w)
        mb[:] = 0
        nsz = self.nsz
        per = np.ndarray(t.shape + (nsz,), dtype=np.uint8, buffer=mb, offset=off,
                         strides=tuple(st * nsz for st in t.strides) + (1,))
        per[...] = 1
        touched = mb.reshape(bh - bl, self.osz).any(axis=1)
        w[bl:bh] |= touched


class Native:
    """A view in its buffer's own dtype over a buffer held in its real encoding (``Buffer.native``: HBM bf16, fp16,
    fp8 as their bits): reads decode the view's elements to the float32 storage form (``dtypes.from_real``, exact,
    NaN payloads kept), writes encode them back (``to_real``).  Only the view's own elements are converted (a
    strided view of the bits), so a DMA reading a tile of a large tensor costs a conversion of that tile.  The
    geometry is the buffer's (same element size): the scheduler sees the view's own pattern."""

    __slots__ = ("bt", "dt", "osz", "nsz")
    conv = True
    native = True

    def __init__(self, dt):
        self.bt = self.dt = dt
        self.osz = self.nsz = dt.itemsize

    def buffer_range(self, lo, hi):
        return lo, hi

    def sched(self, t):
        return (t.offset, t.shape, t.strides)

    def bits(self, t, write=False):
        """The view's elements as their real encoding: a NumPy view of the buffer (``write``: of its storage for
        a write, ``Buffer.writable``; otherwise read-only while the buffer is borrowed)."""
        isz = self.nsz
        return np.ndarray(t.shape, dtype=self.dt.np, buffer=t.buf.writable() if write else t.buf.data,
                          offset=t.offset * isz, strides=tuple(st * isz for st in t.strides))

    def read(self, t) -> np.ndarray:
        if t.size == 0:
            return np.zeros(t.shape, dtype=self.dt.storage)
        return from_real(self.dt, self.bits(t))

    def store(self, t, values: np.ndarray):
        """Write ``values`` (float32 storage values of the dtype, already rounded to it) through view ``t``."""
        if t.size == 0:
            return
        v = np.broadcast_to(np.asarray(values, dtype=np.float32), t.shape)
        codes = to_real(self.dt, v)
        buf = t.buf
        if buf.fresh and t.is_contiguous():
            # a contiguous run of a buffer never read yet: stored without a sentinel fill of it first
            isz = self.nsz
            data = buf.claim_range(t.offset, t.offset + t.size)
            np.ndarray(t.shape, dtype=self.dt.np, buffer=data, offset=t.offset * isz,
                       strides=tuple(st * isz for st in t.strides))[...] = codes
            return
        self.bits(t, write=True)[...] = codes


_CACHE: dict = {}
_NATIVE: dict = {}      # (buffer dtype name, view dtype name) -> the Native / Reinterp of a native buffer's view


def view_rv(buf, dt):
    """How a view of dtype ``dt`` reads ``buf`` (what :func:`reinterp` gives, with the buffer's storage taken into
    account): None when the view is the storage itself."""
    if not buf.native:
        return None if dt is buf.dtype else reinterp(buf.dtype, dt)
    key = (buf.dtype.name, dt.name)
    r = _NATIVE.get(key)
    if r is None:
        r = Native(buf.dtype) if dt.name == buf.dtype.name else Reinterp(buf.dtype, dt, native=True)
        _NATIVE[key] = r
    return r


def reinterp(bt, dt):
    """The :class:`Reinterp` of a view of dtype ``dt`` over a buffer of dtype ``bt``, or None when the view reads
    the storage as it is (same dtype, or same size with both stored in their real encoding)."""
    key = (bt.name, dt.name)
    r = _CACHE.get(key, 0)
    if r != 0:
        return r
    if bt.name == dt.name or (bt.itemsize == dt.itemsize and is_real(bt) and is_real(dt)):
        r = None
    else:
        r = Reinterp(bt, dt)
    _CACHE[key] = r
    return r
