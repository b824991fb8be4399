"""Small array helpers of the scheduler's loop (``sched_events``, ``sched_state``): a growable array, binary
min-heaps (row numbers; (time, row) pairs, ties by row; the capacity gate's releases by (time, sequence)) and the
HBM traffic counter's bins, compiled with numba like the rest of the loop."""

from __future__ import annotations

import numpy as np

from .sched_jit import njit


@njit(cache=True, inline="always")
def _grow1(a, need):
    if need <= a.shape[0]:
        return a
    sz = 2 * a.shape[0]
    if sz < need:
        sz = need
    b = np.empty(sz, a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True, inline="always")
def _ipush(h, hn, v):
    """Push ``v`` on the int64 min-heap ``h[:hn]``; returns the new size (``h`` has room)."""
    k = hn
    h[k] = v
    while k > 0:
        par = (k - 1) // 2
        if h[par] <= h[k]:
            break
        h[par], h[k] = h[k], h[par]
        k = par
    return hn + 1


@njit(cache=True, inline="always")
def _ipop(h, hn):
    """Remove the least entry of the int64 min-heap ``h[:hn]`` (it is at 0); returns the new size."""
    hn -= 1
    h[0] = h[hn]
    k = 0
    while True:
        l = 2 * k + 1
        if l >= hn:
            break
        m = l
        if l + 1 < hn and h[l + 1] < h[l]:
            m = l + 1
        if h[k] <= h[m]:
            break
        h[m], h[k] = h[k], h[m]
        k = m
    return hn


@njit(cache=True, inline="always")
def _tpush(ht, hi, hn, t, i):
    """Push ``(t, i)`` on the min-heap by (time, row) ``ht/hi[:hn]``; returns the new size."""
    k = hn
    ht[k] = t
    hi[k] = i
    while k > 0:
        par = (k - 1) // 2
        if ht[par] < ht[k] or (ht[par] == ht[k] and hi[par] <= hi[k]):
            break
        ht[par], ht[k] = ht[k], ht[par]
        hi[par], hi[k] = hi[k], hi[par]
        k = par
    return hn + 1


@njit(cache=True, inline="always")
def _tpop(ht, hi, hn):
    hn -= 1
    ht[0] = ht[hn]
    hi[0] = hi[hn]
    k = 0
    while True:
        l = 2 * k + 1
        if l >= hn:
            break
        m = l
        r = l + 1
        if r < hn and (ht[r] < ht[l] or (ht[r] == ht[l] and hi[r] < hi[l])):
            m = r
        if ht[k] < ht[m] or (ht[k] == ht[m] and hi[k] <= hi[m]):
            break
        ht[m], ht[k] = ht[k], ht[m]
        hi[m], hi[k] = hi[k], hi[m]
        k = m
    return hn


@njit(cache=True, inline="always")
def _heap_push(ht, hs, hz, hp, hn, t, s, z, p):
    k = hn
    ht[k] = t
    hs[k] = s
    hz[k] = z
    hp[k] = p
    while k > 0:
        par = (k - 1) // 2
        if ht[par] < ht[k] or (ht[par] == ht[k] and hs[par] < hs[k]):
            break
        ht[par], ht[k] = ht[k], ht[par]
        hs[par], hs[k] = hs[k], hs[par]
        hz[par], hz[k] = hz[k], hz[par]
        hp[par], hp[k] = hp[k], hp[par]
        k = par
    return hn + 1


@njit(cache=True, inline="always")
def _heap_pop(ht, hs, hz, hp, hn):
    """Remove the least (time, seq) entry (it is at 0); returns the new size."""
    hn -= 1
    ht[0] = ht[hn]
    hs[0] = hs[hn]
    hz[0] = hz[hn]
    hp[0] = hp[hn]
    k = 0
    while True:
        l = 2 * k + 1
        if l >= hn:
            break
        m = l
        r = l + 1
        if r < hn and (ht[r] < ht[l] or (ht[r] == ht[l] and hs[r] < hs[l])):
            m = r
        if ht[k] < ht[m] or (ht[k] == ht[m] and hs[k] < hs[m]):
            break
        ht[m], ht[k] = ht[k], ht[m]
        hs[m], hs[k] = hs[k], hs[m]
        hz[m], hz[k] = hz[k], hz[m]
        hp[m], hp[k] = hp[k], hp[m]
        k = m
    return hn


@njit(cache=True)
def hbm_bins(start, end, hbm, bins):
    """The ``hbm_bytes_per_s`` counter's bins: each transfer's HBM bytes spread evenly over its data start to end
    (``sched_fast._counters``)."""
    total = 0.0
    for k in range(end.shape[0]):
        if end[k] > total:
            total = end[k]
    acc = np.zeros(bins)
    if total <= 0:
        return total, acc
    width = total / bins
    for k in range(start.shape[0]):
        s = start[k]
        e = end[k]
        hb = hbm[k]
        if hb == 0 or e <= s:
            continue
        rate = hb / (e - s)
        b0 = int(s / width)
        if b0 > bins - 1:
            b0 = bins - 1
        b1 = int(e / width)
        if b1 > bins - 1:
            b1 = bins - 1
        for bi in range(b0, b1 + 1):
            lo = s if s > bi * width else bi * width
            hi = e if e < (bi + 1) * width else (bi + 1) * width
            if hi > lo:
                acc[bi] += rate * (hi - lo)
    return total, acc


@njit(cache=True)
def factorize(keys):
    """``(first, inverse)`` of the int64 ``keys``: the index of each distinct key's first occurrence, in order of
    first occurrence, and each key's distinct number (an index into ``first``).  A hash table with linear probing,
    doubled when half full: one pass, where sorting (``np.unique``) costs several."""
    n = keys.shape[0]
    cap = 64
    tk = np.empty(cap, np.int64)
    tv = np.full(cap, -1, np.int64)
    first = np.empty(max(1, n), np.int64)
    inv = np.empty(n, np.int64)
    nd = 0
    for i in range(n):
        k = keys[i]
        h = ((k ^ (k >> 16) ^ (k >> 32)) & 0x7FFFFFF) * 0x9E3779B1     # (below 2**59: no overflow)
        s = (h ^ (h >> 29)) & (cap - 1)
        while tv[s] >= 0 and tk[s] != k:
            s = (s + 1) & (cap - 1)
        if tv[s] >= 0:
            inv[i] = tv[s]
            continue
        first[nd] = i
        inv[i] = nd
        tk[s] = k
        tv[s] = nd
        nd += 1
        if 2 * nd > cap:                     # rehash into twice the room
            cap *= 2
            tk = np.empty(cap, np.int64)
            tv = np.full(cap, -1, np.int64)
            for d in range(nd):
                k = keys[first[d]]
                h = ((k ^ (k >> 16) ^ (k >> 32)) & 0x7FFFFFF) * 0x9E3779B1
                s = (h ^ (h >> 29)) & (cap - 1)
                while tv[s] >= 0:
                    s = (s + 1) & (cap - 1)
                tk[s] = k
                tv[s] = d
    return first[:nd].copy(), inv
