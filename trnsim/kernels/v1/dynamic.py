"""Legacy NKI indices whose value lives in a tile: dynamic offsets and indirect (per-partition) rows.

Two forms occur in v1 kernels:

* a **dynamic offset**: a one-element on-chip tile used as an index, alone or added to an index expression
  (``src[ix, offsets[0, i] + iy]``, ``src[ix, offsets[0, i], iz]``).  It moves the whole access along one dimension
  by the tile's value, as ``nisa.tensor_copy_dynamic_src`` / ``_dst`` read it from SBUF.  trnsim runs kernels
  eagerly, so the value is in the tile when the view is formed: the view is the strided view at that offset, checked
  against the tensor's bounds, and it remembers the offset tile (``_dyn``) so the instruction records reading it.
  A shape-only run has no values, so it cannot place the view: it raises ``NotImplementedError`` (as the v2
  ``ap(scalar_offset=tensor)`` does).
* an **indirect index**: a tile of several integers (one per partition, ``[N, 1]`` or ``[N]``) indexing a tensor's
  first dimension (``hbm[indices_tile, ix]``, ``counts[bins, :]``), as ``nl.atomic_rmw`` takes its destination, or
  the first dimension after integer indices (``hbm[b, indices_tile, ix]``: the rows of ``hbm[b]``).
  Each partition ``p`` addresses row ``indices[p]``: the result is an :class:`IndirectRows`, one view per partition
  (not a strided view; only the instructions that take a gathered destination accept it).
"""

from __future__ import annotations

from ...isa.errors import NkiValidationError
from ...memory import SBUF, Tensor
from ...memory.tensor import GatheredView, integer_values
from .index import AffineOps, IndexExpr

__all__ = ["DynIndex", "IndirectRows", "is_dynamic_key", "dynamic_value", "indirect_rows"]


class DynIndex(AffineOps):
    """``expr + sum(coef * value(tile))``: an affine index expression plus terms read from one-element tiles."""

    __slots__ = ("expr", "terms")
    __array_priority__ = 1001     # NumPy scalars defer to our operators (above IndexExpr's)

    def __init__(self, expr, terms):
        self.expr = expr if isinstance(expr, IndexExpr) else IndexExpr((), (), int(expr))
        self.terms = tuple(terms)         # ((one-element Tensor, int coef), ...)

    @classmethod
    def of(cls, tile):
        return cls(IndexExpr((), (), 0), ((tile, 1),))

    def _combine(self, other, sign):
        if isinstance(other, DynIndex):
            return DynIndex(self.expr._combine(other.expr, sign),
                            self.terms + tuple((t, sign * c) for t, c in other.terms))
        if isinstance(other, Tensor):
            return self._combine(DynIndex.of(other), sign)
        return DynIndex(self.expr._combine(other, sign), self.terms)

    def __neg__(self):
        return DynIndex(-self.expr, tuple((t, -c) for t, c in self.terms))

    def __mul__(self, other):
        if isinstance(other, (DynIndex, IndexExpr, Tensor)):
            raise TypeError("a product of two indices is not affine; a dynamic index is (tile value) * integer + "
                            "index expression")
        if isinstance(other, bool) or not hasattr(other, "__index__"):
            raise TypeError(f"a dynamic index can only be scaled by an integer, got {type(other).__name__}")
        k = int(other.__index__())
        return DynIndex(self.expr * k, tuple((t, c * k) for t, c in self.terms))

    __rmul__ = __mul__

    def __repr__(self):
        ts = " + ".join(f"{c}*{t.name}[0]" for t, c in self.terms)
        return f"DynIndex({ts} + {self.expr!r})"


def is_dynamic_key(k):
    """Whether an index key reads its value from a tile (a :class:`DynIndex` or an on-chip tensor)."""
    return isinstance(k, DynIndex) or (isinstance(k, Tensor) and k.buf.kind != "hbm")


def _nm(t):
    return f"tile `{t.name}`" if t.name else f"an unnamed {t.buf.kind.upper()} tile of shape {list(t.shape)}"


def dynamic_value(t, loc, what="index"):
    """The integer held by the one-element on-chip tile ``t`` (read eagerly, as the engine reads its offset)."""
    if t.size != 1:
        raise NkiValidationError(f"{what}: a dynamic offset must be one element (e.g. offsets[0, i]); {_nm(t)} "
                                 f"has shape {list(t.shape)}", what, "index", list(t.shape), [1, 1], loc)
    if t.buf.kind != SBUF:
        raise NkiValidationError(f"{what}: a dynamic offset must be in SBUF; {_nm(t)} is in "
                                 f"{t.buf.kind.upper()}", what, "index", t.buf.kind, SBUF, loc)
    return _int_values(t, loc, what)[0]


def _int_values(t, loc, what):
    if t.buf.data is None:
        raise NotImplementedError(f"{what}: the index held in {_nm(t)} is a value a shape-only run does not "
                                  "compute; run with data (execute=True) to place the dynamic access")
    v = integer_values(t)
    if v is None:
        raise NkiValidationError(f"{what}: index {_nm(t)} must hold integers (dtype {t.dtype.name})", what,
                                 "index", t.dtype.name, "int32", loc)
    return v


def resolve_dynamic_keys(keys, loc):
    """``keys`` with every dynamic key replaced by its static index expression (the tile values read now), and
    the one-element tiles read."""
    out, tiles = [], []
    for d, k in enumerate(keys):
        if isinstance(k, Tensor) and k.size != 1:
            raise NkiValidationError(
                f"index: {_nm(k)} indexes dimension {d} with {k.size} values; trnsim takes a tile of several "
                "indices only on the first dimension (indirect rows, one index per partition: t[indices, ...]), and "
                "elsewhere a one-element tile (a dynamic offset, e.g. offsets[0, i])", "index", None, list(k.shape),
                1, loc)
        if isinstance(k, Tensor):
            k = DynIndex.of(k)
        if isinstance(k, DynIndex):
            e = k.expr
            for t, c in k.terms:
                e = e + c * dynamic_value(t, loc)
                tiles.append(t)
            out.append(e)
        else:
            out.append(k)
    return tuple(out), tuple(tiles)


class IndirectRows(GatheredView):
    """``tensor[indices, ...]`` with a tile of row indices: one row view per partition of ``indices``.
    ``rows[p]`` is the view ``tensor[indices[p], ...]`` of shape ``[1, F]``; ``index`` is the index tile (read by
    the instruction that uses the rows)."""

    __slots__ = ("index", "base", "oob", "dim")

    def __init__(self, rows, shape, dtype, name, index, base, oob=(), dim=0):
        super().__init__(rows, shape, dtype, name)
        self.index = index
        self.base = base
        self.oob = tuple(oob)      # (partition, index value) of the indices outside the dimension (their row: None)
        self.dim = dim             # the dimension of the indexed tensor the tile indexes

    def check(self, loc, lo=0, hi=None):
        """Refuse if an index of partitions ``[lo, hi)`` (the ones an instruction uses: all, or those a mask
        keeps) lies outside the indexed dimension; indices of partitions a mask leaves out are never used."""
        hi = len(self.rows) if hi is None else hi
        for p, v in self.oob:
            if lo <= p < hi:
                n = self.base.shape[0]
                raise NkiValidationError(
                    f"Out-of-bound access for tensor `{self.name}` on dimension {self.dim}: index tile "
                    f"`{self.index.name}` holds {v}, outside [0, {n - 1}] (on partition {p})", "index", "indices", v,
                    n, loc)

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"IndirectRows({self.name!r}, shape={list(self.shape)}, rows={len(self.rows)})"


def indirect_rows(base, keys, loc, view_of, dim=0):
    """``base[keys]`` where ``keys[0]`` is a tile of row indices (one per partition) and the other keys index the
    remaining dimensions (ints, slices, index expressions); ``view_of(base, keys)`` forms one static view.  ``dim``:
    the dimension of the tensor the kernel indexed that ``base``'s first is (``t[b, indices, ...]`` indexes
    ``t[b]``'s rows).  An index outside the dimension is refused when an instruction uses its partition
    (:meth:`IndirectRows.check`): a mask may leave it out."""
    idx = keys[0]
    if not isinstance(idx, Tensor):
        raise NkiValidationError(f"index of tensor `{base.name}`: a tile of indices may only index the first "
                                 "dimension", "index", None, None, None, loc)
    if any(is_dynamic_key(k) for k in keys[1:]):
        raise NkiValidationError(f"index of tensor `{base.name}`: only the first dimension may be indexed by a tile "
                                 "of indices", "index", None, None, None, loc)
    if idx.ndim not in (1, 2) or (idx.ndim == 2 and idx.shape[1] != 1):
        raise NkiValidationError(f"index of tensor `{base.name}`: a tile of row indices must have shape [N, 1] or "
                                 f"[N] (one index per partition), got {list(idx.shape)}", "index", "indices",
                                 list(idx.shape), "[N, 1]", loc)
    if idx.buf.data is None:
        # a shape-only run has no index values: each partition still moves one row (one DMA descriptor per index,
        # the same bytes whichever row it names), so the rows are timed as row 0; nothing is bounds-checked
        vals = [0] * (idx.shape[0] if idx.ndim else 1)
    else:
        vals = _int_values(idx, loc, "index")
    n0 = base.shape[0]
    oob = [(p, int(v)) for p, v in enumerate(vals) if not 0 <= v < n0]
    bad = {p for p, _ in oob}
    rows = []
    free = None
    for p, v in enumerate(vals):
        r = view_of(base, (0 if p in bad else int(v),) + tuple(keys[1:]))
        # an expression view keeps the indexed dimension (size 1); a plain index drops it
        f = tuple(r.shape[1:]) if r.ndim == base.ndim and r.shape and r.shape[0] == 1 else tuple(r.shape)
        free = f if free is None else free
        rows.append(None if p in bad else (r if tuple(r.shape) == (1,) + f else r.reshape((1,) + f)))
    return IndirectRows(rows, (len(rows),) + (free or ()), base.dtype, base.name, idx, base, oob, dim)
