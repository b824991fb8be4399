"""The rules of the scheduler's loop, one function each: each instruction's dependencies and the access trackers
(called in program order by ``sched_state.new_state``), an engine instruction's duration and latency, the Tensor
Engine's stationary load, descriptor generation and a transfer's engine time (called in simulated-time order by
``sched_events.run``).  Inlined into their callers by numba."""

from __future__ import annotations

import numpy as np

from .sched_intervals import _dge_slot, _insert
from .sched_jit import njit
from .sched_tracker import _bisect_right_lo, _drop_covered, _reserve, _scan, _seg_insert

__all__ = ["scan_room", "dep_scan", "track", "compute_times", "pe_load", "dge_place", "dma_xfer"]


@njit(cache=True, inline="always")
def compute_times(st, cyc, ck, static, acc, nacc):
    """An engine instruction started at ``st`` (ns): ``(end, done)``.  The engine is free for the next one after
    its cost (``cyc`` cycles at ``ck`` cycles per ns); its result is committed after the cost plus the static
    overhead plus one access request per SBUF/PSUM operand (``nacc``): what a dependent instruction waits for.
    The one place an engine instruction's duration and latency are computed."""
    return st + cyc / ck, st + (cyc + static + acc * nacc) / ck


@njit(cache=True, inline="always")
def scan_room(w0, r1, op_b, wcnt, rcnt):
    """Room ``dep_scan`` needs for row operands ``w0:r1``: ``(the most tracker entries one operand can find, their
    sum over the operands)``, a buffer's live writes plus reads.  The caller sizes ``found`` (and ``pr_row``,
    ``pr_end``) before the call, so the inlined rule hands no array back."""
    mx = 0
    tot = 0
    for j in range(w0, r1):
        b = op_b[j]
        c = wcnt[b] + rcnt[b]
        tot += c
        if c > mx:
            mx = c
    return mx, tot


@njit(cache=True, inline="always")
def dep_scan(idx, e, w0, w1, r0, r1, op_b, op_k, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, b_mem, seen, wtr, rtr,
             op_i, eng, deps, found, newb, pr_row, pr_end, npr):
    """Row ``idx``'s dependencies (``deps.AccessTracker``'s rules): appends to ``pr_row``/``pr_end`` from ``npr``
    on the rows it waits for, in the order found (its reads' writers, then its writes' writers and readers), each
    with whether it waits for that row's end (a later write on the same engine) rather than its result; records
    the first 8 other rows in ``deps[idx]``; lists its new on-chip buffers in ``newb``.  The caller sizes the
    scratch ``found`` and ``newb`` and the lists ``pr_row``/``pr_end`` beforehand (``scan_room``): an inlined call
    handing arrays back through a tuple costs reference counting on every row.  Returns ``(npr, entries of the
    first read operand, deps count, new buffers)``.  ``wtr``/``rtr`` are the write and read trackers as ``(pool,
    off, cnt, max)`` (a tuple: a call with more than 30 arguments compiles to a star-args call, which numba's
    inliner refuses).  The trackers are per dependency key ``op_k`` (a buffer, or an alias group of placed tiles:
    ``deps.alias_groups``); new buffers are by ``op_b``, whose first access may find the key's earlier accesses."""
    wpool, woff, wcnt, wmax = wtr
    rpool, roff, rcnt, rmax = rtr
    nd = 0
    nnew = 0
    nfirst = 0
    n0 = npr
    for j in range(r0, r1):
        b = op_b[j]
        if not seen[b]:
            seen[b] = True
            if b_mem[b] != 0:
                newb[nnew] = b
                nnew += 1
        b = op_k[j]
        if wcnt[b] > 0:
            c = wcnt[b]
            nf = _scan(wpool, woff[b], c, wmax[b], j, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, found, 0)
            for k in range(nf):
                p = op_i[found[k]]
                pr_row[npr] = p
                pr_end[npr] = False
                npr += 1
                dup = False
                for m in range(nd):
                    if deps[idx, m] == p:
                        dup = True
                        break
                if not dup and nd < 8:
                    deps[idx, nd] = p
                    nd += 1
        if j == r0:
            nfirst = npr - n0
    for j in range(w0, w1):
        b = op_b[j]
        if not seen[b]:
            seen[b] = True
            if b_mem[b] != 0:
                newb[nnew] = b
                nnew += 1
        b = op_k[j]
        cw = wcnt[b]
        cr = rcnt[b]
        if cw == 0 and cr == 0:
            continue
        nf = 0
        if cw + cr <= 8:
            if cw:
                nf = _scan(wpool, woff[b], cw, 1 << 62, j, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, found, nf)
            if cr:
                nf = _scan(rpool, roff[b], cr, 1 << 62, j, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, found, nf)
        else:
            if cw:
                nf = _scan(wpool, woff[b], cw, wmax[b], j, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, found, nf)
            if cr:
                nf = _scan(rpool, roff[b], cr, rmax[b], j, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, found, nf)
        for k in range(nf):
            p = op_i[found[k]]
            pr_row[npr] = p
            pr_end[npr] = eng[p] == e
            npr += 1
            if eng[p] != e:
                dup = False
                for m in range(nd):
                    if deps[idx, m] == p:
                        dup = True
                        break
                if not dup and nd < 8:
                    deps[idx, nd] = p
                    nd += 1
    return npr, nfirst, nd, nnew


@njit(cache=True, inline="always")
def track(e, w0, w1, r0, r1, op_b, op_lo, op_hi, op_v, v_size, eng, op_i, wpool, wused, woff, wcnt, wcap, wmax,
          rpool, rused, roff, rcnt, rcap, rmax):
    """Row accesses into the trackers (``deps.AccessTracker.add_write`` / ``add_read``): its writes drop the
    entries they cover, its reads join the readers (a repeated read by the same engine replaces the last).
    Returns ``(wpool, wused, rpool, rused)``."""
    for pas in range(2):
        jlo = w0 if pas == 0 else r0
        jhi = w1 if pas == 0 else r1
        for j in range(jlo, jhi):
            bb = op_b[j]
            lo = op_lo[j]
            hi = op_hi[j]
            if pas == 0:       # add_write
                if wcnt[bb] == 0 and rcnt[bb] == 0:
                    if wcnt[bb] >= wcap[bb]:
                        wpool, wused = _reserve(wpool, wused, woff, wcnt, wcap, bb)
                    wpool[woff[bb] + wcnt[bb]] = j
                    wcnt[bb] += 1
                    if hi - lo > wmax[bb]:
                        wmax[bb] = hi - lo
                else:
                    dense = hi - lo == v_size[op_v[j]]
                    _drop_covered(wpool, woff, wcnt, bb, j, dense, op_lo, op_hi, op_v)
                    _drop_covered(rpool, roff, rcnt, bb, j, dense, op_lo, op_hi, op_v)
                    if wcnt[bb] >= wcap[bb]:
                        wpool, wused = _reserve(wpool, wused, woff, wcnt, wcap, bb)
                    c = wcnt[bb]
                    o = woff[bb]
                    if c == 0 or lo >= op_lo[wpool[o + c - 1]]:
                        wpool[o + c] = j
                    else:
                        k = _bisect_right_lo(wpool, o, c, op_lo, lo)
                        _seg_insert(wpool, o, c, k, j)
                    wcnt[bb] = c + 1
                    if hi - lo > wmax[bb]:
                        wmax[bb] = hi - lo
            else:              # add_read
                c = rcnt[bb]
                o = roff[bb]
                if c:
                    last = rpool[o + c - 1]
                    if (eng[op_i[last]] == e and op_lo[last] == lo and op_hi[last] == hi
                            and op_v[last] == op_v[j]):
                        rpool[o + c - 1] = j
                    else:
                        if rcnt[bb] >= rcap[bb]:
                            rpool, rused = _reserve(rpool, rused, roff, rcnt, rcap, bb)
                        o = roff[bb]
                        if lo >= op_lo[rpool[o + c - 1]]:
                            rpool[o + c] = j
                        else:
                            k = _bisect_right_lo(rpool, o, c, op_lo, lo)
                            _seg_insert(rpool, o, c, k, j)
                        rcnt[bb] = c + 1
                        if hi - lo > rmax[bb]:
                            rmax[bb] = hi - lo
                else:
                    if rcnt[bb] >= rcap[bb]:
                        rpool, rused = _reserve(rpool, rused, roff, rcnt, rcap, bb)
                    rpool[roff[bb]] = j
                    rcnt[bb] = 1
                    if hi - lo > rmax[bb]:
                        rmax[bb] = hi - lo
    return wpool, wused, rpool, rused


@njit(cache=True, inline="always")
def pe_load(e, st, b, rb, ready_s, pre_i, ck, r0, r1, op_b, op_lo, op_hi, eng_last, pe_has, pe_b, pe_lo, pe_hi,
            pe_prev_start, pe_load_free):
    """A matmul's stationary load on the Tensor Engine (``pre_i`` cycles): it overlaps the previous multiply, is
    exposed when the stationary tile arrived late or the engine was idle, and is skipped when the same stationary
    tile (first read operand) is reused.  Returns ``(start, bound row, pe_has, pe_b, pe_lo, pe_hi,
    pe_prev_start, pe_load_free)``."""
    if r1 > r0:
        same = pe_has and op_b[r0] == pe_b and op_lo[r0] == pe_lo and op_hi[r0] == pe_hi
    else:
        same = False
    if not same:
        ls = ready_s if ready_s > pe_prev_start else pe_prev_start
        if pe_load_free > ls:
            ls = pe_load_free
        le = ls + pre_i / ck
        pe_load_free = le
        if le > st:
            st = le
            b = rb if rb >= 0 else eng_last[e]
    if r1 > r0:
        pe_has = True
        pe_b = op_b[r0]
        pe_lo = op_lo[r0]
        pe_hi = op_hi[r0]
    else:
        pe_has = False
    return st, b, pe_has, pe_b, pe_lo, pe_hi, st, pe_load_free


@njit(cache=True, inline="always")
def dge_place(idx, dmode, issue, b, cost, gp, clk_gp, eng_free, eng_last, dbs, dbe, dbo, dbn, dge_s, dge_e,
              dge_u, fixed):
    """A transfer's descriptor generation from ``issue`` on (``isa/dma_dge.py``): ``swdge`` on the GpSimd Engine in
    its program order (``cost`` cycles), ``hwdge`` on the hardware DGE block free first (``cost`` ns, a span in
    its gaps; ``new_state`` sizes ``dbs, dbe, dbo`` for every hwdge transfer), ``none`` nothing.  Returns ``(its arrival at the DMA
    engines after the fixed cost, bound row)``."""
    if dmode == 1:
        gs = eng_free[gp]
        if gs > issue:
            b = eng_last[gp]
        else:
            gs = issue
        ge = gs + cost / clk_gp
        eng_free[gp] = ge
        dge_s[idx] = gs
        dge_e[idx] = ge
        return ge + fixed, b
    if dmode == 2:
        g0, gw0 = _dge_slot(dbs, dbe, dbo, dbn, 0, issue, cost)
        g1, gw1 = _dge_slot(dbs, dbe, dbo, dbn, 1, issue, cost)
        if g0 <= g1:
            u = 0
            gs = g0
            wb = gw0
        else:
            u = 1
            gs = g1
            wb = gw1
        if gs > issue:
            b = wb
        ge = gs + cost
        _insert(dbs, dbe, dbo, dbn, u, gs, ge, idx)
        dge_s[idx] = gs
        dge_e[idx] = ge
        dge_u[idx] = u
        return ge + fixed, b
    return issue + fixed, b


@njit(cache=True, inline="always")
def dma_xfer(idx, ns_i, fixed, r0, r1, w0, w1, op_b, b_mem, nbytes_i, hbm_bytes_per_ns, hbm):
    """A transfer's time on each DMA engine it uses (its cost less the fixed cost, and no less than its HBM bytes,
    twice for HBM to HBM, at the chip's HBM peak) and its source and destination memories.  Returns ``(engine
    time, source memory, destination memory)``; sets ``hbm[idx]``."""
    xfer = ns_i - fixed
    if xfer < 0.0:
        xfer = 0.0
    sk = b_mem[op_b[r0]] if r1 > r0 else -1
    dk = b_mem[op_b[w0]] if w1 > w0 else -1
    nh = (1 if sk == 0 else 0) + (1 if dk == 0 else 0)
    if nh:
        hb = nbytes_i * nh
        hx = hb / hbm_bytes_per_ns
        if hx > xfer:
            xfer = hx
        hbm[idx] = hb
    return xfer, sk, dk
