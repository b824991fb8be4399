"""Legacy NKI index expressions: ``nl.arange``, ``nl.mgrid`` and the affine arithmetic built from them.

An index expression is an affine function of the coordinates of an iteration space, with NumPy broadcasting
semantics: ``nl.arange(128)[:, None]`` has shape ``(128, 1)`` and value ``j0`` at coordinate ``(j0, j1)``;
``4 * i_p + i_f + 3`` combines them.  Indexing a tile with expressions is a strided view (each coordinate axis
gets the stride ``sum(tensor_stride[d] * coef[d][axis])``), so no data is gathered.

Comparing an expression with a number or another expression gives a :class:`Predicate`.  Predicates that bound
each axis separately (``i_p < n``, ``j * 512 + i_f < size``) combine with ``&`` into a rectangular region of the
iteration space: that is what ``mask=`` restricts an instruction to.
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["IndexExpr", "Predicate", "arange", "mgrid", "broadcast_shapes", "MaskError"]


class MaskError(ValueError):
    """A mask trnsim cannot turn into a region of the iteration space."""


def broadcast_shapes(*shapes):
    """NumPy's broadcast of shapes (right-aligned)."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, n in enumerate(s):
            a = rank - len(s) + i
            if n == 1:
                continue
            if out[a] not in (1, n):
                raise ValueError(f"index expressions of shapes {[list(x) for x in shapes]} do not broadcast")
            out[a] = n
    return tuple(out)


class AffineOps:
    """``+`` and ``-`` of an affine index from its ``_combine(other, sign)`` and ``__neg__`` (shared by
    :class:`IndexExpr` and the dynamic index of ``dynamic.py``)."""

    __slots__ = ()

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)


class IndexExpr(AffineOps):
    """``const + sum(coef[a] * j_a)`` over the coordinates ``j_a`` of an iteration space of ``shape``."""

    __slots__ = ("shape", "coefs", "const")
    __array_priority__ = 1000     # NumPy scalars defer to our operators

    def __init__(self, shape, coefs, const=0):
        self.shape = tuple(int(s) for s in shape)
        self.coefs = tuple(int(c) for c in coefs)
        self.const = int(const)

    # -- shape --------------------------------------------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    def aligned(self, rank):
        """``(shape, coefs)`` right-aligned to ``rank`` axes."""
        pad = rank - len(self.shape)
        if pad < 0:
            raise ValueError(f"an index expression of shape {list(self.shape)} cannot be aligned to rank {rank}")
        return (1,) * pad + self.shape, (0,) * pad + self.coefs

    def value_range(self, box=None):
        """``(lo, hi)`` inclusive range of values over the iteration space (or over ``box``: per-axis
        ``(start, stop)`` right-aligned to this expression's rank)."""
        lo = hi = self.const
        for a, (n, c) in enumerate(zip(self.shape, self.coefs)):
            start, stop = (0, n) if box is None else box[a]
            if stop <= start:
                return None
            if n == 1:
                continue          # a broadcast axis: the coordinate is always 0
            if c >= 0:
                lo += c * start
                hi += c * (stop - 1)
            else:
                lo += c * (stop - 1)
                hi += c * start
        return lo, hi

    def __getitem__(self, key):
        """NumPy-style ``[:, None]`` / ``[None, :]`` placement of the axes."""
        if not isinstance(key, tuple):
            key = (key,)
        shape, coefs = [], []
        it = iter(zip(self.shape, self.coefs))
        for k in key:
            if k is None:
                shape.append(1)
                coefs.append(0)
            elif isinstance(k, slice) and k == slice(None):
                try:
                    n, c = next(it)
                except StopIteration:
                    raise IndexError("too many ':' in the index of an nl.arange expression") from None
                shape.append(n)
                coefs.append(c)
            else:
                raise IndexError("an nl.arange expression can only be indexed with ':' and None "
                                 f"(to place its axis), got {k!r}")
        for n, c in it:
            shape.append(n)
            coefs.append(c)
        return IndexExpr(shape, coefs, self.const)

    # -- affine arithmetic --------------------------------------------------------------------------
    def _combine(self, other, sign):
        if _DEFER and isinstance(other, _DEFER):
            return NotImplemented           # a tile (dynamic offset) + an expression: the tile side builds it
        if isinstance(other, IndexExpr):
            shape = broadcast_shapes(self.shape, other.shape)
            r = len(shape)
            _, c1 = self.aligned(r)
            _, c2 = other.aligned(r)
            return IndexExpr(shape, [a + sign * b for a, b in zip(c1, c2)], self.const + sign * other.const)
        v = _as_int(other, "+" if sign > 0 else "-")
        return IndexExpr(self.shape, self.coefs, self.const + sign * v)

    def __neg__(self):
        return IndexExpr(self.shape, [-c for c in self.coefs], -self.const)

    def __pos__(self):
        return self

    def __mul__(self, other):
        if isinstance(other, IndexExpr):
            raise TypeError("the product of two index expressions is not affine; NKI index expressions are "
                            "affine (coefficient * index + offset)")
        v = _as_int(other, "*")
        return IndexExpr(self.shape, [c * v for c in self.coefs], self.const * v)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        raise TypeError("'//' of an index expression is not affine; use a separate nl.arange for each level "
                        "of the tiling")

    __mod__ = __truediv__ = __floordiv__

    # -- comparisons: predicates ------------------------------------------------------------------
    def _cmp(self, other, op):
        diff = self - other if not isinstance(other, IndexExpr) else self._combine(other, -1)
        return Predicate.of(diff, op)

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __eq__(self, other):
        if not isinstance(other, (IndexExpr, int)):
            return NotImplemented
        return self._cmp(other, "==")

    def __ne__(self, other):
        if not isinstance(other, (IndexExpr, int)):
            return NotImplemented
        return self._cmp(other, "!=")

    __hash__ = object.__hash__

    def __repr__(self):
        terms = [f"{c}*j{a}" for a, c in enumerate(self.coefs) if c and self.shape[a] > 1]
        return f"IndexExpr({' + '.join(terms + [str(self.const)])}, shape={list(self.shape)})"


_DEFER = ()      # types whose operators build a mixed index (set by the modules that define them)


def defer_to(*types):
    """Let ``types`` (tiles, dynamic indices) handle ``expr + x`` / ``expr - x`` themselves."""
    global _DEFER
    _DEFER = tuple(dict.fromkeys(_DEFER + tuple(types)))


def _as_int(v, op):
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"index expression {op} {type(v).__name__} {v!r}: only integers combine with NKI "
                        "index expressions")
    return int(v.__index__())


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}


class Predicate:
    """A conjunction of ``expr <op> 0`` comparisons over an iteration space."""

    __slots__ = ("terms", "shape")

    def __init__(self, terms, shape):
        self.terms = tuple(terms)          # ((IndexExpr, op), ...)
        self.shape = tuple(shape)

    @classmethod
    def of(cls, expr, op):
        return cls(((expr, op),), expr.shape)

    def __and__(self, other):
        if isinstance(other, (bool, np.bool_)):
            # a condition decided when traced (on loop indices): ``pred & True`` is pred, ``pred & False`` keeps
            # nothing (a term that never holds)
            return self if other else Predicate(self.terms + ((IndexExpr((), (), 1), "<="),), self.shape)
        if not isinstance(other, Predicate):
            return NotImplemented
        return Predicate(self.terms + other.terms, broadcast_shapes(self.shape, other.shape))

    __rand__ = __and__

    def __or__(self, other):
        raise MaskError("'|' of masks gives a region that is not rectangular; trnsim supports masks that are a "
                        "conjunction ('&') of bounds on separate index axes")

    def __invert__(self):
        if len(self.terms) != 1:
            raise MaskError("'~' of a combined mask gives a region that is not rectangular")
        e, op = self.terms[0]
        inv = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}[op]
        return Predicate(((e, inv),), self.shape)

    def __bool__(self):
        raise TypeError("an NKI mask/predicate has no truth value; pass it as mask= (or to affine_select)")

    def evaluate(self, shape):
        """The predicate as a NumPy bool array broadcast to ``shape`` (for checking and for non-box use)."""
        import numpy as np
        out = np.ones(shape, dtype=bool)
        r = len(shape)
        for e, op in self.terms:
            s, c = e.aligned(r)
            v = np.full((1,) * r, e.const, dtype=np.int64)
            for a in range(r):
                if s[a] > 1 and c[a]:
                    sh = [1] * r
                    sh[a] = s[a]
                    v = v + c[a] * np.arange(s[a], dtype=np.int64).reshape(sh)
            out &= _OPS[op](v, 0)
        return out

    def box(self, shape):
        """The region ``((start, stop), ...)`` per axis of ``shape`` (right-aligned) where the predicate holds.
        Raises :class:`MaskError` if a comparison involves two axes or is ``!=``."""
        r = len(shape)
        box = [[0, n] for n in shape]
        for e, op in self.terms:
            s, c = e.aligned(r)
            axes = [a for a in range(r) if c[a] and s[a] > 1]
            if not axes:
                holds = _OPS[op](e.const, 0)
                if not holds:
                    box = [[0, 0] for _ in shape]
                continue
            if len(axes) > 1:
                # a bound on several axes keeps a rectangle only when it holds everywhere or nowhere on the
                # region kept so far (e.g. ``512*i_p + i_f + base < n`` on a tile wholly inside or outside n)
                lo_v = e.const + sum(min(c[a] * box[a][0], c[a] * (box[a][1] - 1)) for a in axes)
                hi_v = e.const + sum(max(c[a] * box[a][0], c[a] * (box[a][1] - 1)) for a in axes)
                if any(box[a][1] <= box[a][0] for a in axes):
                    continue
                at_lo, at_hi = _OPS[op](lo_v, 0), _OPS[op](hi_v, 0)
                if op != "!=" and op != "==" and at_lo and at_hi:
                    continue                     # monotone in each axis: holds at both extremes, so everywhere
                if op != "!=" and op != "==" and not at_lo and not at_hi:
                    box = [[0, 0] for _ in shape]
                    continue
                raise MaskError(f"mask term {e!r} {op} 0 involves {len(axes)} index axes and cuts the tile "
                                f"(its value ranges over [{lo_v}, {hi_v}] there), which keeps a region that is "
                                "not rectangular; trnsim supports masks that bound each axis separately")
            a = axes[0]
            if s[a] != shape[a]:
                raise MaskError(f"mask axis {a} has size {s[a]} but the instruction's iteration space has "
                                f"{shape[a]} there (shape {list(shape)})")
            coef, k = c[a], e.const
            lo, hi = _solve(coef, k, op, shape[a])
            box[a][0] = max(box[a][0], lo)
            box[a][1] = min(box[a][1], hi)
        return tuple((lo, max(lo, hi)) for lo, hi in box)

    def __repr__(self):
        return " & ".join(f"({e!r} {op} 0)" for e, op in self.terms)


def _solve(coef, k, op, n):
    """Integer ``j`` in ``[0, n)`` with ``coef*j + k <op> 0``, as ``[lo, hi)``."""
    if op == "!=":
        raise MaskError("a '!=' mask is not a rectangular region")
    # normalise to coef > 0
    if coef < 0:
        coef, k = -coef, -k
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}[op]
    # coef*j + k op 0  <=>  j op -k/coef
    if op == "<":         # j < -k/coef  <=> j <= ceil(-k/coef) - 1
        return 0, -(k // coef) if (-k) % coef == 0 else (-k) // coef + 1
    if op == "<=":
        return 0, (-k) // coef + 1
    if op == ">":
        return (-k) // coef + 1, n
    if op == ">=":
        return -((k) // coef), n
    # ==
    if (-k) % coef:
        return 0, 0
    j = (-k) // coef
    return j, j + 1


def arange(*args):
    """``nl.arange([start,] stop[, step])``: a 1-D index expression."""
    if not 1 <= len(args) <= 3:
        raise TypeError(f"nl.arange takes 1 to 3 arguments, got {len(args)}")
    if len(args) == 1:
        start, stop, step = 0, args[0], 1
    else:
        start, stop = args[0], args[1]
        step = args[2] if len(args) == 3 else 1
    start, stop, step = (_as_int(v, "arange") for v in (start, stop, step))
    if step == 0:
        raise ValueError("nl.arange step cannot be zero")
    n = max(0, -(-(stop - start) // step))
    return IndexExpr((n,), (step,), start)


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index expression per axis, placed on that axis (``.p``, ``.x``,
    ``.y``, ``.z``); iterable like NumPy's mgrid."""

    class Grid:
        __slots__ = ("exprs",)

        def __init__(self, exprs):
            self.exprs = tuple(exprs)

        def __iter__(self):
            return iter(self.exprs)

        def __len__(self):
            return len(self.exprs)

        def __getitem__(self, i):
            return self.exprs[i]

        def _axis(self, i, name):
            if i >= len(self.exprs):
                raise AttributeError(f"mgrid of rank {len(self.exprs)} has no .{name}")
            return self.exprs[i]

        p = property(lambda self: self._axis(0, "p"))
        x = property(lambda self: self._axis(1, "x"))
        y = property(lambda self: self._axis(2, "y"))
        z = property(lambda self: self._axis(3, "z"))

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        r = len(key)
        exprs = []
        ranges = []
        for k in key:
            if not isinstance(k, slice) or k.stop is None:
                raise TypeError(f"nl.mgrid takes slices start:stop[:step], got {k!r}")
            ranges.append(arange(k.start or 0, k.stop, 1 if k.step is None else k.step))
        # dense, as NumPy's mgrid ("each returned argument has the same shape": nki.language.mgrid reference):
        # every component spans the whole grid, varying along its own axis only, so an expression built from some
        # of them (e.g. ``3 * g.y + g.z``) still has the grid's shape, partition axis included
        full = [e.shape[0] for e in ranges]
        for a, e in enumerate(ranges):
            coefs = [0] * r
            coefs[a] = e.coefs[0]
            exprs.append(IndexExpr(list(full), coefs, e.const))
        return _MGrid.Grid(exprs)

    def __repr__(self):
        return "nl.mgrid"


mgrid = _MGrid()
