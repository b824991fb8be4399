"""An order in which the compiler's scheduler may run a kernel's instructions, for the capacity check.

neuronx-cc's default flow schedules a kernel's instructions before it allocates SBUF and PSUM (the capacity check's
docstring, capacity.py), so a kernel whose tiles overflow a memory in program order may still fit. This module builds
a valid reordering that frees tiles early: each instruction that is the only access of an on-chip tile after the
tile's last write (a copy-out of an accumulator, the store of a loaded tile) is moved up to right after the latest
instruction it depends on (a second variant moves every read of a tile after its last write). Dependencies are per
buffer and region, as the timing scheduler sees them: a read after an overlapping write, a write after an overlapping
read or write (extents and ``deps.overlaps``, conservative: two accesses that may share an element are ordered).
Moving an instruction up past instructions it does not depend on keeps every dependency satisfied, whatever else
moves, so the order is one the compiler could choose.

Nothing moves across a fence (:meth:`Occupancy.fence`): a runtime loop's iteration boundary, a register read at
runtime, a barrier between cores, a collective.  Instructions touching an explicitly placed tile (``address=``,
``mod_alloc``) keep their place: the placement was made for program order.

A third order sinks loads instead (:func:`sunk_positions`): each instruction that fills on-chip tiles and reads no
on-chip tile (a DMA load from off-chip memory, a memset, an iota) is moved down to right before the first later
instruction that may conflict with it, so a tile loaded or set early in program order (an expert's weights loaded
before the matmuls of the ones loaded with it, an accumulator zeroed at the top of a block and first read after the
block's matmuls) holds its bytes only from just before its first use.  Such an instruction depends on nothing
earlier but the accesses of the tiles it writes; the scheduler's only constraints are dependency edges ("The extra
dependency edges constrain the reordering that the automatic scheduler will do", NKI guide: How to Use the NKI
Scheduling APIs), so a memset may wait for its first use as a load may.  (Hidden engine state, such as a random
number generator's, is not an operand: instructions drawing random numbers without operands may be sunk past one
another in this order, as no other order here tracks that state either.)

Each instruction gets a sort key: ``(i,)`` for one kept in place, ``key(d) + (i,)`` for one moved right after ``d``
(its dependency with the largest key), or ``(f - 0.5, i)`` when its dependencies all precede the fence at ``f``.
Sorting by key gives the new order; the roots of moved keys are kept instructions or fences, so the order is built
by emitting each kept instruction followed by the moved ones rooted at it.
"""

from __future__ import annotations

from .deps import _dense, _geo, overlaps

__all__ = ["block_range", "reordered_positions", "sunk_positions"]

_SCAN = 4096        # prior accesses of one buffer looked at for one operand of a moved instruction; past it the
                    # instruction keeps its place (a bound on the check's time, erring towards refusing)


def _tile_keys(op, tiles, blocks):
    """The tile keys (of ``tiles``) an operand ``(buffer, lo, hi, view)`` touches: the buffer's own tile, or the
    blocks of a legacy ``mod_alloc`` buffer (``blocks``) its extent covers."""
    bid = op[0]
    b = blocks.get(bid)
    if b is None:
        k = (bid, -1)
        return (k,) if k in tiles else ()
    return tuple(k for k in ((bid, j) for j in block_range(b[0], b[1], op[1], op[2], op[3])) if k in tiles)


def block_range(pf, blk, lo, hi, view):
    """The block indices a view of a block tensor touches (``pf`` elements per partition, ``blk`` per block): its
    columns from the view's row structure when it has one, else from its element extent ``[lo, hi)``."""
    g = _geo(view)
    if g is not None and g[0] == pf:
        c0, c1 = g[1], g[2]
    elif hi - lo <= pf and lo // pf == (hi - 1) // pf:
        c0, c1 = lo % pf, (hi - 1) % pf + 1
    else:
        c0, c1 = 0, pf
    return range(c0 // blk, (max(c1, c0 + 1) - 1) // blk + 1)


def reordered_positions(ops, tiles, blocks, fences, every_read=False):
    """The reordering of ``ops`` (per instruction ``(writes, reads, loc)``, operands ``(buf id, lo, hi, view)``).
    ``tiles``: tile key -> ``(kind, bytes, name, placement)``; ``blocks``: block buffer id -> ``(pf, blk)``;
    ``fences``: sorted ``(seq, loc, why)``, no instruction moves from ``seq`` on to before it.  The instructions
    moved are those that are a tile's only access after its last write, or with ``every_read`` every read of a
    tile after its last write (all the reads of a tile read several times; an as-soon-as-possible order for them).

    Returns ``(pos, tkeys, moved, blocked)``: each instruction's position in the new order, the tile keys each
    touches, how many instructions moved above another, and for each instruction that a fence stopped, the fence
    (index into ``fences``)."""
    n = len(ops)

    def keys_of(op):
        return _tile_keys(op, tiles, blocks)

    # pass 1: the tiles each instruction touches, and each tile's accesses after its last write
    tkeys = [()] * n
    tail: dict = {}
    fixed = set()
    for i in range(n):
        w, r, _ = ops[i]
        ks = []
        wk = ()
        for op in w:
            for k in keys_of(op):
                ks.append(k)
                tail[k] = []
            wk = ks[:]
        for op in r:
            for k in keys_of(op):
                ks.append(k)
                if k not in wk:
                    t = tail.setdefault(k, [])
                    if not t or t[-1] != i:
                        t.append(i)
        if ks:
            tkeys[i] = tuple(ks)
            for k in ks:
                if tiles[k][3] is not None:
                    fixed.add(i)
                    break
    if every_read:
        cand = {i for k, t in tail.items() if tiles[k][3] is None for i in t}
    else:
        cand = {t[0] for k, t in tail.items() if len(t) == 1 and tiles[k][3] is None}
    cand -= fixed

    # pass 2: sort keys, in program order (every dependency of an instruction has its key already)
    key = [None] * n
    hist_w: dict = {}       # buf id -> [(i, lo, hi, view, True)] writes
    hist_a: dict = {}       # buf id -> [(i, lo, hi, view, is write)] reads and writes
    blocked = {}
    fl = [f[0] for f in fences]
    nf = len(fl)
    fi = -1
    while fi + 1 < nf and fl[fi + 1] <= 0:
        fi += 1
    moved = 0
    for i in range(n):
        while fi + 1 < nf and fl[fi + 1] <= i:
            fi += 1
        floor_idx = fl[fi] if fi >= 0 else 0
        floor = (floor_idx - 0.5,)
        w, r, _ = ops[i]
        k = (i,)
        if i in cand:
            best = floor
            ok = True
            for lst_ops, hist in ((r, hist_w), (w, hist_a)):
                for bid, lo, hi, v in lst_ops:
                    lst = hist.get(bid)
                    if not lst:
                        continue
                    steps = 0
                    for j, lo2, hi2, v2, wr in reversed(lst):
                        if j < floor_idx:
                            break
                        steps += 1
                        if steps > _SCAN:
                            ok = False
                            break
                        if lo2 < hi and lo < hi2 and overlaps(v, v2):
                            kj = key[j]
                            if kj > best:
                                best = kj
                            if len(kj) == 1:
                                break           # kept in place: every earlier access sorts before it
                            if wr and (v2 == v or lo2 <= lo and hi <= hi2 and _dense(lo2, hi2, v2)):
                                break           # a write covering the operand: every earlier access that may
                                                # conflict with the operand conflicts with it, so sorts before it
                    if not ok:
                        break
                if not ok:
                    break
            if ok:
                k = best + (i,)
                if best[0] < i - 1:
                    moved += 1
                if best is floor and fi >= 0:
                    blocked[i] = fi
        key[i] = k
        for bid, lo, hi, v in w:
            e = (i, lo, hi, v, True)
            hist_w.setdefault(bid, []).append(e)
            hist_a.setdefault(bid, []).append(e)
        for bid, lo, hi, v in r:
            hist_a.setdefault(bid, []).append((i, lo, hi, v, False))

    # the new order: each kept instruction, then the moved ones rooted at it (by key); moved ones rooted at a
    # fence just before the fence's first instruction
    groups: dict = {}
    for i in range(n):
        k = key[i]
        if len(k) > 1:
            groups.setdefault(k[0], []).append((k, i))
    pos = [0] * n
    p = 0
    for i in range(n + 1):
        g = groups.get(i - 0.5)
        if g:
            g.sort()
            for _, j in g:
                pos[j] = p
                p += 1
        if i == n:
            break
        if len(key[i]) == 1:
            pos[i] = p
            p += 1
            g = groups.get(i)
            if g:
                g.sort()
                for _, j in g:
                    pos[j] = p
                    p += 1
    return pos, tkeys, moved, blocked


def sunk_positions(ops, tiles, blocks, fences):
    """The order of ``ops`` with loads sunk (module docstring), as :func:`reordered_positions` returns it.  A
    candidate writes only on-chip tiles placed by the compiler and reads only off-chip memory or nothing (a DMA
    load, a memset); it moves to just before
    the later instruction with the smallest sort key among those that may conflict with it (conservatively: any
    later access of a buffer it writes, any later write of a buffer it reads) and the next fence, in a pass in
    reverse program order (so a candidate sinks below the ones sunk after it only as far as they allow)."""
    n = len(ops)

    def keys_of(op):
        return _tile_keys(op, tiles, blocks)

    tkeys = [()] * n
    cand = [False] * n
    for i in range(n):
        w, r, _ = ops[i]
        ks = []
        ok = bool(w)              # (no reads at all: a memset, an iota)
        for op in w:
            kk = keys_of(op)
            if not kk or any(tiles[k][3] is not None for k in kk):
                ok = False
            ks.extend(kk)
        for op in r:
            kk = keys_of(op)
            if kk:
                ok = False
            ks.extend(kk)
        if ks:
            tkeys[i] = tuple(ks)
        cand[i] = ok
    fl = [f[0] for f in fences]
    key = [None] * n
    first_acc: dict = {}      # buf id -> the smallest sort key among the later accesses
    first_w: dict = {}        # buf id -> the smallest sort key among the later writes
    moved = 0
    fi = len(fl)              # index of the first fence after the instruction (reverse pass)
    for i in range(n - 1, -1, -1):
        while fi > 0 and fl[fi - 1] > i:
            fi -= 1
        w, r, _ = ops[i]
        k = (i,)
        if cand[i]:
            lim = (fl[fi],) if fi < len(fl) else (n,)
            for op in w:
                x = first_acc.get(op[0])
                if x is not None and x < lim:
                    lim = x
            for op in r:
                x = first_w.get(op[0])
                if x is not None and x < lim:
                    lim = x
            if lim[0] > i + 1:
                k = lim[:-1] + (lim[-1] - 0.5, i)
                moved += 1
        key[i] = k
        for op in w:
            b = op[0]
            x = first_acc.get(b)
            if x is None or k < x:
                first_acc[b] = k
            x = first_w.get(b)
            if x is None or k < x:
                first_w[b] = k
        for op in r:
            b = op[0]
            x = first_acc.get(b)
            if x is None or k < x:
                first_acc[b] = k
    pos = [0] * n
    for p, i in enumerate(sorted(range(n), key=key.__getitem__)):
        pos[i] = p
    return pos, tkeys, moved, {}
