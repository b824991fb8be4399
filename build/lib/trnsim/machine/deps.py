"""Dependency tracking between instructions by the memory they touch.

Per buffer, :class:`AccessTracker` keeps the accesses that a later access may conflict with: the writes not yet
covered by a later write, and the reads since then.  A read depends on the overlapping writes (read after write);
a write on the overlapping writes (write after write) and reads (write after read).  Entries are kept sorted by
their low element so that a query looks only at the entries whose extent can reach it (no all-pairs scan).

Two accesses overlap when their element extents ``[lo, hi)`` overlap and, for two strided tiles with the same row
pitch (a column block of a row-major matrix, or a free-dimension slice of an on-chip tile, whose extents overlap
while their elements do not), when their column ranges within the pitch overlap.  Anything else that overlaps in
extent is taken as a conflict: conservative, never missing a true dependency.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import prod

__all__ = ["AccessTracker", "overlaps"]

_GEO: dict = {}


def _geo(view):
    """``(pitch, col_lo, col_hi)`` such that every element x of the view has ``col_lo <= x % pitch < col_hi``,
    or ``None`` when the view has no such row structure."""
    g = _GEO.get(view, 0)
    if g != 0:
        return g
    off, shape, strides = view
    g = None
    if len(shape) >= 2 and shape[0] > 1 and strides[0] > 0:
        pitch = strides[0]
        w = 1
        ok = True
        for s, st in zip(shape[1:], strides[1:]):
            if st < 0:
                ok = False
                break
            w += (s - 1) * st
        c = off % pitch
        if ok and c + w <= pitch:
            g = (pitch, c, c + w)
    if len(_GEO) > 100_000:
        _GEO.clear()
    _GEO[view] = g
    return g


def overlaps(view_a, view_b) -> bool:
    """Whether two views whose extents overlap can share an element (conservative)."""
    if view_a is view_b or view_a == view_b:
        return True
    ga = _geo(view_a)
    if ga is None:
        return True
    gb = _geo(view_b)
    if gb is None or ga[0] != gb[0]:
        return True
    return ga[1] < gb[2] and gb[1] < ga[2]


def _dense(lo, hi, view) -> bool:
    return hi - lo == prod(view[1])


class AccessTracker:
    """The live accesses of one buffer.  An entry is ``(lo, hi, view, idx, engine)``.

    It also holds what the scheduler keeps per buffer: its memory (``mem``), for on-chip buffers ``kind`` and
    ``size`` (bytes per partition), the start of its first access ``t0``, the latest ready time of its accesses
    ``tdone`` and whether its space was handed back (``released``)."""

    __slots__ = ("wlo", "went", "wmax", "rlo", "rent", "rmax", "mem", "kind", "size", "t0", "tdone", "released")

    def __init__(self):
        self.wlo = []
        self.went = []
        self.wmax = 0
        self.rlo = []
        self.rent = []
        self.rmax = 0
        self.mem = None
        self.kind = None
        self.size = 0
        self.t0 = None
        self.tdone = 0.0
        self.released = False

    @staticmethod
    def _scan(los, ents, maxlen, lo, hi, view, out):
        n = len(ents)
        if n <= 8:
            for e in ents:
                if e[0] < hi and e[1] > lo and ((e[0] == lo and e[1] == hi) or overlaps(e[2], view)):
                    out.append(e)
            return
        i0 = bisect_right(los, lo - maxlen)
        i1 = bisect_left(los, hi)
        for k in range(i0, i1):
            e = ents[k]
            if e[1] > lo and ((e[0] == lo and e[1] == hi) or overlaps(e[2], view)):
                out.append(e)

    def writers(self, lo, hi, view, out):
        """Append the live writes overlapping ``view`` to ``out``."""
        if self.went:
            self._scan(self.wlo, self.went, self.wmax, lo, hi, view, out)

    def readers(self, lo, hi, view, out):
        if self.rent:
            self._scan(self.rlo, self.rent, self.rmax, lo, hi, view, out)

    def add_write(self, lo, hi, view, idx, engine):
        went = self.went
        if not went and not self.rent:
            self.wlo.append(lo)
            went.append((lo, hi, view, idx, engine))
            if hi - lo > self.wmax:
                self.wmax = hi - lo
            return
        dense = hi - lo == prod(view[1])
        for los, ents in ((self.wlo, self.went), (self.rlo, self.rent)):
            if not ents:
                continue
            if len(ents) == 1:
                e = ents[0]
                if (dense and e[0] >= lo and e[1] <= hi) or (e[0] == lo and e[1] == hi and e[2] == view):
                    los.clear()
                    ents.clear()
                continue
            # drop the entries this write covers (a dense write containing them, or the same view): a later
            # access conflicting with them conflicts with this write, which already waited for them
            i0 = bisect_left(los, lo)
            i1 = bisect_left(los, hi) if dense else bisect_right(los, lo)
            if i0 == 0 and i1 == len(ents) and dense and all(e[1] <= hi for e in ents):
                los.clear()
                ents.clear()
                continue
            drop = [k for k in range(i0, i1)
                    if (dense and ents[k][1] <= hi) or (ents[k][2] == view and ents[k][1] == hi)]
            for k in reversed(drop):
                del los[k]
                del ents[k]
        wlo = self.wlo
        if not wlo or lo >= wlo[-1]:
            wlo.append(lo)
            went.append((lo, hi, view, idx, engine))
        else:
            i = bisect_right(wlo, lo)
            wlo.insert(i, lo)
            went.insert(i, (lo, hi, view, idx, engine))
        if hi - lo > self.wmax:
            self.wmax = hi - lo

    def add_read(self, lo, hi, view, idx, engine):
        ents = self.rent
        if ents:
            last = ents[-1]
            if last[4] == engine and last[0] == lo and last[1] == hi and last[2] == view:
                ents[-1] = (lo, hi, view, idx, engine)   # same engine, in order: the later read dominates
                return
            if lo >= self.rlo[-1]:
                self.rlo.append(lo)
                ents.append((lo, hi, view, idx, engine))
            else:
                i = bisect_right(self.rlo, lo)
                self.rlo.insert(i, lo)
                ents.insert(i, (lo, hi, view, idx, engine))
        else:
            self.rlo.append(lo)
            ents.append((lo, hi, view, idx, engine))
        if hi - lo > self.rmax:
            self.rmax = hi - lo
