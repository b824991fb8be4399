"""Tensors as views: a buffer, an element offset and an access pattern ``[[stride, count], ...]``.

This is NKI's own model (``NkiTensor.ap()``).  Every way of taking part of a tensor -- Python indexing,
``nl.ds``, the view methods, explicit access patterns -- produces a new :class:`Tensor` over the same buffer; the
NumPy array behind a view is a strided view of the buffer's storage, made on demand and never a copy.

Strides and offsets are counted in elements of the tensor's dtype.  For on-chip tensors the first dimension is
the partition dimension; its stride is a multiple of the buffer's per-partition element count.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .dtypes import DType, dtype_of
from .reinterpret import Native, view_rv
from .space import ON_CHIP, Buffer

__all__ = ["Tensor", "DynSlice", "ViewError", "IndexOutOfBounds", "GatheredView", "integer_values"]


class ViewError(ValueError):
    """A view that cannot be formed over the tensor (bad reshape, permutation, broadcast...)."""


def _unit_index(k):
    """An index that selects the single element of a dimension of size 1: ``0``, ``:``, ``0:1``, ``:1``."""
    if isinstance(k, slice):
        return k.start in (None, 0) and k.stop in (None, 1) and k.step in (None, 1)
    return isinstance(k, (int, np.integer)) and not isinstance(k, bool) and int(k) in (0, -1)


class GatheredView:
    """What ``ap(vector_offset=...)`` gives when the indices are not evenly spaced: one view per index (each the
    pattern's inner entries, with a leading dimension of 1).  Not a strided view, so only ``dma_copy`` takes it
    (the front end issues one DMA per row: a descriptor per index, as the DMA engine's indirect mode)."""

    __slots__ = ("rows", "shape", "dtype", "name")

    def __init__(self, rows, shape, dtype, name=""):
        self.rows = rows
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self):
        return f"GatheredView({self.name!r}, shape={list(self.shape)}, rows={len(self.rows)})"


class IndexOutOfBounds(IndexError):
    """An index or slice that reaches outside the tensor."""


class DynSlice:
    """``nl.ds(start, size)``: ``size`` consecutive elements from ``start`` (with an optional step)."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start, size, step=1):
        self.start = int(start)
        self.size = int(size)
        self.step = int(step)
        if self.size < 0:
            raise ValueError(f"nl.ds size must be >= 0, got {size}")

    def __repr__(self):
        return f"ds({self.start}, {self.size})"


_ROW_MAJOR: dict = {}      # a buffer shape (a tuple of ints) -> its row-major strides in elements


class Tensor:
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
        shape = buf.shape
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
            # on every dimension; anything else (and every error) takes the general path below
            offset = self.offset
            shape = []
            for k, size, st in zip(key, self.shape, self.strides):
                if type(k) is not slice or k.step is not None:
                    break
                start = k.start
                stop = k.stop
                if start is None:
                    start = 0
                elif type(start) is not int or start < 0:
                    break
                if stop is None:
                    stop = size
                elif type(stop) is not int or stop < 0:
                    break
                if stop > size or start > stop:
                    break
                offset += start * st
                shape.append(stop - start)
            else:
                return self._view(offset, shape, self.strides)
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

    # -- view methods (NKI v2 NkiTensor) -------------------------------------------------------------
    def _dim(self, dim, n=None):
        n = self.ndim if n is None else n
        if not -n <= dim < n:
            raise ViewError(f"dimension {dim} out of range for a tensor of rank {self.ndim}")
        return dim % n

    def slice(self, dim, start, end, step=1):
        key = [slice(None)] * self.ndim
        key[self._dim(dim)] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim, index):
        key = [slice(None)] * self.ndim
        key[self._dim(dim)] = int(index)
        return self[tuple(key)]

    def permute(self, dims):
        dims = tuple(self._dim(d) for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise ViewError(f"permute dims {list(dims)} are not a permutation of {list(range(self.ndim))}")
        return self._view(self.offset, [self.shape[d] for d in dims], [self.strides[d] for d in dims])

    def transpose_view(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    def broadcast(self, dim, size):
        d = self._dim(dim)
        if self.shape[d] != 1:
            raise ViewError(f"broadcast: dimension {d} of tensor {self.name!r} has size {self.shape[d]}, "
                            f"only a size-1 dimension can be broadcast")
        shape = list(self.shape)
        strides = list(self.strides)
        shape[d] = int(size)
        strides[d] = 0
        return self._view(self.offset, shape, strides)

    def broadcast_to(self, shape):
        shape = tuple(int(s) for s in shape)
        if len(shape) < self.ndim:
            raise ViewError(f"cannot broadcast shape {list(self.shape)} to {list(shape)}")
        t = self
        for _ in range(len(shape) - self.ndim):
            t = t.expand_dim(0)
        for d, (have, want) in enumerate(zip(t.shape, shape)):
            if have != want:
                t = t.broadcast(d, want)
        return t

    def expand_dim(self, dim):
        d = self._dim(dim, self.ndim + 1)
        shape = list(self.shape)
        strides = list(self.strides)
        shape.insert(d, 1)
        strides.insert(d, 0)
        return self._view(self.offset, shape, strides)

    def squeeze_dim(self, dim):
        d = self._dim(dim)
        if self.shape[d] != 1:
            raise ViewError(f"squeeze_dim: dimension {d} of tensor {self.name!r} has size {self.shape[d]}, "
                            f"not 1")
        shape = list(self.shape)
        strides = list(self.strides)
        del shape[d]
        del strides[d]
        return self._view(self.offset, shape, strides)

    def reshape_dim(self, dim, shape):
        d = self._dim(dim)
        shape = [int(s) for s in shape]
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            shape[shape.index(-1)] = self.shape[d] // known if known else 0
        prod = 1
        for s in shape:
            prod *= s
        if prod != self.shape[d]:
            raise ViewError(f"reshape_dim: dimension {d} of size {self.shape[d]} cannot become {shape}")
        st = self.strides[d]
        new_strides = []
        acc = st
        for s in reversed(shape):
            new_strides.append(acc)
            acc *= s
        new_strides.reverse()
        return self._view(self.offset, list(self.shape[:d]) + shape + list(self.shape[d + 1:]),
                          list(self.strides[:d]) + new_strides + list(self.strides[d + 1:]))

    def flatten_dims(self, start_dim, end_dim):
        a = self._dim(start_dim)
        b = self._dim(end_dim)
        if b < a:
            raise ViewError(f"flatten_dims: end_dim {end_dim} precedes start_dim {start_dim}")
        for i in range(a, b):
            if self.shape[i + 1] != 1 and self.shape[i] != 1 and \
                    self.strides[i] != self.strides[i + 1] * self.shape[i + 1]:
                raise ViewError(f"flatten_dims: dimensions {a}..{b} of tensor {self.name!r} are not "
                                f"contiguous with each other (shape {list(self.shape)}, strides "
                                f"{list(self.strides)})")
        n = 1
        for s in self.shape[a:b + 1]:
            n *= s
        inner = self.strides[b]
        return self._view(self.offset, list(self.shape[:a]) + [n] + list(self.shape[b + 1:]),
                          list(self.strides[:a]) + [inner] + list(self.strides[b + 1:]))

    def reshape(self, shape):
        if isinstance(shape, int):
            shape = (shape,)
        shape = [int(s) for s in shape]
        total = self.size
        if shape.count(-1) > 1:
            raise ViewError("reshape: only one dimension can be -1")
        if -1 in shape:
            known = 1
            for s in shape:
                if s != -1:
                    known *= s
            shape[shape.index(-1)] = total // known if known else 0
        prod = 1
        for s in shape:
            prod *= s
        if prod != total:
            raise ViewError(f"reshape: cannot view tensor {self.name!r} of shape {list(self.shape)} "
                            f"({total} elements) as {shape}")
        strides = _nocopy_strides(self.shape, self.strides, shape)
        if strides is None:
            raise ViewError(f"reshape: tensor {self.name!r} with shape {list(self.shape)} and strides "
                            f"{list(self.strides)} cannot be viewed as {shape} without a copy")
        return self._view(self.offset, shape, strides)

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        """einops-style regrouping of dimensions, e.g. ``rearrange(('p', ('a', 'b')), ('p', 'b', 'a'),
        {'a': 4})``: split grouped dimensions, permute, merge, all as views."""
        fixed = dict(fixed_sizes or {})
        src = [g if isinstance(g, (tuple, list)) else (g,) for g in src_pattern]
        if len(src) != self.ndim:
            raise ViewError(f"rearrange: source pattern {src_pattern} has {len(src)} groups for a tensor of "
                            f"rank {self.ndim}")
        t = self
        names = []
        # split source groups, innermost dim last, so indices stay valid when processed from the end
        for d in range(len(src) - 1, -1, -1):
            group = src[d]
            size = t.shape[d]
            sizes = [fixed.get(n) for n in group]
            unknown = [i for i, s in enumerate(sizes) if s is None]
            known = 1
            for s in sizes:
                if s is not None:
                    known *= s
            if len(unknown) > 1:
                raise ViewError(f"rearrange: group {group} needs sizes for all but one name")
            if unknown:
                sizes[unknown[0]] = size // known
            if int(np.prod(sizes)) != size:
                raise ViewError(f"rearrange: group {group} sizes {sizes} do not multiply to {size}")
            t = t.reshape_dim(d, sizes)
            names[0:0] = list(group)
        dst = [g if isinstance(g, (tuple, list)) else (g,) for g in dst_pattern]
        flat_dst = [n for g in dst for n in g]
        if sorted(flat_dst) != sorted(names):
            raise ViewError(f"rearrange: names {flat_dst} of the destination do not match {names}")
        t = t.permute(tuple(names.index(n) for n in flat_dst))
        # merge destination groups
        d = 0
        for g in dst:
            if len(g) > 1:
                t = t.flatten_dims(d, d + len(g) - 1)
            d += 1
        return t

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """A view given by an explicit access pattern ``[[stride, count], ...]`` (outermost first) and an
        element offset from the start of this tensor.  With ``dtype`` of another element size, the pattern and
        the offset count elements of ``dtype`` over the tensor's bytes (a bit reinterpretation, see
        ``reinterpret.py``).  A pattern reaching outside the buffer is refused when it is accessed, not when it
        is formed (kernels form patterns they use only under a condition, or only for their ``.shape``)."""
        dt = self.dtype if dtype is None else dtype_of(dtype)
        isz, nsz = self.dtype.itemsize, dt.itemsize
        start = self.offset
        if isz != nsz:
            b = self.offset * isz
            if b % nsz:
                raise ViewError(
                    f"ap(dtype={dt.name}): tensor `{self.name}` ({self.dtype.name}, shape {list(self.shape)}) "
                    f"starts at byte {b} of its buffer, not a multiple of {dt.name}'s {nsz} bytes"
                    f"{_where()}")
        start = start * isz // nsz
        base = start + (0 if offset is None else int(offset))
        shape = []
        strides = []
        for entry in pattern:
            if len(entry) != 2:
                raise ViewError(f"ap(): each access pattern entry is [stride, count], got {entry!r}")
            st, n = int(entry[0]), int(entry[1])
            if n < 0:
                raise ViewError(f"ap(): negative count {n} in pattern {pattern}")
            strides.append(st)
            shape.append(n)
        limit = self.buf.nelem if isz == nsz == self.buf.dtype.itemsize else \
            self.buf.nelem * self.buf.dtype.itemsize // nsz
        if scalar_offset is not None or vector_offset is not None:
            r = self._dynamic_offset(base, strides, shape, scalar_offset, vector_offset, indirect_dim,
                                     units=(isz, nsz, dt))
            if len(r) == 2 and vector_offset is not None:
                v = self._view(r[0], shape, r[1], dt)
                lo, hi = v._extent()
                if v.size and (lo < 0 or hi > limit):       # some index out of range: per-row view
                    r = self._dynamic_offset(base, strides, shape, None, vector_offset, indirect_dim, rows=True,
                                             units=(isz, nsz, dt))
            if len(r) == 3:                                   # indices not evenly spaced: one row view per index
                base, strides, offs = r
                rows = []
                for o in offs:
                    row = self._view(base + int(o), [1] + shape[1:], [0] + strides[1:], dt)
                    lo, hi = row._extent()
                    if row.size and (lo < 0 or hi > limit):
                        # kept as the error: dma_copy(oob_mode=skip) skips the row, any other use raises it
                        row = IndexOutOfBounds(
                            f"ap(): vector_offset row at element {row.offset} with pattern {pattern} reaches "
                            f"elements [{lo}, {hi - 1}] of tensor `{self.name}`, whose buffer holds "
                            f"{limit} {dt.name} elements")
                    rows.append(row)
                return GatheredView(rows, shape, dt, self.name)
            base, strides = r
        v = self._view(base, shape, strides, dt)
        lo, hi = v._extent()
        if v.size and (lo < 0 or hi > limit):
            # formed, not accessed yet: any access (an instruction's read or write, its extent) raises this
            v._bad = (f"ap(): access pattern {pattern} with offset {base} reaches elements [{lo}, {hi - 1}] of "
                      f"tensor `{self.name}`, whose buffer holds {limit} {dt.name} elements (pattern formed"
                      f"{_where()}; it is out of range when accessed)")
        return v

    def _dynamic_offset(self, base, strides, shape, scalar_offset, vector_offset, indirect_dim, rows=False,
                        units=None):
        """Resolve ``ap(scalar_offset=, vector_offset=, indirect_dim=)``: the offset value(s), read from the tensor
        given (trnsim runs kernels eagerly, so the value the DMA engine would read is there), step along this
        tensor's dimension ``indirect_dim`` (``value * strides[indirect_dim]``).  A scalar offset (an int or a
        one-element tensor) moves the whole pattern; a vector offset gives the position of each step of the
        pattern's first entry, which must be evenly spaced to be a view (an arbitrary gather/scatter is refused).
        The read of the offset tensor is not recorded as a dependency of the instruction (a timing simplification)."""
        if scalar_offset is not None and vector_offset is not None:
            raise ViewError("ap(): give scalar_offset or vector_offset, not both")
        nd = len(self.shape)
        if not isinstance(indirect_dim, (int, np.integer)) or not -nd <= int(indirect_dim) < nd:
            raise ViewError(f"ap(): indirect_dim={indirect_dim!r} is not a dimension of the {nd}-D tensor "
                            f"`{self.name}` (shape {tuple(self.shape)})")
        step = self.strides[int(indirect_dim)]
        if units is not None and units[0] != units[1]:        # ap(dtype=) of another size: step in its units
            if (step * units[0]) % units[1]:
                raise ViewError(f"ap(dtype={units[2].name}): dimension {indirect_dim} of tensor `{self.name}` "
                                f"steps {step * units[0]} bytes, not a multiple of {units[2].name}'s "
                                f"{units[1]} bytes{_where()}")
            step = step * units[0] // units[1]

        def values(t, what):
            if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
                return np.array([int(t)])
            if hasattr(t, "__index__") and not isinstance(t, (bool, Tensor)):      # a register (nisa.register_*)
                return np.array([t.__index__()])
            if not isinstance(t, Tensor):
                raise ViewError(f"ap(): {what} must be an int or a tensor of integers, got {type(t).__name__}")
            if t.buf.data is None:
                raise NotImplementedError(f"ap(): {what} needs the value of tensor `{t.name}`, which a shape-only "
                                          "run does not compute")
            v = integer_values(t)
            if v is None:
                raise ViewError(f"ap(): {what} tensor `{t.name}` must hold integers (dtype {t.dtype.name})")
            return v

        strides = list(strides)
        if scalar_offset is not None:
            v = values(scalar_offset, "scalar_offset")
            if v.size != 1:
                raise ViewError(f"ap(): scalar_offset must be one value, got a tensor of {v.size} elements")
            return base + int(v[0]) * step, strides
        v = values(vector_offset, "vector_offset")
        if not shape or v.size != shape[0]:
            raise ViewError(f"ap(): vector_offset has {v.size} indices but the pattern's first entry counts "
                            f"{shape[0] if shape else 0} steps")
        d = np.diff(v)
        if rows or (d.size and not np.all(d == d[0])):
            return base, strides, v * step                    # a gather/scatter: one view per index
        strides[0] = (int(d[0]) if d.size else 0) * step
        return base + int(v[0]) * step, strides

    def view(self, dtype):
        """The same bytes read as another dtype (a bit reinterpretation, ``reinterpret.py``).  Between dtypes of
        different sizes the last dimension scales by the size ratio and must be contiguous (stride 1); the other
        strides and the offset must fall on whole elements of the new dtype."""
        dt = dtype_of(dtype)
        isz, nsz = self.dtype.itemsize, dt.itemsize
        if isz == nsz:
            return self._view(self.offset, self.shape, self.strides, dt)
        what = (f"view({dt.name}) of tensor `{self.name}` ({self.dtype.name}, shape {list(self.shape)}, "
                f"strides {list(self.strides)})")
        if not self.shape:
            raise ViewError(f"{what}: a 0-d tensor cannot change element size{_where()}")
        last = self.shape[-1]
        if self.strides[-1] != 1 and last != 1:
            raise ViewError(f"{what}: the last dimension must be contiguous (stride 1) to change element size"
                            f"{_where()}")
        if (last * isz) % nsz:
            raise ViewError(f"{what}: the last dimension holds {last * isz} bytes, not a multiple of "
                            f"{dt.name}'s {nsz} bytes{_where()}")
        bad = [st for st in self.strides[:-1] if (st * isz) % nsz] + ([0] if (self.offset * isz) % nsz else [])
        if bad:
            raise ViewError(f"{what}: its offset ({self.offset}) or an outer stride does not fall on a whole "
                            f"{dt.name} element ({nsz} bytes){_where()}")
        shape = list(self.shape[:-1]) + [last * isz // nsz]
        strides = [st * isz // nsz for st in self.strides[:-1]] + [1]
        return self._view(self.offset * isz // nsz, shape, strides, dt)

    reinterpret_cast = view

    def indirect(self, index, num_elem=None):
        raise NotImplementedError("indirect (gather) access patterns are not supported by trnsim yet")

    def vector_select(self, dim, vector_offset):
        raise NotImplementedError("vector_select (dynamic offsets) is not supported by trnsim yet")

    # -- printing -----------------------------------------------------------------------------------
    def __repr__(self):
        return (f"{type(self).__name__}(name={self.name!r}, shape={list(self.shape)}, dtype={self.dtype.name}, "
                f"buffer={self.buf.kind}, offset={self.offset}, pattern={self.get_pattern()})")

    def __len__(self):
        return self.shape[0] if self.shape else 0

    def __iter__(self):
        raise TypeError("NKI tensors are not iterable; index them with slices or nl.ds")


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIB_DIR = os.path.join(_PKG_DIR, "kernels", "library")


def integer_values(t):
    """The values of tensor ``t`` (which holds data) flattened as int64, for use as indices or offsets: an integer
    dtype's, or a float dtype's when every value is a finite integer; else None."""
    v = np.asarray(t.np).reshape(-1)
    if t.dtype.is_int or (t.dtype.is_float and np.all(np.isfinite(v)) and np.all(v == np.round(v))):
        return v.astype(np.int64)
    return None


def _where():
    """`` at file:line`` of the kernel line (the innermost frame outside trnsim, or in trnsim's own kernel
    library), for error messages; only called when refusing or marking a view."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIR) or fn.startswith(_LIB_DIR):
            return f" at {fn}:{f.f_lineno}"
        f = f.f_back
    return ""


def _nocopy_strides(old_shape, old_strides, new_shape):
    """Strides that view ``old`` as ``new_shape`` without copying, or ``None`` (NumPy's rule)."""
    old = [(s, st) for s, st in zip(old_shape, old_strides) if s != 1]
    new_strides = [0] * len(new_shape)
    if not old:
        return [1] * len(new_shape) if new_shape else []
    oi = 0
    ni = 0
    nold = len(old)
    nnew = len(new_shape)
    while oi < nold and ni < nnew:
        np_ = new_shape[ni]
        op = old[oi][0]
        oj, nj = oi + 1, ni + 1
        while np_ != op:
            if np_ < op:
                if nj >= nnew:
                    return None
                np_ *= new_shape[nj]
                nj += 1
            else:
                if oj >= nold:
                    return None
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        new_strides[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            new_strides[k - 1] = new_strides[k] * new_shape[k]
        ni, oi = nj, oj
    # trailing ones
    for k in range(ni, nnew):
        new_strides[k] = 1
    if oi != nold:
        return None
    return new_strides
