"""Tensors as views: a buffer, an element offset and an access pattern ``[[stride, count], ...]``.

This is NKI's own model (``NkiTensor.ap()``).  Every way of taking part of a tensor -- Python indexing,
``nl.ds``, the view methods, explicit access patterns -- produces a new :class:`Tensor` over the same buffer; the
NumPy array behind a view is a strided view of the buffer's storage, made on demand and never a copy.

Strides and offsets are counted in elements of the tensor's dtype.  For on-chip tensors the first dimension is
the partition dimension; its stride is a multiple of the buffer's per-partition element count.
"""

from __future__ import annotations

import numpy as np

from .dtypes import DType
from .reinterpret import Native, view_rv
from .space import ON_CHIP, Buffer
from .tensor_views import DynSlice, GatheredView, IndexOutOfBounds, TensorViews, ViewError, _unit_index, integer_values

__all__ = ["Tensor", "DynSlice", "ViewError", "IndexOutOfBounds", "GatheredView", "integer_values"]

_ROW_MAJOR: dict = {}      # a buffer shape (a tuple of ints) -> its row-major strides in elements
_ROW_MAJOR_LAST = (None, None)      # the last (shape, strides) of Tensor.whole: the shape object, not its value


class Tensor(TensorViews):
    """A strided view of a :class:`Buffer`."""

    # _rv: how the view reinterprets its buffer's bytes (reinterpret.Reinterp) when its dtype differs from the
    # buffer's, else None; _bad: why an access pattern formed out of range cannot be accessed (None: in range);
    # _last: the array the last `.np` of a converting view gave (what `store_back` writes);
    # _lk: the view's part of an issue-cache layout key (kernels/issue_cache.py), made on first use (views are
    # never changed once made)
    __slots__ = ("buf", "offset", "shape", "strides", "dtype", "name", "_np", "_ext", "_rv", "_bad", "_last", "_lk")

    def __init__(self, buf: Buffer, offset: int, shape: tuple, strides: tuple, dtype: DType | None = None,
                 name: str | None = None):
        self.buf = buf
        self.offset = offset
        self.shape = shape
        self.strides = strides
        self.dtype = dtype if dtype is not None else buf.dtype
        self.name = name if name is not None else buf.name
        self._np = None
        self._ext = None
        self._rv = view_rv(buf, self.dtype)
        self._bad = None
        self._last = None
        self._lk = None

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def whole(cls, buf: Buffer, name: str | None = None):
        global _ROW_MAJOR_LAST
        shape = buf.shape
        last = _ROW_MAJOR_LAST
        if shape is last[0]:          # the last shape asked for, the same object (every tile of one spelling)
            strides = last[1]
        else:
            strides = _ROW_MAJOR.get(shape)
            if strides is None:
                st = []
                acc = 1
                for s in reversed(shape):
                    st.append(acc)
                    acc *= s
                strides = tuple(reversed(st))
                if len(_ROW_MAJOR) < 4096:
                    _ROW_MAJOR[shape] = strides
            _ROW_MAJOR_LAST = (shape, strides)
        t = object.__new__(cls)
        t.buf = buf
        t.offset = 0
        t.shape = shape
        t.strides = strides
        t.dtype = buf.dtype
        t.name = name if name is not None else buf.name
        t._np = None
        t._ext = None
        t._rv = None if not buf.native else view_rv(buf, buf.dtype)
        t._bad = None
        t._last = None
        t._lk = None
        return t

    def _view(self, offset, shape, strides, dtype=None):
        t = object.__new__(type(self))
        t.buf = self.buf
        t.offset = offset
        t.shape = tuple(shape)
        t.strides = tuple(strides)
        if dtype is None or dtype is self.dtype:
            t.dtype = self.dtype
            t._rv = self._rv
        else:
            t.dtype = dtype
            t._rv = view_rv(self.buf, dtype)
        t.name = self.name
        t._np = None
        t._ext = None
        t._last = None
        t._bad = None if self._bad is None else t._still_bad(self._bad)
        t._lk = None
        return t

    # -- views of another dtype and views out of range ----------------------------------------------
    def _limit(self) -> int:
        """How many elements of this view's dtype the buffer holds."""
        rv = self._rv
        if rv is None or rv.osz == rv.nsz:
            return self.buf.nelem
        return self.buf.nelem * rv.osz // rv.nsz

    def _still_bad(self, why):
        lo, hi = self._extent()
        return why if self.size and (lo < 0 or hi > self._limit()) else None

    def _refuse_bad(self):
        raise IndexOutOfBounds(self._bad)

    def store_back(self):
        """After an instruction wrote into the array ``.np`` gave: a view converting between dtypes writes it
        through to its buffer (a no-op for every other view, whose ``.np`` is the storage itself)."""
        rv = self._rv
        if rv is not None and rv.conv and self._last is not None:
            rv.store(self, self._last)

    # -- basic properties ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def buffer(self) -> str:
        return self.buf.kind

    @property
    def on_chip(self) -> bool:
        return self.buf.kind in ON_CHIP

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        acc = 1
        for s, st in zip(reversed(self.shape), reversed(self.strides)):
            if s != 1 and st != acc:
                return False
            acc *= s
        return True

    def get_pattern(self):
        """The access pattern ``[[stride, count], ...]`` of this view (outermost first)."""
        return [[st, s] for st, s in zip(self.strides, self.shape)]

    def is_indirect(self) -> bool:
        return False

    # -- the NumPy view -----------------------------------------------------------------------------
    @property
    def np(self) -> np.ndarray:
        """The strided NumPy view of the buffer's storage (raises in shape-only mode)."""
        a = self._np
        if a is None:
            data = self.buf.data
            if data is None:
                raise RuntimeError("tensor data is not available in shape-only mode")
            if self._bad is not None:
                self._refuse_bad()
            rv = self._rv
            if rv is not None:
                if rv.conv:                  # converted on every access: never cached
                    self._last = a = rv.read(self)
                    return a
                self._np = a = rv.zero_copy(self)
                return a
            isz = data.itemsize
            st = self.strides
            # the byte strides spelt out for the usual ranks (a generator into tuple() cost more than the view)
            if len(st) == 2:
                bst = (st[0] * isz, st[1] * isz)
            elif len(st) == 1:
                bst = (st[0] * isz,)
            else:
                bst = tuple([s * isz for s in st])
            a = np.ndarray(self.shape, data.dtype if self.dtype is self.buf.dtype else self.dtype.storage,
                           data, self.offset * isz, bst)
            self._np = a
        return a

    def np_for_write(self):
        """The array a write storing every element of the view fills before :meth:`store_back`: ``.np``, except
        that a view of a buffer held in its own encoding (``reinterpret.Native``) gets a new float32 array rather
        than a decode of the values the write replaces."""
        rv = self._rv
        if type(rv) is Native and self._bad is None and self.buf._data is not None:
            self._last = a = np.empty(self.shape, np.float32)
            return a
        return self.np

    def written_view(self):
        """Per element, whether it was written (None when the buffer does not track it).  For a view converting
        between dtypes of different sizes this is a copy (an element counts as written when all its bytes were);
        :meth:`mark_written` marks them."""
        w = self.buf.written
        if w is None:
            return None
        if self._bad is not None:
            self._refuse_bad()
        rv = self._rv
        if rv is not None and rv.osz != rv.nsz:
            return rv.written(self, w)
        return np.ndarray(self.shape, np.bool_, w, self.offset, self.strides)     # 1-byte elements

    def mark_written(self):
        w = self.buf.written
        if w is None or self.buf.all_written:
            return
        rv = self._rv
        if rv is not None and rv.osz != rv.nsz:
            rv.mark_written(self, w)
        else:
            self.written_view()[...] = True

    def extent(self):
        """``(lo, hi)`` element range of the buffer this view can touch (hi exclusive)."""
        e = self._ext
        if e is not None:
            return e
        if self._bad is not None:
            self._refuse_bad()
        e = self._extent()
        rv = self._rv
        if rv is not None and rv.osz != rv.nsz:         # in buffer elements: those the view's bytes touch
            e = rv.buffer_range(*e) if e[1] > e[0] else (e[0] * rv.nsz // rv.osz,) * 2
        self._ext = e
        return e

    def _extent(self):
        lo = hi = self.offset
        for s, st in zip(self.shape, self.strides):
            if s == 0:
                return self.offset, self.offset
            if st > 0:
                hi += st * (s - 1)
            else:
                lo += st * (s - 1)
        return lo, hi + 1

    # -- partitions (on-chip) -----------------------------------------------------------------------
    def partition_info(self):
        """``(start_partition, num_partitions, partition_step)`` of an on-chip view, or ``None`` when the
        view's first dimension does not map to whole partitions."""
        pf = self.buf.pfree
        rv = self._rv
        if rv is not None and rv.osz != rv.nsz:
            pf = rv.pfree(self.buf)
            if pf is None:
                return None
        if not self.shape:
            return (self.offset // pf, 1, 1)
        st = self.strides[0]
        if pf == 0 or (st % pf) != 0:
            if self.shape[0] == 1:
                return (self.offset // pf, 1, 1)
            return None
        return (self.offset // pf, self.shape[0], st // pf)

    # -- indexing -----------------------------------------------------------------------------------
    def __getitem__(self, key):
        if type(key) is tuple and len(key) == len(self.shape):
            # the common case first: a plain slice ``[a:b]`` (int or omitted bounds, within the dimension, no step)
            # on every dimension; anything else (and every error) takes the general path below.  (Dimensions read
            # by index, not zipped: the path of most instructions' operands, a quarter cheaper so.)
            offset = self.offset
            dims = self.shape
            strides = self.strides
            shape = []
            d = 0
            for k in key:
                if type(k) is not slice or k.step is not None:
                    break
                start = k.start
                stop = k.stop
                size = dims[d]
                if start is None:
                    start = 0
                elif type(start) is not int or start < 0:
                    break
                if stop is None:
                    stop = size
                elif type(stop) is not int or stop > size:
                    break
                if start > stop:                 # (a negative stop too: start is not)
                    break
                offset += start * strides[d]
                shape.append(stop - start)
                d += 1
            else:
                return self._view(offset, shape, strides)
        return self._index(key)

    def _index(self, key):
        """Indexing's general path: every key the plain-slices path of ``__getitem__`` does not take (integers,
        steps, ``None``, ``...``, ``nl.ds``), and every error.  (A subclass changes indexing rules here: the plain
        slices keep every dimension, so no rule about removed dimensions applies to them.)"""
        if not isinstance(key, tuple):
            key = (key,)
        # expand Ellipsis
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if any(k is Ellipsis for k in key):
            i = next(i for i, k in enumerate(key) if k is Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - n_real) + key[i + 1:]
        if n_real > self.ndim:
            extra = [k for k in key if k is not None and k is not Ellipsis][self.ndim:]
            if self.on_chip and self.ndim >= 1 and all(_unit_index(k) for k in extra):
                # an on-chip tile reduced to [P] by an integer index keeps its one-element free dimension:
                # t[:n, i][:n, :1] or [:n, 0] (nki-library's kernels index it so) reads that element
                unit = self._view(self.offset, list(self.shape) + [1] * len(extra),
                                  list(self.strides) + [1] * len(extra))
                return unit[key]
            raise IndexOutOfBounds(f"too many indices for tensor {self.name!r} of shape {list(self.shape)}: "
                                   f"{n_real} given")
        offset = self.offset
        shape = []
        strides = []
        d = 0
        for k in key:
            if k is None:
                shape.append(1)
                strides.append(0)
                continue
            size = self.shape[d]
            st = self.strides[d]
            if isinstance(k, slice):
                start, stop, step = k.start, k.stop, k.step
                step = 1 if step is None else int(step)
                if step == 0:
                    raise ViewError("slice step cannot be zero")
                if step > 0:
                    start = 0 if start is None else int(start)
                    stop = size if stop is None else int(stop)
                    if start < 0:
                        start += size
                    if stop < 0:
                        stop += size
                    if start < 0 or stop > size or start > stop:
                        raise IndexOutOfBounds(self._oob(d, start, stop - 1))
                    n = max(0, -(-(stop - start) // step))
                else:
                    start = size - 1 if start is None else int(start)
                    stop = -1 if k.stop is None else int(stop)
                    if start < 0:
                        start += size
                    if k.stop is not None and stop < 0:
                        stop += size
                    if start >= size or stop < -1:
                        raise IndexOutOfBounds(self._oob(d, stop + 1, start))
                    n = max(0, -(-(start - stop) // -step))
                offset += start * st
                shape.append(n)
                strides.append(st * step)
            elif isinstance(k, DynSlice):
                start, n, step = k.start, k.size, k.step
                if start < 0 or start + (n - 1) * step >= size:
                    raise IndexOutOfBounds(self._oob(d, start, start + (n - 1) * step))
                offset += start * st
                shape.append(n)
                strides.append(st * step)
            else:
                try:
                    i = int(k)
                except TypeError:
                    raise TypeError(f"tensor {self.name!r} cannot be indexed with {type(k).__name__} "
                                    f"{k!r}; use ints, slices or nl.ds(start, size)") from None
                if i < 0:
                    i += size
                if not 0 <= i < size:
                    raise IndexOutOfBounds(self._oob(d, int(k), int(k)))
                offset += i * st
            d += 1
        shape.extend(self.shape[d:])
        strides.extend(self.strides[d:])
        return self._view(offset, shape, strides)

    def _oob(self, dim, lo, hi):
        return (f"Out-of-bound access for tensor `{self.name}` on dimension {dim}: index range [{lo}, {hi}] "
                f"exceed dimension size of {self.shape[dim]}")

    # -- printing -----------------------------------------------------------------------------------
    def __repr__(self):
        return (f"{type(self).__name__}(name={self.name!r}, shape={list(self.shape)}, dtype={self.dtype.name}, "
                f"buffer={self.buf.kind}, offset={self.offset}, pattern={self.get_pattern()})")

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def __iter__(self):
        raise TypeError("NKI tensors are not iterable; index them with slices or nl.ds")
