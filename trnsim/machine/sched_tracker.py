"""The access trackers of the scheduler's loops as arrays (``deps.AccessTracker``'s rules): each buffer's live
writes and reads are segments of a pooled array of operand indices, kept sorted by low element with ties in
arrival order.  Helpers of ``sched_rules``."""

from __future__ import annotations

import numpy as np

from .sched_jit import njit


@njit(cache=True, inline="always")
def _overlap(a, b, op_v, v_pitch, v_c0, v_c1):
    va = op_v[a]
    vb = op_v[b]
    if va == vb:
        return True
    pa = v_pitch[va]
    if pa < 0:
        return True
    pb = v_pitch[vb]
    if pb < 0 or pa != pb:
        return True
    return v_c0[va] < v_c1[vb] and v_c0[vb] < v_c1[va]


@njit(cache=True, inline="always")
def _reserve(pool, used, off, cnt, cap, b):
    """Room for one more entry in buffer ``b``'s segment (moved to the pool's end at twice the size)."""
    if cnt[b] < cap[b]:
        return pool, used
    ncap = cap[b] * 2
    if ncap < 4:
        ncap = 4
    if used + ncap > pool.size:
        sz = pool.size * 2
        if sz < used + ncap:
            sz = used + ncap
        newp = np.empty(sz, np.int64)
        newp[:used] = pool[:used]
        pool = newp
    o = off[b]
    for k in range(cnt[b]):
        pool[used + k] = pool[o + k]
    off[b] = used
    cap[b] = ncap
    used += ncap
    return pool, used


@njit(cache=True, inline="always")
def _bisect_right_lo(pool, o, c, op_lo, x):
    lo = 0
    hi = c
    while lo < hi:
        m = (lo + hi) // 2
        if x < op_lo[pool[o + m]]:
            hi = m
        else:
            lo = m + 1
    return lo


@njit(cache=True, inline="always")
def _bisect_left_lo(pool, o, c, op_lo, x):
    lo = 0
    hi = c
    while lo < hi:
        m = (lo + hi) // 2
        if op_lo[pool[o + m]] < x:
            lo = m + 1
        else:
            hi = m
    return lo


@njit(cache=True, inline="always")
def _scan(pool, o, c, mx, op, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, out, nout):
    """Append to ``out`` the entries of a segment overlapping operand ``op`` (deps.AccessTracker._scan)."""
    lo = op_lo[op]
    hi = op_hi[op]
    if c <= 8:
        i0 = 0
        i1 = c
    else:
        i0 = _bisect_right_lo(pool, o, c, op_lo, lo - mx)
        i1 = _bisect_left_lo(pool, o, c, op_lo, hi)
    for k in range(i0, i1):
        e = pool[o + k]
        if op_lo[e] < hi and op_hi[e] > lo and ((op_lo[e] == lo and op_hi[e] == hi) or
                                                _overlap(e, op, op_v, v_pitch, v_c0, v_c1)):
            out[nout] = e
            nout += 1
    return nout


@njit(cache=True, inline="always")
def _seg_insert(pool, o, c, k, val):
    for j in range(c, k, -1):
        pool[o + j] = pool[o + j - 1]
    pool[o + k] = val


@njit(cache=True, inline="always")
def _drop_covered(pool, off, cnt, b, op, dense, op_lo, op_hi, op_v):
    """The entries of one segment that write ``op`` covers go (deps.AccessTracker.add_write)."""
    c = cnt[b]
    if c == 0:
        return
    o = off[b]
    lo = op_lo[op]
    hi = op_hi[op]
    v = op_v[op]
    if c == 1:
        e = pool[o]
        if (dense and op_lo[e] >= lo and op_hi[e] <= hi) or (op_lo[e] == lo and op_hi[e] == hi and op_v[e] == v):
            cnt[b] = 0
        return
    i0 = _bisect_left_lo(pool, o, c, op_lo, lo)
    if dense:
        i1 = _bisect_left_lo(pool, o, c, op_lo, hi)
    else:
        i1 = _bisect_right_lo(pool, o, c, op_lo, lo)
    if i0 == 0 and i1 == c and dense:
        allin = True
        for k in range(c):
            if op_hi[pool[o + k]] > hi:
                allin = False
                break
        if allin:
            cnt[b] = 0
            return
    w = i0
    for k in range(i0, c):
        e = pool[o + k]
        if k < i1 and ((dense and op_hi[e] <= hi) or (op_v[e] == v and op_hi[e] == hi)):
            continue
        pool[o + w] = e
        w += 1
    cnt[b] = w
