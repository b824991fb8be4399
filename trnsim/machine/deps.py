"""Dependency tracking between instructions by the memory they touch.

Per buffer, :class:`AccessTracker` keeps the accesses that a later access may conflict with: the writes not yet
covered by a later write, and the reads since then.  A read depends on the overlapping writes (read after write);
a write on the overlapping writes (write after write) and reads (write after read).  Entries are kept sorted by
their low element so that a query looks only at the entries whose extent can reach it (no all-pairs scan).

Two accesses overlap when their element extents ``[lo, hi)`` overlap and, for two strided tiles with the same row
pitch (a column block of a row-major matrix, or a free-dimension slice of an on-chip tile, whose extents overlap
while their elements do not; also a view of one partition, and one whose partitions step in several dimensions:
``_geo``), when their column ranges within the pitch overlap.  Anything else that overlaps in
extent is taken as a conflict: conservative, never missing a true dependency.

Tiles placed at explicit addresses (``nl.ndarray(..., address=...)``) are memory, not names: an access through one
tile conflicts with an access through another on the same bytes (a write through ``a`` is read through ``b``; a new
tile at a PSUM bank waits for the reads of the last one there).  :func:`alias_groups` finds the placed tiles of a
core whose byte ranges overlap and gives each group one dependency key (the scheduler tracks accesses per key, while
the SBUF/PSUM capacity gate keeps one entry per tile: ``sched_fast.encode``).  When every tile of a group has the
same geometry at the same address (first partition, byte address, bytes per partition, element size) their element
numbering is the same and accesses keep it; otherwise (a partial overlap, or the same bytes read as another shape or
dtype, which ``address=`` allows: the nki.language.ndarray reference and the NKI 0.2 migration guide put no rule on
what may share an address) each access is written in bytes of the group (:func:`byte_operand`) with the group's
row as its pitch, so that accesses through tiles on other bytes of the same partitions (a group's tiles are
chained by partial overlaps: a whole allocator's worth of tiles may form one group) are told apart by their
columns: exact for views whose free dimensions stay within a partition, otherwise the tile's columns on the
partitions of the access's extent (conservative within the tile).  Tile blocks placed by
``mod_alloc`` keep their buffer's key (not modelled).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import prod

__all__ = ["AccessTracker", "overlaps", "alias_groups", "byte_operand"]

_GEO: dict = {}


def _geo(view):
    """``(pitch, col_lo, col_hi)`` such that every element x of the view has ``col_lo <= x % pitch < col_hi``,
    or ``None`` when the view has no such row structure.

    The pitch is the first dimension's stride (a tile's partition dimension: its elements per partition, or a
    matrix's row), also when that dimension has one index (one partition: ``t[k:k + 1, a:b]``).  A dimension whose
    stride is a multiple of the pitch moves whole rows and leaves the column alone (a tile's partitions split into
    two dimensions, or a partition step); the other dimensions (non-negative strides) spread the columns, and they
    must stay within one row from the view's first column."""
    g = _GEO.get(view, 0)
    if g != 0:
        return g
    off, shape, strides = view
    g = None
    if len(shape) >= 2 and strides[0] > 0:
        pitch = strides[0]
        w = 1
        ok = True
        for s, st in zip(shape[1:], strides[1:]):
            if s == 1 or st % pitch == 0:
                continue
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


def alias_groups(placed):
    """The placed tiles that share bytes with another, as ``{buffer id: (group, byte_mode, (partition0, address,
    elements per partition, element bytes), (group's first partition, first byte, bytes per partition row))}``.
    ``placed``: ``(buffer id, kind, first partition, partitions, byte address, bytes per partition, element bytes)``
    of every explicitly placed tile of one core.  Tiles sharing no byte with another are left out (their accesses
    keep their own buffer's key).  ``byte_mode`` is False when the whole group has one geometry at one address
    (accesses keep their element numbering), True when accesses are written in bytes of the group."""
    # the distinct rectangles (kind, first partition, partitions, address, bytes): thousands of tiles placed at a
    # few addresses (a loop's tiles at rotating addresses) are a few rectangles, each a group of its tiles already
    rect_of: dict = {}
    rects = []
    for i, t in enumerate(placed):
        rk = t[1:6]
        r = rect_of.get(rk)
        if r is None:
            r = rect_of[rk] = len(rects)
            rects.append([rk, []])
        rects[r][1].append(i)
    parent = list(range(len(rects)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    by_kind: dict = {}
    for r, (rk, _) in enumerate(rects):
        by_kind.setdefault(rk[0], []).append(r)
    for idx in by_kind.values():
        idx.sort(key=lambda r: rects[r][0][3])
        active = []                        # (byte end, rectangle) of the rectangles whose bytes reach the sweep point
        for r in idx:
            _, p0, np0, a0, s0 = rects[r][0]
            active = [x for x in active if x[0] > a0]
            for _, q in active:
                p1, np1 = rects[q][0][1], rects[q][0][2]
                if p0 < p1 + np1 and p1 < p0 + np0:
                    ri, rq = root(r), root(q)
                    if ri != rq:
                        parent[ri] = rq
            active.append((a0 + s0, r))
    members: dict = {}
    for r, (_, tiles) in enumerate(rects):
        members.setdefault(root(r), []).extend(tiles)
    out = {}
    g = 0
    for mem in members.values():
        if len(mem) < 2:
            continue
        geo = {(placed[i][2], placed[i][4], placed[i][5], placed[i][6]) for i in mem}
        byte_mode = len(geo) > 1
        pmin = min(placed[i][2] for i in mem)
        amin = min(placed[i][4] for i in mem)
        span = max(placed[i][4] + placed[i][5] for i in mem) - amin
        for i in mem:
            bid, _, p0, _, a0, s0, isz = placed[i]
            out[bid] = (g, byte_mode, (p0, a0, s0 // isz, isz), (pmin, amin, span))
        g += 1
    return out


def byte_operand(lo, hi, view, tile, group):
    """``(lo, hi, view)`` of an access ``[lo, hi)`` with access pattern ``view`` (element units) of a placed tile
    ``tile = (partition0, address, elements per partition, element bytes)``, in bytes of its alias group
    ``group = (first partition, first byte, row)``: byte ``(partition - first partition) * row + (address - first
    byte)``.  The byte pattern's first dimension steps one row (the group's partition pitch, ``_geo``'s pitch for
    every access of the group), then come the view's dimensions that step whole partitions (a stride a multiple of
    the tile's elements per partition: partitions), then those within a partition, then the element's bytes; it
    names exactly the bytes of the view when its within-partition dimensions stay within one partition from its
    first element.  Otherwise (a run across partitions, a negative or oversized stride within a partition) it is
    the rectangle of the tile's columns on the partitions the extent spans: never a byte of another tile's columns
    (conservative only within the tile, as ``overlaps`` is)."""
    p0, a0, pf, isz = tile
    pmin, amin, row = group
    base = (p0 - pmin) * row + (a0 - amin)

    def at(e):
        q, r = divmod(e, pf)
        return base + q * row + r * isz
    if hi <= lo:
        return at(lo), at(lo), (at(lo), (0,), (1,))
    off, shape, strides = view
    if shape and all(s > 0 for s in shape):
        pdims = []                     # (count, byte stride) of the dimensions stepping whole partitions
        fdims = []                     # those within a partition
        w = 1
        for s, st in zip(shape, strides):
            if s == 1:
                continue
            if st % pf == 0:
                pdims.append((s, (st // pf) * row))
            elif st > 0:
                fdims.append((s, st * isz))
                w += (s - 1) * st
            else:
                w = pf + 1
                break
        if off % pf + w <= pf:         # every element's column is the first one's plus its free steps
            dims = pdims + fdims
            return at(lo), at(hi - 1) + isz, (at(off), (1,) + tuple(d[0] for d in dims) + (isz,),
                                                (row,) + tuple(d[1] for d in dims) + (1,))
    q0, q1 = lo // pf, (hi - 1) // pf
    blo = base + q0 * row
    return blo, base + q1 * row + pf * isz, (blo, (q1 - q0 + 1, pf * isz), (row, 1))
