"""SBUF and PSUM capacity as the compiler decides it: from each tile's live range, in program order and, when that
overflows, in an order the compiler's scheduler may choose.

The compiler allocates an on-chip tile for its live range: from the first instruction that touches it (its first
write) to the last one (its last read).  A tile that no instruction touches occupies nothing; how long the Python
object stays referenced does not matter.  A tensor with block dimensions (``[B, par_dim(P), F]``) is B tiles, each
with its own live range (the front end marks the block size on the buffer, ``Buffer.block``: elements per partition
of one block).

:class:`Occupancy` records, for each tile (or block), its first and last instruction and their source lines, as the
core records instructions. When the kernel has run, :meth:`Occupancy.check` sweeps the live ranges in program order.
If some point needs more bytes per partition than the memory holds, it builds the reordering of ``reorder.py`` (each
instruction that is a tile's only read after its last write moved up to right after what it depends on, never across a
fence: a runtime loop, a register read at runtime, a barrier, a collective) and sweeps again, and if that overflows,
once more with every read of a tile after its last write moved, and once more with each load or memset (an
instruction that fills tiles from off-chip memory or from nothing) moved down to right before its first use:
neuronx-cc's default flow ("By default, neuronx-cc makes both decisions [where each tensor goes, the order in which
the engines run the instructions] after NKI traces the kernel", Deep dive: NKI compile configuration, Overview)
schedules instructions before it allocates (Allocation.COLORING), so the kernel is refused with
:class:`CapacityError` only if those orders overflow too, naming the line, the live set there (in the first
reordering) and the limit. (With
``CompileConfig(allocation=Allocation.LINEAR)`` NKI allocates in program order, but falls back to the default flow
when that runs out of memory, ``nki_alloc_fallback``.) Tiles placed at explicit addresses
(``ncc.sbuf.mod_alloc(base_addr=...)``, ``nl.ndarray(..., address=...)``) are checked for overlap in program order
instead, and instructions touching them are not moved: two placements sharing bytes of a partition while both are live
would corrupt each other on hardware.  Bytes are counted per 32-partition quadrant: a tile of 32 or fewer partitions
may start at partition 0, 32, 64 or 96 and one of 33-64 at 0 or 64 (docs/hardware.md "Memory rules"), so narrow tiles
can share a byte range in different quadrants (:class:`_Quadrants`).
"""

from __future__ import annotations

import os
from itertools import compress, islice, repeat
from operator import eq, is_, is_not, itemgetter

import numpy as np

from ..isa.errors import NkiValidationError
from ..memory import PSUM, SBUF
from .reorder import block_range, reordered_positions, sunk_positions

__all__ = ["Occupancy", "CapacityError", "modulo_placement"]

_SHOW = 12        # live tensors listed in a refusal


class CapacityError(NkiValidationError):
    """On-chip tiles live at one point in program order need more than the memory holds, or explicitly placed
    tiles overlap while both are live."""


def _where(loc):
    return f"{os.path.basename(loc[0])}:{loc[1]}" if loc else "?"


def modulo_placement(base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()):
    """The placement of ``mod_alloc``: block index (a tuple) -> ``(start partition, byte address)``.  Block
    indices are taken modulo ``num_par_tiles`` / ``num_free_tiles`` (all blocks on one tile when empty), the
    resulting index linearised row-major and scaled by the tile's partitions / bytes per partition."""
    def lin(shape, idx):
        if not shape:
            return 0
        shape = tuple(int(s) for s in shape)
        idx = tuple(idx)[-len(shape):] if len(idx) >= len(shape) else (0,) * (len(shape) - len(idx)) + tuple(idx)
        n = 0
        for s, i in zip(shape, idx):
            n = n * s + (int(i) % s)
        return n

    def place(idx, pdim, fbytes):
        return (int(base_partition) + lin(num_par_tiles, idx) * int(pdim),
                int(base_addr) + lin(num_free_tiles, idx) * int(fbytes))
    return place


class Occupancy:
    """Live ranges of one core's on-chip tiles, in program order (instruction sequence numbers)."""

    __slots__ = ("seq", "ranges", "tiles", "parts", "blocks", "fences", "log", "report", "bulk")

    def __init__(self, log=False):
        self.seq = 0
        # key (buf id, block or -1) -> [first seq, last seq, first loc, last loc]
        self.ranges: dict = {}
        # key -> (kind, bytes per partition, name, (partition0, partitions, byte addr) or None); an unnamed tile
        # placed automatically has the name "" (shown as "tile#<buffer id>": _tile_name) and shares its entry with
        # every such tile of its memory and size (_entry: no tuple and no name string kept per tile)
        self.tiles: dict = {}
        # key -> partitions of the tile (for the refusal's listing)
        self.parts: dict = {}
        # block tensor's buf id -> (elements per partition, elements per block)
        self.blocks: dict = {}
        # (seq, loc, why): no instruction from seq on may be moved before it (reorder.py)
        self.fences: list = []
        # per instruction (writes, reads, loc) when the core keeps no instruction record (NeuronCore(record=False)):
        # what the reordered check needs; None when the record has it
        self.log = [] if log else None
        # what the last check found: per memory the peak bytes per partition in program order, and in the
        # reordered order when program order overflowed; how many instructions moved
        self.report = None
        # tiles appended in bulk (a shape-only loop replay) and not yet in the three tables above: segments whose
        # entries come, in the order the tiles were made, right after the first ``seg.at`` entries of the tables
        # (see :meth:`add_bulk`); :meth:`materialize` puts them in
        self.bulk: list = []

    def add_bulk(self, seg):
        """Append a segment of tiles made in bulk, after every tile in the tables so far.  ``seg`` has ``at``
        (set here), ``n`` (its tiles), ``placed`` (whether any is explicitly placed), ``items()`` -> the lists of
        keys, ranges, tile entries and partitions in the order made, and ``columns(kind)`` -> NumPy arrays
        ``(bid, block, first, last, size, parts, index)`` of its tiles of memory ``kind`` (``index``: the tile's
        position in the segment), or None.  Its tiles are never touched again (they belong to iterations whose
        Python objects no longer exist), so their ranges are final."""
        seg.at = len(self.ranges)
        self.bulk.append(seg)

    def materialize(self):
        """Put the bulk segments' tiles into the tables, where they would be had the tiles been made one by one.
        The tables are the same dict objects afterwards."""
        if not self.bulk:
            return
        segs, self.bulk = self.bulk, []
        made = [seg.items() for seg in segs]          # (each segment's entries are predicted once)
        for table, col in ((self.ranges, 1), (self.tiles, 2), (self.parts, 3)):
            old = list(table.items())
            table.clear()
            done = 0
            for seg, items in zip(segs, made):
                table.update(old[done:seg.at])
                done = seg.at
                vals = map(list, items[1]) if col == 1 else items[col]
                table.update(zip(items[0], vals))
            table.update(old[done:])

    def fence(self, loc, why):
        """Nothing issued from now on may be moved before what was issued so far (``why``: what the fence is)."""
        f = self.fences
        if not f or f[-1][0] != self.seq:
            f.append((self.seq, loc, why))

    def touch(self, t, loc):
        """Instruction ``self.seq`` touches on-chip tensor view ``t``."""
        buf = t.buf
        blk = getattr(buf, "block", 0)
        if not blk:
            self._touch_key((buf.id, -1), buf, -1, loc)
            return
        pf = buf.pfree
        lo, hi = t.extent()
        view = (t.offset, t.shape, t.strides) if t._rv is None else t._rv.sched(t)    # as the record has it
        if buf.id not in self.blocks:
            self.blocks[buf.id] = (pf, blk)
        for k in block_range(pf, blk, lo, hi, view):
            self._touch_key((buf.id, k), buf, k, loc)

    def first(self, key, buf, loc):
        """Instruction ``self.seq`` is the first to touch plain tile ``buf`` (not a block tensor; ``key`` is
        ``(buf.id, -1)``, not yet in :attr:`ranges`): :meth:`touch`'s first-touch branch without its dispatch (the
        issue paths call it for every new tile).  Returns the tile's new range entry (the list in
        :attr:`ranges`)."""
        s = self.seq
        self.ranges[key] = rg = [s, s, loc, loc]
        size = buf.bytes_pp
        e = None
        if buf.placement is None and not buf.name:     # (_entry's shared entry, inline: every new tile)
            e = _ANON.get((buf.kind, size))
        self.tiles[key] = e or _entry(buf, -1, size)
        shape = buf.shape
        self.parts[key] = shape[0] if shape else 1
        return rg

    def _touch_key(self, key, buf, block, loc):
        r = self.ranges.get(key)
        s = self.seq
        if r is None:
            self.ranges[key] = [s, s, loc, loc]
            isz = buf.dtype.itemsize
            size = buf.block * isz if block >= 0 else buf.bytes_pp
            self.tiles[key] = _entry(buf, block, size)
            self.parts[key] = buf.shape[0] if buf.shape else 1
        else:
            r[1] = s
            r[3] = loc

    # -- the check --------------------------------------------------------------------------------------
    def check(self, target, instructions=None):
        """Raise :class:`CapacityError` if explicitly placed tiles fall outside the memory or overlap while live,
        or if the live tiles exceed SBUF or PSUM somewhere both in program order and in the reordered order
        (``reorder.py``).  ``instructions``: the core's record (one per sequence number), else :attr:`log`."""
        mems = ((SBUF, target.sbuf_partition_bytes, target.sbuf_partitions),
                (PSUM, target.psum_partition_bytes, target.psum_partitions))
        if any(seg.placed for seg in self.bulk):
            self.materialize()
        placed = _placed_keys(self.tiles)       # (one C loop over the tiles serves both placement checks)
        for kind, cap, nparts in mems:
            self._check_bounds(kind, cap, nparts, placed)
        # two placements live on the same bytes first: the sweep below would count their bytes twice and refuse
        # the kernel for capacity, not for what is wrong with it
        for kind, _, _ in mems:
            self._check_overlaps(kind, placed)
        prog = {}
        fail = None
        for kind, cap, nparts in mems:
            peak, f = self._sweep_program(kind, cap, nparts)
            prog[kind] = peak
            if f is not None and fail is None:
                fail = (kind, cap) + f
        self.report = {"program": prog, "reordered": None, "moved": 0}
        if fail is not None:
            self.materialize()
            if instructions is not None:
                ops = [(r.writes, r.reads, r.loc) for r in instructions]
            else:
                ops = self.log
            if ops is None or len(ops) != self.seq:
                self._refuse(*fail, self.ranges, None)       # nothing to reorder from: program order decides
            first = None
            # a tile's only read moved; failing that, every read after its last write; failing that, loads sunk
            for every in (False, True, "sink"):
                if every == "sink":
                    pos, tkeys, moved, blocked = sunk_positions(ops, self.tiles, self.blocks, self.fences)
                else:
                    pos, tkeys, moved, blocked = reordered_positions(ops, self.tiles, self.blocks, self.fences,
                                                                     every)
                ranges, lastins = _ranges_in(pos, tkeys, ops)
                re = {}
                fail2 = None
                for kind, cap, nparts in mems:
                    peak, f = _sweep(self.tiles, ranges, kind, cap, self.parts, nparts)
                    re[kind] = peak
                    if f is not None and fail2 is None:
                        fail2 = (kind, cap) + f
                self.report.update(reordered=re, moved=moved, every_read=every is True, sunk=every == "sink")
                if fail2 is None:
                    break
                if first is None:
                    first = (fail2, ranges, {"program": fail, "lastins": lastins, "blocked": dict(blocked)})
                else:
                    first[2]["blocked"].update(blocked)      # the fences that stopped either order's reads
            else:
                self._refuse(*first[0], first[1], first[2])     # as the first order has it (the simpler one)

    def _sweep_program(self, kind, cap, nparts):
        """:func:`_sweep` of the tables in program order, bulk segments included (as arrays when they qualify)."""
        if self.bulk:
            got = _sweep_bulk(self, kind, cap, nparts)
            if got is not None:
                return got
            self.materialize()
        return _sweep(self.tiles, self.ranges, kind, cap, self.parts, nparts)

    def _check_bounds(self, kind, cap, nparts, placed):
        for key in placed:
            k, size, _, p = self.tiles[key]
            if k != kind:
                continue
            name = _tile_name(self.tiles, key)
            p0, np_, addr, sz = p
            if addr < 0 or addr + sz > cap or p0 < 0 or p0 + np_ > nparts:
                blk = f" block {key[1]}" if key[1] >= 0 else ""
                raise CapacityError(
                    f"{kind.upper()} placement of tensor `{name}`{blk} at byte {addr} ({sz} bytes per partition) on "
                    f"partitions [{p0}, {p0 + np_}) is outside the memory: {cap} bytes per partition, {nparts} "
                    "partitions", "ndarray", "address", (p0, addr), (nparts, cap), self.ranges[key][2])

    def _refuse(self, kind, cap, key, s, live, ranges, why):
        """Refuse at position ``s`` of ``ranges`` (program order when ``why`` is None, else the reordered order;
        ``why``: the program order's failure, each tile's last instruction, the instructions fences stopped)."""
        k, size, _, _ = self.tiles[key]
        name = _tile_name(self.tiles, key)
        r = ranges[key]
        here = [(self.tiles[q][1], q) for q, rr in ranges.items()
                if self.tiles[q][0] == kind and rr[0] <= s <= rr[1]]
        here.sort(key=lambda x: (-x[0], x[1]))
        items = []
        for sz, q in here[:_SHOW]:
            rr = ranges[q]
            blk = f" block {q[1]}" if q[1] >= 0 else ""
            items.append(f"`{_tile_name(self.tiles, q)}`{blk} {sz} B on {self.parts.get(q, '?')} partitions "
                         f"({_where(rr[2])} .. {_where(rr[3])})")
        more = f", and {len(here) - _SHOW} more" if len(here) > _SHOW else ""
        blk = f" (block {key[1]})" if key[1] >= 0 else ""
        total = sum(sz for sz, _ in here)
        if why is None:
            order = "in program order"
            hint = _reorder_hint(here, self.tiles, ranges, "program")
            tail = (f"{hint} trnsim checks the kernel's program order here "
                    "(as NKI allocation, CompileConfig(allocation=Allocation.LINEAR), does); neuronx-cc's default "
                    "flow schedules instructions before it allocates and may interleave independent ones, so it "
                    "can accept an order this check refuses")
        else:
            order = "in the order trnsim checks"
            pk, _, pkey, ps, plive = why["program"]
            fences = _fence_note(here, why, self.fences)
            hint = _reorder_hint(here, self.tiles, ranges, "fenced" if fences else "tried")
            tail = (f"{fences}{hint} The order trnsim checks is one "
                    "that neuronx-cc's default flow (which schedules instructions before it allocates) may choose: "
                    "program order with each instruction that is a tile's only read after its last write "
                    "moved up to right after the instructions it depends on (same-buffer reads and writes that may "
                    "overlap; trnsim also tried moving every read of a tile after its last write, and moving each "
                    "instruction that fills a tile from off-chip memory or from nothing (a load, a memset) down to "
                    "right before its first use, which overflow "
                    "too), never across a runtime loop (nl.dynamic_range), a register read at runtime, a "
                    "barrier or a collective, and never for instructions on explicitly placed tiles (in program "
                    f"order {pk.upper()} already overflows at {_where(self.ranges[pkey][2])}, {plive} bytes per "
                    "partition). "
                    "(NKI's own allocation, CompileConfig(allocation=Allocation.LINEAR), keeps program order and "
                    "falls back to the default flow when it runs out of memory)")
        raise CapacityError(
            f"{kind.upper()} allocation of {size} bytes per partition for tensor `{name}`{blk} does not fit: at this "
            f"line {live} bytes per partition would be live {order} in the fullest 32-partition quadrant, capacity "
            f"{cap} bytes per partition ({len(here)} tiles, {total} bytes per partition, are live from their first "
            "write to their last read across this line; as in the compiler's allocation (nki.compiler.Allocation: an "
            "address from a tile's first write to its last read), each tile holds its bytes on every quadrant it "
            "spans; tiles of 32 or fewer partitions may share a byte range in different quadrants, 33-64 partitions "
            "in the two halves). Live tiles (first access .. last access): "
            f"{'; '.join(items)}{more}.{tail}",
            "ndarray", "shape", live, cap, r[2])

    def _check_overlaps(self, kind, placed_keys):
        tiles = self.tiles
        placed = [(tiles[key][3], key) for key in placed_keys if tiles[key][0] == kind]
        if len(placed) < 2:
            return
        placed.sort(key=lambda x: x[0][2])
        for i, ((p0, np0, a0, s0), ka) in enumerate(placed):
            ra = self.ranges[ka]
            for (p1, np1, a1, s1), kb in placed[i + 1:]:
                if a1 >= a0 + s0:
                    break
                if ka[0] == kb[0] and ka[1] == kb[1]:
                    continue
                if p1 >= p0 + np0 or p0 >= p1 + np1:
                    continue
                rb = self.ranges[kb]
                if ra[1] < rb[0] or rb[1] < ra[0]:
                    continue                     # the same bytes, at different times: fine
                first, second = (ka, kb) if ra[0] <= rb[0] else (kb, ka)
                r1, r2 = self.ranges[first], self.ranges[second]
                n1 = _tile_name(self.tiles, first) + (f" block {first[1]}" if first[1] >= 0 else "")
                n2 = _tile_name(self.tiles, second) + (f" block {second[1]}" if second[1] >= 0 else "")
                lo, hi = max(a0, a1), min(a0 + s0, a1 + s1)
                raise CapacityError(
                    f"{kind.upper()} tensors `{n1}` and `{n2}` are placed on the same bytes [{lo}, {hi}) of "
                    f"partitions [{max(p0, p1)}, {min(p0 + np0, p1 + np1)}) and are live at the same time: `{n1}` "
                    f"from {_where(r1[2])} to {_where(r1[3])}, `{n2}` first written at {_where(r2[2])}; on hardware "
                    "the second would overwrite the first (give them different addresses or more tiles in "
                    "mod_alloc)", "ndarray", "address", (lo, hi), None, r2[2])


def _sweep(tiles, ranges, kind, cap, parts=None, nparts=128):
    """``(peak bytes per partition, (key, position, live) of the first overflow or None)`` of ``kind``'s tiles live
    over ``ranges`` (key -> [first, last, ...] positions), counted per 32-partition quadrant (:class:`_Quadrants`;
    ``parts``: key -> the tile's partitions)."""
    # (C loops over the tiles: a shape-only run of a million instructions has hundreds of thousands of them)
    mask = list(map(eq, map(_KIND, tiles.values()), repeat(kind)))
    parts = parts or {}
    if sum(mask) >= _VECTOR_MIN and _aligned(tiles, ranges, parts):
        got = _sweep_one_span_aligned(mask, tiles, ranges, cap, parts, nparts)
        if got is not None:
            return got
    keys = list(compress(tiles, mask))
    if len(keys) >= _VECTOR_MIN:
        got = _sweep_one_span(keys, tiles, ranges, cap, parts, nparts)
        if got is not None:
            return got
    # the events in order: by position, a tile's free (after its last access) before any placement at the same
    # position, ties in the order the tiles were made (placement before free of one tile).  One int per event,
    # (position * 2 + placing) * 2n + (2j for tile j's placement, 2j + 1 for its free), sorts exactly so.
    m = 2 * len(keys)
    ev = []
    j2 = 0
    for key in keys:
        r = ranges[key]
        ev.append((r[0] * 2 + 1) * m + j2)
        ev.append((r[1] + 1) * 2 * m + j2 + 1)
        j2 += 2
    ev.sort()
    quads = _Quadrants(nparts)
    place, free = quads.place, quads.free
    peak = 0
    fail = None
    for e in ev:
        pa, idx = divmod(e, m)
        key = keys[idx >> 1]
        if idx & 1:
            free(key)
            continue
        tile = tiles[key]
        live = place(key, tile[1], parts.get(key, nparts), tile[3])
        if live > peak:
            peak = live
        if live > cap and fail is None:
            fail = (key, pa >> 1, live)
    return peak, fail


_VECTOR_MIN = 64   # tiles from which _sweep tries the vectorised sweep
# fields of a tile entry (kind, size, name, placement) and of a range (first, last, ...)
_KIND, _SIZE, _PLACEMENT = itemgetter(0), itemgetter(1), itemgetter(3)
_FIRST, _LAST = itemgetter(0), itemgetter(1)


def _placed_keys(tiles):
    """The keys of the explicitly placed tiles, in the table's order (C loops)."""
    return list(compress(tiles, map(is_not, map(_PLACEMENT, tiles.values()), repeat(None))))


def _sweep_span(tl, rl, pts, cap, nparts):
    """:func:`_sweep` when every tile is placed automatically on one and the same span of quadrants (e.g. all
    tiles of more than 96 partitions: each spans all four): then every quadrant of the span holds the same bytes,
    so a placement's ``top`` is the running sum of sizes after adding it, and the sweep is a sorted cumulative
    sum (the same events in the same order, as NumPy int64 keys).  ``tl``, ``rl``: the tiles' records and live
    ranges, in the tables' order; ``pts``: their partition counts.  Returns ``(peak, (row, position, live) of the
    first overflow or None)``, or None when the tiles do not qualify."""
    nq = max(1, -(-nparts // _QUADRANT))
    if any(map(is_not, map(_PLACEMENT, tl), repeat(None))):
        return None
    span = None
    for pt in set(pts):     # the distinct partition counts
        sp = _SPANS.get((pt, nq)) or _spans(pt, nq)
        if len(sp) != 1 or (span is not None and sp[0] != span):
            return None
        span = sp[0]
    n = len(tl)
    first = np.fromiter(map(_FIRST, rl), np.int64, n)
    last = np.fromiter(map(_LAST, rl), np.int64, n)
    size = np.fromiter(map(_SIZE, tl), np.int64, n)
    return _event_sweep(first, last, size, np.arange(n, dtype=np.int64), cap)


def _sweep_one_span(keys, tiles, ranges, cap, parts, nparts):
    """:func:`_sweep_span` of the tiles ``keys``; the overflow names its tile's key.  None when they do not
    qualify."""
    got = _sweep_span(list(map(tiles.__getitem__, keys)), list(map(ranges.__getitem__, keys)),
                      map(parts.get, keys, repeat(nparts)), cap, nparts)
    if got is None:
        return None
    peak, fail = got
    return peak, (fail and (keys[fail[0]],) + fail[1:])


def _aligned(tiles, ranges, parts):
    """Whether the three tables hold the same key objects in the same order (as ``Occupancy`` fills them: one key
    object per tile, put in the three together), so that their values can be read side by side, without a lookup
    per tile."""
    n = len(tiles)
    return len(ranges) == n and len(parts) == n and all(map(is_, tiles, ranges)) and all(map(is_, tiles, parts))


def _sweep_one_span_aligned(mask, tiles, ranges, cap, parts, nparts):
    """:func:`_sweep_one_span` of the tiles selected by ``mask`` (in the tables' order) when the tables are
    :func:`_aligned`: the same sweep, its inputs read from the tables' values in order instead of by key."""
    got = _sweep_span(list(compress(tiles.values(), mask)), list(compress(ranges.values(), mask)),
                      compress(parts.values(), mask), cap, nparts)
    if got is None:
        return None
    peak, fail = got
    if fail:
        key = next(islice(compress(tiles, mask), fail[0], None))
        fail = (key,) + fail[1:]
    return peak, fail


def _event_sweep(first, last, size, order, cap):
    """The one-span sweep as arrays: tiles ``first``/``last`` (live range), ``size`` (bytes per partition), ``order``
    (distinct ints, the order the tiles were made: ties at one position go placement of a tile before the frees
    after it, frees in that order).  Returns ``(peak, (row, position, live) of the first overflow or None)``, or
    None when the event keys would not fit in int64.  One int per event, (position * 2 + placing) * 2n + (2j for
    tile j's placement, 2j + 1 for its free), sorts exactly so."""
    n = len(first)
    if n == 0:
        return 0, None
    m = 2 * (int(order.max()) + 1)
    if int(last.max()) + 2 >= (1 << 62) // (2 * m):        # keys would not fit in int64
        return None
    j2 = order * 2
    ev = np.concatenate(((first * 2 + 1) * m + j2, (last + 1) * 2 * m + j2 + 1))
    ev.sort()
    idx = ev % m
    row = np.empty(m // 2, np.int64)
    row[order] = np.arange(n, dtype=np.int64)
    src = row[idx >> 1]
    placing = (idx & 1) == 0
    sz = size[src]
    live = np.cumsum(np.where(placing, sz, -sz))
    lp = live[placing]
    peak = max(0, int(lp.max())) if lp.size else 0
    over = np.flatnonzero(placing & (live > cap))
    if not over.size:
        return peak, None
    e = int(over[0])
    return peak, (int(src[e]), (int(ev[e]) // m) >> 1, int(live[e]))


def _sweep_bulk(occ, kind, cap, nparts):
    """:func:`_sweep_one_span` over the tables and the bulk segments together, without putting the segments in the
    tables: the same events in the same order (tiles ordered as they were made), or None when some tile does not
    qualify (then the caller materializes and sweeps the tables)."""
    nq = max(1, -(-nparts // _QUADRANT))
    tiles, ranges, parts = occ.tiles, occ.ranges, occ.parts
    mask = np.fromiter(map(eq, map(_KIND, tiles.values()), repeat(kind)), bool, len(tiles))
    dpos = np.flatnonzero(mask)
    keys = list(compress(tiles, mask))
    tl = list(map(tiles.__getitem__, keys))
    if any(map(is_not, map(_PLACEMENT, tl), repeat(None))):
        return None
    rl = list(map(ranges.__getitem__, keys))
    firsts = [np.fromiter(map(_FIRST, rl), np.int64, len(keys))]
    lasts = [np.fromiter(map(_LAST, rl), np.int64, len(keys))]
    sizes = [np.fromiter(map(_SIZE, tl), np.int64, len(keys))]
    pts = set(map(parts.get, keys, repeat(nparts)))
    # each tile's place in the order made: a table entry at dict position d follows every segment with at <= d
    ats = np.array([seg.at for seg in occ.bulk], np.int64)
    lens = np.array([seg.n for seg in occ.bulk], np.int64)
    before = np.concatenate(([0], np.cumsum(lens)))
    orders = [dpos + before[np.searchsorted(ats, dpos, side="right")]]
    segcols = []
    for g, seg in enumerate(occ.bulk):
        cols = seg.columns(kind)
        if cols is None:
            return None
        bid, blk, first, last, size, pp, index = cols
        segcols.append((bid, blk))
        firsts.append(first)
        lasts.append(last)
        sizes.append(size)
        pts.update(np.unique(pp).tolist())
        orders.append(seg.at + before[g] + index)
    span = None
    for pt in pts:
        sp = _SPANS.get((pt, nq)) or _spans(pt, nq)
        if len(sp) != 1 or (span is not None and sp[0] != span):
            return None
        span = sp[0]
    got = _event_sweep(np.concatenate(firsts), np.concatenate(lasts), np.concatenate(sizes),
                       np.concatenate(orders), cap)
    if got is None:
        return None
    peak, fail = got
    if fail is None:
        return peak, None
    i = fail[0]
    if i < len(keys):
        key = keys[i]
    else:
        i -= len(keys)
        for bid, blk in segcols:
            if i < len(bid):
                key = (int(bid[i]), int(blk[i]))
                break
            i -= len(bid)
    return peak, (key,) + fail[1:]


_QUADRANT = 32     # partitions per SBUF/PSUM quadrant (docs/hardware.md "Memory rules": start partitions 0/32/64/96)


def _starts(parts, nparts):
    """The partitions a tile of ``parts`` partitions may start at.  docs/hardware.md "Memory rules": a tile spanning
    more than 64 partitions starts at partition 0; 33-64 partitions start at 0 or 64; 32 or fewer at 0, 32, 64
    or 96."""
    if parts > 2 * _QUADRANT:
        return (0,)
    step = 2 * _QUADRANT if parts > _QUADRANT else _QUADRANT
    return tuple(range(0, nparts - parts + 1, step))


_SPANS: dict = {}     # (partitions of a tile, quadrants) -> the quadrant spans it may be placed on (_Quadrants.place)


def _spans(parts, nq):
    """The ``(first, last)`` quadrants an automatically placed tile of ``parts`` partitions may span, one per start
    partition it may have, in a memory of ``nq`` quadrants (memoised in ``_SPANS``).  A tile of no partitions
    (a zero-size DMA destination, ``nl.load`` of an empty slice) holds no bytes anywhere: no span."""
    if parts < 1:
        sp = _SPANS[(parts, nq)] = []
        return sp
    sp = _SPANS[(parts, nq)] = [(a // _QUADRANT, (a + parts - 1) // _QUADRANT)
                                for a in _starts(parts, nq * _QUADRANT)] or [(0, nq - 1)]
    return sp


class _Quadrants:
    """Bytes per partition in use in each 32-partition quadrant.  An automatically placed tile goes to the
    allowed start partition where the fullest quadrant it spans ends up least full (lowest start on a tie): four
    tiles of up to 32 partitions can share one byte range in different quadrants.  An explicitly placed tile
    occupies the quadrants of its own partitions.  Bytes within a quadrant are counted, not laid out (no
    fragmentation)."""

    __slots__ = ("used", "where")

    def __init__(self, nparts):
        self.used = [0] * max(1, -(-nparts // _QUADRANT))
        self.where = {}

    def place(self, key, size, parts, placement):
        """Place the tile; return the bytes per partition then in use in the fullest quadrant it spans (0 for a
        tile of no partitions, which spans no quadrant)."""
        used = self.used
        if placement is not None:
            p0, np_ = placement[0], placement[1]
            spans = [(p0 // _QUADRANT, (p0 + np_ - 1) // _QUADRANT)] if np_ > 0 else []
        else:
            spans = _SPANS.get((parts, len(used))) or _spans(parts, len(used))
        if not spans:
            self.where[key] = (0, -1, size)
            return 0
        best = None
        for q0, q1 in spans:
            top = max(used[q0:q1 + 1]) + size
            if best is None or top < best[0]:
                best = (top, q0, q1)
        top, q0, q1 = best
        for q in range(q0, q1 + 1):
            used[q] += size
        self.where[key] = (q0, q1, size)
        return top

    def free(self, key):
        q0, q1, size = self.where.pop(key)
        for q in range(q0, q1 + 1):
            self.used[q] -= size


def _ranges_in(pos, tkeys, ops):
    """Each tile's ``[first, last, first loc, last loc]`` at the positions ``pos`` of a reordered sequence, and
    each tile's last instruction (program index)."""
    ranges = {}
    lastins = {}
    for i, ks in enumerate(tkeys):
        if not ks:
            continue
        p = pos[i]
        loc = ops[i][2]
        for k in ks:
            r = ranges.get(k)
            if r is None:
                ranges[k] = [p, p, loc, loc]
                lastins[k] = i
            else:
                if p < r[0]:
                    r[0] = p
                    r[2] = loc
                if p > r[1]:
                    r[1] = p
                    r[3] = loc
                    lastins[k] = i
    return ranges, lastins


def _fence_note(here, why, fences):
    """A sentence naming the fences that kept the last reads of live tiles from moving up, if any did."""
    blocked, lastins = why["blocked"], why["lastins"]
    hit = {}
    for _, q in here:
        f = blocked.get(lastins.get(q, -1))
        if f is not None:
            hit[f] = hit.get(f, 0) + 1
    if not hit:
        return ""
    parts = [f"{why_} at {_where(loc)} ({n} tile{'s' if n > 1 else ''})"
             for (_, loc, why_), n in ((fences[f], n) for f, n in sorted(hit.items()))]
    return (" The last reads of some of these tiles could not move up past a point the compiler cannot schedule "
            f"across: {'; '.join(parts)}.")


def _reorder_hint(here, tiles, ranges, tried):
    """A sentence naming the largest group of live tiles with the same first and last access lines (tiles made in
    one loop and all read in a later one), the usual cause of a refusal that reordering would avoid.  ``tried``:
    "program" (program order only was checked), "tried" (the reordered order overflows too), "fenced" (and a
    fence stopped some of the reads: the caller names it)."""
    groups = {}
    for sz, q in here:
        r = ranges[q]
        groups.setdefault((_where(r[2]), _where(r[3])), []).append(sz)
    if not groups:
        return ""
    (first, last), sizes = max(groups.items(), key=lambda kv: sum(kv[1]))
    if len(sizes) < 2:
        return ""
    head = (f" {len(sizes)} of them ({sum(sizes)} bytes per partition) are first accessed at {first} and last "
            f"accessed at {last}: all are live together between those lines")
    if tried == "fenced":
        return head + "."
    if tried == "tried":
        return (head + "; their reads there could not move up to right after their last writes (a read that "
                "depends on a later instruction, e.g. sums taken in another order than the tiles were made, reads "
                "that share one instruction, a fence between); reading each in its own instruction, in the order "
                "the tiles are made, would free it early.")
    return (head + " (made in one loop, read in a later one?); reading each (e.g. copying it out) right after its "
            "last write would free it early.")


_ANON: dict = {}     # (memory, bytes per partition) -> the entry of every unnamed, automatically placed tile


def _entry(buf, block, size):
    """Tile ``buf``'s (block ``block``'s; -1: the whole tile) entry in :attr:`Occupancy.tiles`: ``(kind, bytes per
    partition, name, placement or None)``.  An unnamed tile placed automatically gets the one entry of its memory
    and size, named "" (:func:`_tile_name` shows it as ``tile#<buffer id>``): a kernel of a million instructions
    makes hundreds of thousands of tiles, and a tuple and a name string kept for each cost their making and, once
    the cycle collector runs, a pass over each."""
    name = buf.name
    if not name and getattr(buf, "placement", None) is None:
        kind = buf.kind
        e = _ANON.get((kind, size))
        if e is None:
            e = _ANON[(kind, size)] = (kind, size, "", None)
        return e
    return (buf.kind, size, name or f"tile#{buf.id}", _placement(buf, block, size))


def _tile_name(tiles, key):
    """The name of the tile (or block tensor) of ``key`` as a refusal shows it: its own, else ``tile#<buffer
    id>``."""
    return tiles[key][2] or f"tile#{key[0]}"


def _placement(buf, block, size):
    """``(first partition, partitions, byte address)`` of an explicitly placed tile or block, else ``None``."""
    where = getattr(buf, "placement", None)
    if where is None:
        return None
    parts = buf.shape[0] if buf.shape else 1
    if callable(where):
        nblk = buf.pfree // buf.block if buf.block else 1
        idx = _block_index(block if block >= 0 else 0, getattr(buf, "block_shape", None) or (nblk,))
        p0, addr = where(idx, parts, size)
    else:
        p0, addr = where
        if block > 0:
            addr = addr + block * size
    return (int(p0), parts, int(addr), size)


def _block_index(k, shape):
    idx = []
    for s in reversed(shape):
        idx.append(k % s)
        k //= s
    return tuple(reversed(idx))
