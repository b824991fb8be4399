"""The view methods of :class:`trnsim.memory.tensor.Tensor` (reshaping, permuting, broadcasting, access patterns,
dtype views) and the helpers they share with it, split from ``tensor.py`` to keep each module readable.

:class:`TensorViews` is a mixin with no state of its own: every method makes a new view with ``Tensor._view`` over
the same buffer.  ``Tensor`` is its only subclass, so ``isinstance(x, TensorViews)`` is ``isinstance(x, Tensor)``.
The public names here (``ViewError``, ``IndexOutOfBounds``, ``DynSlice``, ``GatheredView``, ``integer_values``) are
imported from :mod:`trnsim.memory.tensor` as before.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .dtypes import dtype_of

__all__ = ["TensorViews", "DynSlice", "ViewError", "IndexOutOfBounds", "GatheredView", "integer_values"]


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


class TensorViews:
    """The view methods of :class:`~trnsim.memory.tensor.Tensor` (a mixin; see the module docstring)."""

    __slots__ = ()

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
            if hasattr(t, "__index__") and not isinstance(t, (bool, TensorViews)):      # a register (nisa.register_*)
                return np.array([t.__index__()])
            if not isinstance(t, TensorViews):
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
