"""The busy intervals of one DMA engine or hardware DGE block, for the scheduler's loop (``sched_rules.dge_place``).
Row ``q`` of the arrays ``bs``/``be``/``bo`` holds an engine's merged intervals (starts, ends, the row of the
transfer ending each), ``bn[q]`` how many.  Only the most recent ``_BACKFILL`` intervals are searched for a gap
(older gaps are long past)."""

from __future__ import annotations

import numpy as np
from .sched_jit import njit

_BACKFILL = 32   # busy intervals searched per engine: the most recent ones (trnsim's choice)


@njit(cache=True)
def _bisect_right(a, q, n, x):
    """bisect.bisect_right(a[q, :n], x)."""
    lo = 0
    hi = n
    while lo < hi:
        m = (lo + hi) // 2
        if x < a[q, m]:
            hi = m
        else:
            lo = m + 1
    return lo


@njit(cache=True)
def _append(bs, be, bo, bn, q, s, e, idx):
    """Mark [s, e) busy on engine ``q`` after (or touching) its last interval."""
    n = bn[q]
    if n > 0 and be[q, n - 1] >= s:
        if e > be[q, n - 1]:
            be[q, n - 1] = e
            bo[q, n - 1] = idx
    else:
        bs[q, n] = s
        be[q, n] = e
        bo[q, n] = idx
        bn[q] = n + 1


@njit(cache=True)
def _insert(bs, be, bo, bn, q, s, e, idx):
    """Mark [s, e) busy on engine ``q`` (it lies in a gap), merging with the intervals it touches."""
    n = bn[q]
    if n == 0 or s >= be[q, n - 1]:
        _append(bs, be, bo, bn, q, s, e, idx)
        return
    i = _bisect_right(bs, q, n, s)
    if i > 0 and be[q, i - 1] >= s - 1e-9:
        i -= 1
        if e > be[q, i]:
            be[q, i] = e
            bo[q, i] = idx
    else:
        for j in range(n, i, -1):
            bs[q, j] = bs[q, j - 1]
            be[q, j] = be[q, j - 1]
            bo[q, j] = bo[q, j - 1]
        bs[q, i] = s
        be[q, i] = e
        bo[q, i] = idx
        n += 1
        bn[q] = n
    j = i + 1
    if j < n and bs[q, j] <= be[q, i] + 1e-9:
        if be[q, j] > be[q, i]:
            be[q, i] = be[q, j]
            bo[q, i] = bo[q, j]
        for k in range(j, n - 1):
            bs[q, k] = bs[q, k + 1]
            be[q, k] = be[q, k + 1]
            bo[q, k] = bo[q, k + 1]
        bn[q] = n - 1


@njit(cache=True)
def _dge_slot(bs, be, bo, bn, q, t, dur):
    """The earliest start ``>= t`` of ``dur`` ns free on hardware DGE block ``q`` (a descriptor generation is not
    split): ``(start, the row it waited behind or -1)``."""
    n = bn[q]
    i = _bisect_right(be, q, n, t)
    waited = -1
    if i < n - _BACKFILL:
        i = n - _BACKFILL
        if be[q, i - 1] > t:
            t = be[q, i - 1]
            waited = bo[q, i - 1]
    cur = t
    while i < n:
        if be[q, i] <= cur:
            i += 1
            continue
        if bs[q, i] >= cur + dur:
            break
        cur = be[q, i]
        waited = bo[q, i]
        i += 1
    return cur, waited
