"""Legacy NKI tiles: tensors with operators, index-expression views, masks and pending matmul results.

A :class:`Tile` is trnsim's tensor view (the same buffers and strides as v2) with the v1 conveniences:

* ``t[i_p, j * 512 + i_f]`` with index expressions is a strided view.  Its bounds are checked when an
  instruction uses it, after the instruction's ``mask=`` has cut the iteration space down, so a masked ragged edge
  is not an out-of-bound access.
* ``a + b``, ``a * 2.0``, ``a < b``, ``-a`` issue the instruction ``nl.add`` etc. would; ``a += b`` writes in place.
* ``nisa.nc_matmul`` / ``nl.matmul`` return a :class:`PendingMatmul`: ``psum += nisa.nc_matmul(a, b)`` becomes one
  matmul accumulating into ``psum`` (as the compiler emits it), ``psum[...] = ...`` one overwriting matmul, and any
  other use materialises it into a fresh PSUM tile.
"""

from __future__ import annotations

import numpy as np

from ...isa import nc_matmul as _nc_matmul
from ...isa.errors import NkiValidationError, caller_location
from ...memory import IndexOutOfBounds, Tensor
from ..context import current
from ..tensor import NkiTensor
from . import index as _index
from .dynamic import DynIndex, indirect_rows, is_dynamic_key, resolve_dynamic_keys
from .index import IndexExpr, MaskError, Predicate, _MGrid, broadcast_shapes

__all__ = ["Tile", "PendingMatmul", "as_tile", "resolve", "mask_box", "materialize", "bind_language"]

# The ``nl`` functions behind the operators (``a + b`` is ``nl.add(a, b)``, ``t.astype`` is ``nl.copy``).  The
# language module builds on this one (it makes its tiles here), so it hands itself over with ``bind_language`` when
# it is imported, and this module never imports it: the dependency runs one way, language -> tile.
_LANGUAGE = []


def bind_language(module):
    """Called once by ``trnsim.kernels.v1.language`` at import: the module whose functions the operators issue."""
    _LANGUAGE[:] = [module]


def _nl():
    if not _LANGUAGE:       # only when a Tile was made by hand without importing the language module
        raise RuntimeError("v1 tile operators need trnsim.kernels.v1.language (import neuronxcc.nki.language)")
    return _LANGUAGE[0]


class Tile(NkiTensor):
    """A v1 NKI tile or tensor (``neuronxcc.nki.tensor``)."""

    __slots__ = ("_src", "_inplace", "_dyn", "_mbox")

    # NumPy's indexing rule (an integer index removes its dimension, on-chip too), not NkiTensor's
    _index = Tensor._index

    # -- indexing -----------------------------------------------------------------------------------
    def __getitem__(self, key):
        if isinstance(key, _MGrid.Grid):          # t[nl.mgrid[0:128, 0:1]]: one expression per dimension
            key = tuple(key.exprs)
        keys = key if isinstance(key, tuple) else (key,)
        if any(is_dynamic_key(k) for k in keys):
            return _dynamic_view(self, keys)
        if any(isinstance(k, IndexExpr) for k in keys):
            return _expr_view(self, keys)
        try:
            return Tensor.__getitem__(self, key)
        except IndexOutOfBounds as e:
            exprs = _slices_as_exprs(self, keys)
            if exprs is None:
                raise NkiValidationError(str(e), "index", None, None, None, caller_location()) from None
            # a slice reaching past the tensor is an access range, checked (as index expressions are) against the
            # region the instruction's mask keeps (``in_t[256:384, ...]`` with ``mask=i_p < 288``): neuronx-cc
            # reports the same "Out-of-bound access ... index range" only for what the mask lets through
            return _expr_view(self, exprs)

    def __setitem__(self, key, value):
        dst = self[key]
        if getattr(value, "_inplace", False) and isinstance(value, Tensor) and value.buf is dst.buf and \
                value.offset == dst.offset:
            value._inplace = False          # `t[k] op= v` already wrote t[k]
            return
        core = current().core
        loc = caller_location()
        dst = resolve(dst, None, loc)
        if getattr(type(value), "_assign_to", None) is not None:     # a result that needs its destination
            value._assign_to(dst, loc)                                  # (nl.loop_reduce accumulates into it)
            return
        if isinstance(value, PendingMatmul):
            value.issue(dst, accumulate=False, loc=loc)
            return
        from ... import isa as _isa
        mbox = getattr(value, "_mbox", None) if isinstance(value, Tile) else None
        if isinstance(value, Tensor):
            value = resolve(value, None, loc)
        if mbox is not None and tuple(value.shape) == tuple(dst.shape):
            # `t[k] = instr(..., mask=m)`: the compiler has the instruction write t[k] itself, so what the mask
            # leaves out keeps t[k]'s values; the copy covers the masked region only (nothing when it is empty)
            if box_empty(mbox):
                return
            dst, value = resolve(dst, mbox, loc), resolve(value, mbox, loc)
        parts = partition_views(dst)
        if len(parts) > 1:
            # a block tensor is written one [P, ...] tile at a time (its partition dimension is not first)
            vals = [value[idx] for idx in np.ndindex(*dst.shape[:dst.ndim - parts[0].ndim])] \
                if isinstance(value, Tensor) and tuple(value.shape) == tuple(dst.shape) else [value] * len(parts)
        else:
            vals = [value]
        for d, v in zip(parts, vals):
            if isinstance(v, Tensor):
                info = v.partition_info() if v.on_chip else None
                if d.on_chip and v.on_chip and not (info is not None and info[1] > 1 and info[2] == 0):
                    _isa.tensor_copy(core, loc, d, v)
                else:
                    _isa.dma_copy(core, loc, d, v)
            else:
                _isa.memset(core, loc, d, v)

    # -- v1 tensor methods --------------------------------------------------------------------------
    def assert_shape(self, shape):
        if tuple(self.shape) != tuple(shape):
            raise AssertionError(f"tile `{self.name}` has shape {list(self.shape)}, expected {list(shape)}")
        return self

    def astype(self, dtype):
        return _nl().copy(self, dtype=dtype)

    def expand_dims(self, axis):
        return self.expand_dim(axis)

    # -- operators ----------------------------------------------------------------------------------
    def _bin(self, other, op, reverse=False):
        if isinstance(other, (IndexExpr, DynIndex)) and op in ("add", "subtract"):
            # ``offsets[0, i] + iy``: a dynamic index (the tile's value read by the instruction that uses it)
            d = DynIndex.of(self)
            if op == "add":
                return d + other
            return other - d if reverse else d - other
        nl = _nl()
        fn = getattr(nl, op)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        return self._bin(o, "add")

    def __radd__(self, o):
        return self._bin(o, "add", True)

    def __sub__(self, o):
        return self._bin(o, "subtract")

    def __rsub__(self, o):
        return self._bin(o, "subtract", True)

    def __mul__(self, o):
        return self._bin(o, "multiply")

    def __rmul__(self, o):
        return self._bin(o, "multiply", True)

    def __truediv__(self, o):
        return self._bin(o, "divide")

    def __rtruediv__(self, o):
        return self._bin(o, "divide", True)

    def __pow__(self, o):
        return self._bin(o, "power")

    def __rpow__(self, o):
        return self._bin(o, "power", True)

    def __mod__(self, o):
        return self._bin(o, "mod")

    def __and__(self, o):
        return self._bin(o, "bitwise_and")

    def __or__(self, o):
        return self._bin(o, "bitwise_or")

    def __xor__(self, o):
        return self._bin(o, "bitwise_xor")

    def __lshift__(self, o):
        return self._bin(o, "left_shift")

    def __rshift__(self, o):
        return self._bin(o, "right_shift")

    def __lt__(self, o):
        return self._bin(o, "less")

    def __le__(self, o):
        return self._bin(o, "less_equal")

    def __gt__(self, o):
        return self._bin(o, "greater")

    def __ge__(self, o):
        return self._bin(o, "greater_equal")

    def __eq__(self, o):
        if isinstance(o, (Tensor, PendingMatmul, int, float)):
            return self._bin(o, "equal")
        return NotImplemented

    def __ne__(self, o):
        if isinstance(o, (Tensor, PendingMatmul, int, float)):
            return self._bin(o, "not_equal")
        return NotImplemented

    __hash__ = object.__hash__

    def __neg__(self):
        nl = _nl()
        return nl.negative(self)

    def __abs__(self):
        nl = _nl()
        return nl.abs(self)

    def __invert__(self):
        nl = _nl()
        return nl.invert(self)

    def _inplace_op(self, other, op):
        nl = _nl()
        loc = caller_location()
        if isinstance(other, PendingMatmul) and op == "add":
            other.issue(resolve(self, None, loc), accumulate=None, loc=loc)
        else:
            nl._binary_into(self, self, other, op, loc)
        self._inplace = True
        return self

    def __iadd__(self, o):
        return self._inplace_op(o, "add")

    def __isub__(self, o):
        return self._inplace_op(o, "subtract")

    def __imul__(self, o):
        return self._inplace_op(o, "multiply")

    def __itruediv__(self, o):
        return self._inplace_op(o, "divide")


def as_tile(t):
    """The same view as a :class:`Tile` (inputs arrive as plain NKI tensors)."""
    if isinstance(t, Tile) or not isinstance(t, Tensor):
        return t
    v = object.__new__(Tile)
    v.buf, v.offset, v.shape, v.strides, v.dtype, v.name = t.buf, t.offset, t.shape, t.strides, t.dtype, t.name
    v._np = None
    v._ext = None
    v._rv, v._bad, v._last = t._rv, t._bad, None
    v._lk = None
    return v


def _dynamic_view(t, keys):
    """``t[keys]`` where a key reads its value from a tile: a dynamic offset (a one-element tile, alone or in an
    index expression) or a tile of row indices (indirect rows).  See ``dynamic.py``."""
    loc = caller_location()
    lead = 0                   # integer indices before a tile of row indices fix those dimensions first
    while lead < len(keys) - 1 and isinstance(keys[lead], (int, np.integer)) and not isinstance(keys[lead], bool):
        lead += 1
    k0 = keys[lead]
    if isinstance(k0, Tensor) and not isinstance(k0, DynIndex) and k0.size != 1:
        base = Tile.__getitem__(t, tuple(keys[:lead])) if lead else t
        return indirect_rows(base, keys[lead:], loc, lambda b, ks: Tile.__getitem__(b, ks), dim=lead)
    static, tiles = resolve_dynamic_keys(keys, loc)
    v = _expr_view(t, static)
    v._dyn = tiles
    return v


def _slices_as_exprs(t, keys):
    """``keys`` (ints and ``start:stop[:step]`` slices, one per leading dimension) as index expressions with the
    same result shape (one axis per slice, in order), or None when they are not of that form."""
    keys = tuple(keys) + (slice(None),) * (t.ndim - len(keys))
    if len(keys) != t.ndim:
        return None
    nsl = sum(isinstance(k, slice) for k in keys)
    out, a = [], 0
    for d, k in enumerate(keys):
        if isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                return None
            start = 0 if k.start is None else int(k.start)
            stop = t.shape[d] if k.stop is None else int(k.stop)
            if start < 0 or stop < 0:
                return None
            n = max(0, -(-(stop - start) // step))
            shape, coefs = [1] * nsl, [0] * nsl
            shape[a], coefs[a] = n, step
            out.append(IndexExpr(shape, coefs, start))
            a += 1
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            out.append(int(k))
        else:
            return None
    return tuple(out)


def _expr_view(t, keys):
    """The view ``t[keys]`` where keys are ints and index expressions (checked later, see :func:`resolve`)."""
    loc = caller_location()
    if any(isinstance(k, (slice, type(Ellipsis))) or k is None for k in keys):
        raise NkiValidationError(
            f"index of tensor `{t.name}`: mixing slices (or None/...) with nl.arange/nl.mgrid index expressions "
            "is not supported; index every dimension with an expression or an integer", "index", None, keys,
            None, loc)
    if len(keys) != t.ndim:
        raise NkiValidationError(
            f"index of tensor `{t.name}` (rank {t.ndim}) with index expressions gives {len(keys)} indices; "
            "index every dimension", "index", None, len(keys), t.ndim, loc)
    exprs = []
    for k in keys:
        if isinstance(k, IndexExpr):
            exprs.append(k)
        else:
            try:
                exprs.append(IndexExpr((), (), int(k)))
            except TypeError:
                raise NkiValidationError(f"index of tensor `{t.name}`: {type(k).__name__} {k!r} is not an int or "
                                         "an index expression", "index", None, k, None, loc) from None
    shape = broadcast_shapes(*(e.shape for e in exprs))
    r = len(shape)
    strides = [0] * r
    offset = t.offset
    for d, e in enumerate(exprs):
        _, c = e.aligned(r)
        st = t.strides[d]
        offset += st * e.const
        for a in range(r):
            if shape[a] > 1:
                strides[a] += st * c[a]
    v = t._view(offset, shape, strides)
    v._src = (t, tuple(exprs))
    return v


_index.defer_to(Tensor, DynIndex)


def mask_box(mask, shape, loc, what):
    """The rectangular region of ``shape`` that ``mask`` keeps (``None``: all of it)."""
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)):
        # a condition on loop indices and constants only (``i_q * 128 >= i_k * 512`` with loop indices being ints)
        # is decided when the kernel is traced: all of the region or none of it
        return None if mask else tuple((0, 0) for _ in shape)
    if not isinstance(mask, Predicate):
        raise NkiValidationError(f"{what}: mask must be a predicate on index expressions (e.g. i_p < n), got "
                                 f"{type(mask).__name__}", what, "mask", mask, None, loc)
    try:
        box = mask.box(tuple(shape))
    except (MaskError, ValueError) as e:
        raise NkiValidationError(f"{what}: mask {mask!r} cannot be applied: {e}", what, "mask", None, None,
                                 loc) from None
    if all(lo == 0 and hi == n for (lo, hi), n in zip(box, shape)):
        return None
    return box


def track_mask(fn):
    """Wrap a v1 function that takes ``mask=`` and returns a new tile: the returned tile remembers the region the
    mask kept over its own shape (when the mask is one over that shape, or decided when traced), so that assigning
    it (``t[k] = fn(..., mask=m)``) writes that region only, as the compiled instruction would."""
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        mask = kwargs.get("mask")
        if mask is not None and isinstance(out, Tile) and out.shape:
            try:
                box = mask_box(mask, tuple(out.shape), None, fn.__name__)
            except (NkiValidationError, ValueError, TypeError):
                return out               # a mask over another iteration space (a reduction's input): untracked
            if box is not None:
                out._mbox = box
        return out
    return call


def box_empty(box):
    return box is not None and any(hi <= lo for lo, hi in box)


def _operand_box(t, box):
    """``box`` (over an iteration space) aligned to ``t``'s shape: axes where ``t`` has size 1 stay whole."""
    if box is None:
        return None
    r, q = len(box), t.ndim
    out = []
    for i in range(q):
        a = r - q + i
        if a < 0 or t.shape[i] == 1:
            out.append((0, t.shape[i]))
        else:
            out.append(box[a])
    return tuple(out)


def resolve(t, box, loc, what="instruction", name="operand"):
    """The view of operand ``t`` restricted to ``box``, its index expressions checked against its tensor's
    bounds; pending matmuls are materialised."""
    if isinstance(t, PendingMatmul):
        t = t.materialize(loc)
    if not isinstance(t, Tensor):
        return t
    b = _operand_box(t, box)
    src = getattr(t, "_src", None)
    if src is not None:
        base, exprs = src
        r = t.ndim
        for d, e in enumerate(exprs):
            sub = None if b is None else tuple(b[r - e.ndim:]) if e.ndim else ()
            rng = e.value_range(sub)
            if rng is None:
                continue
            lo, hi = rng
            if lo < 0 or hi >= base.shape[d]:
                raise NkiValidationError(
                    f"Out-of-bound access for tensor `{base.name}` on dimension {d}: index range [{lo}, {hi}] "
                    f"exceed dimension size of {base.shape[d]}", what, name, (lo, hi), base.shape[d], loc)
    if b is None:
        return t
    offset = t.offset
    shape = []
    for (lo, hi), st in zip(b, t.strides):
        offset += lo * st
        shape.append(max(0, hi - lo))
    return t._view(offset, shape, t.strides)


def partition_views(t):
    """The views an instruction can take of a tile: the tile itself, or, for an on-chip tile whose partition
    dimension is not first (a block tensor ``[B, par_dim(P), F]`` holds B tiles of P partitions), one view per
    index of the leading block dimensions, in order."""
    if not isinstance(t, Tensor) or not t.on_chip or t.ndim < 3:
        return [t]
    pf = t.buf.pfree
    d = next((i for i, st in enumerate(t.strides) if i > 0 and pf and st and st % pf == 0), None)
    if d is None:
        return [t]
    # a view whose first dimension maps to partitions is one tile, except a block tensor with one block,
    # ``[1, par_dim(P), F]``: its leading size-1 dimension reads as one partition, but a later dimension (of more
    # than one element) is the one that walks partitions
    if t.partition_info() is not None and not (t.shape[0] == 1 and t.shape[d] > 1):
        return [t]
    return [t[idx] for idx in np.ndindex(*t.shape[:d])]


def materialize(x, loc):
    return x.materialize(loc) if isinstance(x, PendingMatmul) else x


class PendingMatmul:
    """The result of ``nisa.nc_matmul`` / ``nl.matmul`` before it is known where it goes."""

    __slots__ = ("stationary", "moving", "kwargs", "loc", "shape", "_tile", "_skip")

    def __init__(self, stationary, moving, kwargs, loc, shape, skip=False):
        self.stationary = stationary
        self.moving = moving
        self.kwargs = kwargs
        self.loc = loc
        self.shape = tuple(shape)
        self._tile = None
        self._skip = skip            # masked off entirely (``mask=`` false when traced): nothing is issued

    def issue(self, dst, accumulate, loc=None):
        if self._tile is not None:
            raise NkiValidationError("this matmul result was already used; assign nc_matmul's result once",
                                     "nc_matmul", None, None, None, loc or self.loc)
        if self._skip:
            self._tile = dst
            return
        if isinstance(dst, Tensor) and dst.buf.kind != "psum" and not accumulate:
            # `sbuf_tile[...] = nc_matmul(...)`: the product lands in PSUM and is copied out, as compiled
            from ... import isa as _isa
            t = self.materialize()
            _isa.tensor_copy(current().core, loc or self.loc, dst, t)
            return
        _nc_matmul(current().core, self.loc, dst, self.stationary, self.moving, accumulate=accumulate,
                   **self.kwargs)
        self._tile = dst

    def materialize(self, loc=None):
        if self._tile is None:
            nl = _nl()
            t = nl._new(self.shape, "float32", "psum", "", self.loc)
            self.issue(t, accumulate=False)
        return self._tile

    # behave like the tile it becomes
    @property
    def dtype(self):
        from ...memory import dtype_of
        return dtype_of("float32")

    @property
    def ndim(self):
        return len(self.shape)

    def __getattr__(self, name):
        if name.startswith("_"):
            # private probes (``getattr(v, "_inplace", False)``) must not issue the matmul
            raise AttributeError(name)
        return getattr(self.materialize(), name)

    def __getitem__(self, key):
        return self.materialize()[key]


def _delegate(name):
    def fn(self, *args):
        return getattr(self.materialize(caller_location()), name)(*args)
    fn.__name__ = name
    return fn


for _n in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
           "__neg__", "__lt__", "__le__", "__gt__", "__ge__", "__pow__"):
    setattr(PendingMatmul, _n, _delegate(_n))
del _n

