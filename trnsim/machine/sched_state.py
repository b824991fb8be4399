"""The state of the scheduler's loop (``sched_kernels.schedule_arrays``) for one core: its results so far and
everything it keeps between instructions, as one tuple of arrays, so that a run stopped at a barrier goes on from
there once the barrier's completion is known (``scheduler``) instead of starting again.

Tuple order (``new_state``; ``schedule_arrays`` unpacks and returns it in the same order): per instruction the
results ``start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u``;
``op_i`` (instruction of each operand), ``last_use`` (per buffer); the engines ``eng_free, eng_last``, the DMA
engines ``q_free, bs, be, bo, bn`` (busy intervals, ``sched_intervals``), ``qend, qlast`` (per DMA engine and
queue), the hardware DGE blocks ``dbs, dbe, dbo, dbn``, scratch ``p0s, p1s``; the access trackers ``seen, wpool,
rpool, woff, wcnt, wcap, wmax, roff, rcnt, rcap, rmax, t0, tdone, rel``; the capacity gate ``live, capk, partk``
and its release heaps ``ht, hs, hz, hp, hn, pop_t, pop_b``; the buffers' lifetimes ``lt_kind, lt_size, lt_t0,
lt_t1``; scratch ``found, newb``; and the scalars ``si`` (int64: 0 next row, 1 synced, 2 pe_has, 3 pe_b, 4
pe_lo, 5 pe_hi, 6 wused, 7 rused, 8 seq, 9 nlt, 10 resuming at a barrier, 11-13 that barrier's bound row,
dependency count and ready row) and ``sf`` (float64: 0 pe_prev_start, 1 pe_load_free, 2-3 the barrier's
arrival and ready time of its first read).
"""

from __future__ import annotations

import numpy as np

from .sched_intervals import _BACKFILL
from .sched_jit import njit

__all__ = ["new_state"]


@njit(cache=True)
def new_state(n, nb, ne, nq, nqk, ptr, op_b, cap_sbuf, cap_psum, parts_sbuf, parts_psum):
    """The loop's state before the first instruction of a record of ``n`` instructions, ``nb`` buffers, ``ne``
    engine codes and ``nq`` DMA engines of ``nqk`` queue keys each."""
    nop = op_b.shape[0]
    start = np.zeros(n)
    dstart = np.zeros(n)
    end = np.zeros(n)
    done = np.zeros(n)
    work = np.zeros(n)
    queue = np.full(n, -1, np.int64)
    nqs = np.zeros(n, np.int64)
    hbm = np.zeros(n, np.int64)
    srcm = np.full(n, -1, np.int64)
    dstm = np.full(n, -1, np.int64)
    deps = np.zeros((n, 8), np.int64)
    ndeps = np.zeros(n, np.int64)
    bind = np.full(n, -1, np.int64)
    dge_s = np.zeros(n)
    dge_e = np.zeros(n)
    dge_u = np.full(n, -1, np.int64)

    op_i = np.empty(nop, np.int64)           # instruction of each operand
    for i in range(n):
        for j in range(ptr[i], ptr[i + 1]):
            op_i[j] = i
    last_use = np.full(nb, -1, np.int64)
    for i in range(n):
        for j in range(ptr[i], ptr[i + 1]):
            last_use[op_b[j]] = i

    eng_free = np.zeros(ne)
    eng_last = np.full(ne, -1, np.int64)
    q_free = np.zeros(nq)
    bs = np.zeros((nq, 64))
    be = np.zeros((nq, 64))
    bo = np.zeros((nq, 64), np.int64)
    bn = np.zeros(nq, np.int64)
    qend = np.zeros((nq, nqk))
    qlast = np.full((nq, nqk), -1, np.int64)
    dbs = np.zeros((2, 64))                  # busy intervals of the two hardware DGE blocks
    dbe = np.zeros((2, 64))
    dbo = np.zeros((2, 64), np.int64)
    dbn = np.zeros(2, np.int64)
    p0s = np.empty(2 * _BACKFILL + 8)
    p1s = np.empty(2 * _BACKFILL + 8)

    seen = np.zeros(nb, np.bool_)
    wpool = np.empty(max(16, 4 * nb), np.int64)
    rpool = np.empty(max(16, 4 * nb), np.int64)
    woff = np.zeros(nb, np.int64)
    wcnt = np.zeros(nb, np.int64)
    wcap = np.zeros(nb, np.int64)
    wmax = np.zeros(nb, np.int64)
    roff = np.zeros(nb, np.int64)
    rcnt = np.zeros(nb, np.int64)
    rcap = np.zeros(nb, np.int64)
    rmax = np.zeros(nb, np.int64)
    t0 = np.full(nb, np.nan)
    tdone = np.zeros(nb)
    rel = np.zeros(nb, np.bool_)
    # capacity (kind 0 sbuf, 1 psum)
    live = np.zeros(2, np.int64)
    capk = np.array([cap_sbuf, cap_psum], np.int64)
    partk = np.array([parts_sbuf, parts_psum], np.int64)
    ht = np.empty((2, nb + 1))
    hs = np.empty((2, nb + 1), np.int64)
    hz = np.empty((2, nb + 1), np.int64)
    hp = np.empty((2, nb + 1), np.int64)
    hn = np.zeros(2, np.int64)
    pop_t = np.zeros(2)
    pop_b = np.full(2, -1, np.int64)
    lt_kind = np.empty(nb, np.int64)
    lt_size = np.empty(nb, np.int64)
    lt_t0 = np.empty(nb)
    lt_t1 = np.empty(nb)
    found = np.empty(64, np.int64)
    newb = np.empty(64, np.int64)
    si = np.zeros(14, np.int64)
    si[1] = 1                                # synced: every transfer so far used all DMA engines
    si[3] = -1
    si[4] = -1
    si[5] = -1
    sf = np.zeros(4)
    return (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u,
            op_i, last_use, eng_free, eng_last, q_free, bs, be, bo, bn, qend, qlast, dbs, dbe, dbo, dbn, p0s, p1s,
            seen, wpool, rpool, woff, wcnt, wcap, wmax, roff, rcnt, rcap, rmax, t0, tdone, rel,
            live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b, lt_kind, lt_size, lt_t0, lt_t1, found, newb, si, sf)
