"""The scheduler's per-core loop (the one timing model of trnsim): engines, DMA engines and their queues,
descriptor generation, semaphores (dependencies), barriers and the SBUF/PSUM capacity gate, one instruction at a
time in program order over arrays.  The model is described in ``scheduler``'s docstring.

Compiled with numba (``cache=True``).  The same function runs uncompiled as ``schedule_arrays.py_func`` (the loop
in Python, its helpers compiled: ``schedule(..., impl="python")`` or ``TRNSIM_SCHEDULER=python``), and numba's
own ``NUMBA_DISABLE_JIT=1`` runs every function of it as plain Python, for stepping through it in a debugger;
all three give identical timelines (tests/machine/test_sched_fast.py).

Encoding (built by ``sched_fast.encode``): instruction ``i`` has engine code ``eng[i]`` (``dma_code`` for DMA),
``cycles``/``ns``/``pre``/``rows``/``part0``/``nbytes`` and, for DMA, ``dge_m``/``dge_q``/``dge_c`` (DGE mode,
queue number or -1, DGE cost: ``InstrRecord.dge``); its operands are ``ptr[i]:ptr[i+1]``, the first ``nw[i]``
of them written and the rest read (indices into the operand arrays ``op_b`` (dense buffer), ``op_lo``, ``op_hi``,
``op_v`` (interned view)).  Per view: ``v_pitch``/``v_c0``/``v_c1`` (row geometry, pitch -1 if none) and
``v_size`` (elements).  Per buffer: ``b_mem`` (0 HBM, 1 SBUF, 2 PSUM) and ``b_size`` (bytes per partition).
``bar[i]``: the number of cores a ``core_barrier`` row names (-1: not a barrier); ``bar_t[i]``: the time that
barrier completes (the latest arrival of its participants) or NaN when not known yet: the loop then stops at that
row and returns its arrival (``stop_row``, ``stop_t``) with its state (``sched_state``), and the caller
(``scheduler``) runs it on from that row, with the same state, once every participant has arrived.

A core whose DMA engines serve several queues round robin (NeuronCore-v2/v3) runs the same rules in
simulated-time order instead (``sched_events``): there a transfer's end is not known when it is placed.

A buffer's live accesses are segments of a pooled array of operand indices, kept sorted by low element with ties
in arrival order (the rules of ``deps.AccessTracker``).
"""

from __future__ import annotations

import numpy as np

from .sched_jit import njit

from .sched_intervals import _BACKFILL, _append, _fill, _grow  # noqa: F401
from .sched_rules import dep_scan, dge_place, dma_xfer, pe_load, scan_room, track
from .sched_state import new_state  # noqa: F401  (sched_fast takes it from here)


@njit(cache=True)
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


@njit(cache=True)
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


@njit(cache=True, inline="always")
def _compute_times(st, cyc, ck, static, acc, nacc):
    """An engine instruction started at ``st`` (ns): ``(end, done)``.  The engine is free for the next one after
    its cost (``cyc`` cycles at ``ck`` cycles per ns); its result is committed after the cost plus the static
    overhead plus one access request per SBUF/PSUM operand (``nacc``): what a dependent instruction waits for.
    The one place an engine instruction's duration and latency are computed."""
    return st + cyc / ck, st + (cyc + static + acc * nacc) / ck


@njit(cache=True)
def schedule_arrays(eng, dma_code, clk, cycles, ns, pre, rows, part0, nbytes, ptr, nw,
                    op_b, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, v_size, b_mem, b_size,
                    static, acc, sema, fixed, nq, ppe, hbm_bytes_per_ns,
                    dge_m, dge_q, dge_c, nqk, bar, bar_t, state):
    """Run the loop from where ``state`` (``sched_state.new_state``, or the state a previous call returned)
    stands to the end of the record, or to a barrier whose completion ``bar_t`` does not know yet.  Returns
    ``(state, stop_row, stop_t)``: ``stop_row`` -1 when the record is done, else that barrier's row and
    ``stop_t`` this core's arrival at it (call again with the same state once ``bar_t`` has its completion)."""
    n = eng.shape[0]
    (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u,
     op_i, last_use, eng_free, eng_last, q_free, bs, be, bo, bn, qend, qlast, dbs, dbe, dbo, dbn, p0s, p1s,
     seen, wpool, rpool, woff, wcnt, wcap, wmax, roff, rcnt, rcap, rmax, t0, tdone, rel,
     live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b, lt_kind, lt_size, lt_t0, lt_t1, found, newb, si, sf) = state
    bcap = bs.shape[1]
    dcap = dbs.shape[1]
    gp = 3                                   # the GpSimd Engine's code (sched_fast._ENG_FIXED)
    row0 = si[0]
    resume = si[10] == 1                     # row0 is a barrier whose dependencies and gate were done
    synced = si[1] == 1
    pe_has = si[2] == 1
    pe_b = si[3]
    pe_lo = si[4]
    pe_hi = si[5]
    wused = si[6]
    rused = si[7]
    seq = si[8]
    nlt = si[9]
    pe_prev_start = sf[0]
    pe_load_free = sf[1]
    stop_row = -1
    stop_t = 0.0
    pr_row = np.empty(64, np.int64)          # scratch: the rows an instruction waits for (sched_rules.dep_scan)
    pr_end = np.empty(64, np.bool_)

    for idx in range(row0, n):
        e = eng[idx]
        ready = 0.0
        rb = -1
        gate = 0.0
        gb = -1
        ready_s = 0.0
        nd = 0
        nnew = 0
        w0 = ptr[idx]
        w1 = w0 + nw[idx]
        r0 = w1
        r1 = ptr[idx + 1]
        resumed = resume and idx == row0
        if resumed:                            # back at the barrier it stopped at: its waits are done
            nd = si[12]
            rb = si[13]
            ready_s = sf[3]
        else:
            # -- dependencies (sched_rules.dep_scan): the latest result or end it waits for -----------
            nops = r1 - r0 + w1 - w0
            mx, _ = scan_room(w0, r1, op_b, wcnt, rcnt)
            if found.size < mx:
                found = np.empty(2 * mx, np.int64)
            if newb.size < nops:
                newb = np.empty(nops, np.int64)
            npr, nfirst, nd, nnew, ready, rb, ready_s = dep_scan(
                idx, e, w0, w1, r0, r1, op_b, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, b_mem, seen,
                (wpool, woff, wcnt, wmax), (rpool, roff, rcnt, rmax), op_i, eng, deps, found, newb, pr_row, pr_end, 0,
                True, done, end, sema)
            # -- capacity gate for new on-chip buffers ---------------------------------------------
            for k in range(nnew):
                b = newb[k]
                kd = b_mem[b] - 1
                size = b_size[b]
                while live[kd] + size > capk[kd] and hn[kd] > 0:
                    t_r = ht[kd, 0]
                    sz = hz[kd, 0]
                    pb = hp[kd, 0]
                    hn[kd] = _heap_pop(ht[kd], hs[kd], hz[kd], hp[kd], hn[kd])
                    live[kd] -= sz
                    if t_r > pop_t[kd]:
                        pop_t[kd] = t_r
                        pop_b[kd] = pb
                if pop_t[kd] > gate:
                    gate = pop_t[kd]
                    gb = pop_b[kd]
                live[kd] += size
        # -- timing -----------------------------------------------------------------------------
        if e == dma_code:
            if ready >= gate:
                issue = ready
                b = rb
            else:
                issue = gate
                b = gb
            nrow = rows[idx]
            if nrow == 0:
                nrow = 1
            nuse = -(-nrow // ppe)
            if nuse > nq:
                nuse = nq
            q0 = (part0[idx] // ppe) % nq
            dmode = dge_m[idx]
            qk = dge_q[idx]
            if dmode == 2 and dbn.max() + 2 > dcap:
                dcap *= 2
                dbs, dbe, dbo = _grow(dbs, dbe, dbo, dcap)
            ds, b = dge_place(idx, dmode, issue, b, dge_c[idx], gp, clk[gp], eng_free, eng_last, dbs, dbe, dbo, dbn,
                              dge_s, dge_e, dge_u, fixed)
            xfer, sk, dk = dma_xfer(idx, ns[idx], fixed, r0, r1, w0, w1, op_b, b_mem, nbytes[idx],
                                    hbm_bytes_per_ns, hbm)
            if bcap - 2 * _BACKFILL - 8 < bn.max():
                bcap *= 2
                bs, be, bo = _grow(bs, be, bo, bcap)
            if synced and nuse == nq:
                nqu = 1
            else:
                if synced:
                    for q in range(1, nq):
                        bn[q] = bn[0]
                        for k in range(bn[0]):
                            bs[q, k] = bs[0, k]
                            be[q, k] = be[0, k]
                            bo[q, k] = bo[0, k]
                        q_free[q] = q_free[0]
                        for k in range(nqk):
                            qend[q, k] = qend[0, k]
                            qlast[q, k] = qlast[0, k]
                    synced = False
                nqu = nuse
            first_piece = np.inf
            have_first = False
            fin = ds
            delayed_by = -1
            for jq in range(nqu):
                if synced:
                    q = 0
                elif nuse == nq:
                    q = jq
                else:
                    q = (q0 + jq) % nq
                tq = ds
                oq = -1
                if qk >= 0 and qend[q, qk] > ds:
                    tq = qend[q, qk]
                    oq = qlast[q, qk]
                if q_free[q] <= tq:
                    _append(bs, be, bo, bn, q, tq, tq + xfer, idx)
                    f0 = tq
                    f1 = tq + xfer
                    ob = -1
                else:
                    f0, f1, ob = _fill(bs, be, bo, bn, q, tq, xfer, idx, p0s, p1s)
                if ob < 0:
                    ob = oq
                if qk >= 0:
                    qend[q, qk] = f1
                    qlast[q, qk] = idx
                if f1 > q_free[q]:
                    q_free[q] = f1
                if not have_first or f0 < first_piece:
                    first_piece = f0
                    have_first = True
                if f1 > fin:
                    fin = f1
                    delayed_by = ob
            if fin > ds + xfer + 1e-9 and delayed_by >= 0:
                b = delayed_by
            if have_first:
                ds = first_piece
            start[idx] = issue
            dstart[idx] = ds
            end[idx] = fin
            done[idx] = fin
            work[idx] = xfer
            queue[idx] = q0
            nqs[idx] = nuse
            srcm[idx] = sk
            dstm[idx] = dk
            d = fin
        else:
            ck = clk[e]
            if resumed:
                st = sf[2]
                b = si[11]
            else:
                st = eng_free[e]
                b = eng_last[e]
                if ready > st:
                    st = ready
                    b = rb
                if gate > st:
                    st = gate
                    b = gb
            if bar[idx] >= 0:                      # core_barrier: starts when the last participant arrives
                jt = bar_t[idx]
                if jt != jt:                       # not known yet: stop here with this core's arrival
                    stop_row = idx
                    stop_t = st
                    si[11] = b
                    si[12] = nd
                    si[13] = rb
                    sf[2] = st
                    sf[3] = ready_s
                    break
                if bar[idx] > 1:
                    jt += sema                     # the remote semaphore update reaching the other core
                    if jt > st:
                        st = jt
                        b = -1
            cyc = cycles[idx]
            if pre[idx] != 0.0 and e == 0:
                st, b, pe_has, pe_b, pe_lo, pe_hi, pe_prev_start, pe_load_free = pe_load(
                    e, st, b, rb, ready_s, pre[idx], ck, r0, r1, op_b, op_lo, op_hi, eng_last, pe_has, pe_b, pe_lo,
                    pe_hi, pe_prev_start, pe_load_free)
            nacc = 0                               # SBUF/PSUM access requests: one per on-chip operand
            for j in range(w0, r1):
                if b_mem[op_b[j]] != 0:
                    nacc += 1
            fin, d = _compute_times(st, cyc, ck, static, acc, nacc)
            work[idx] = fin - st
            start[idx] = st
            dstart[idx] = st
            end[idx] = fin
            done[idx] = d
            eng_free[e] = fin
            eng_last[e] = idx
        bind[idx] = b
        ndeps[idx] = nd
        # -- record the accesses (sched_rules.track) and the on-chip buffers' lifetimes and releases ------
        wpool, wused, rpool, rused = track(e, w0, w1, r0, r1, op_b, op_lo, op_hi, op_v, v_size, eng, op_i, wpool,
                                           wused, woff, wcnt, wcap, wmax, rpool, rused, roff, rcnt, rcap, rmax)
        for j in range(w0, r1):
            bb = op_b[j]
            if b_mem[bb] != 0:
                if np.isnan(t0[bb]) or last_use[bb] == idx:
                    if np.isnan(t0[bb]):
                        t0[bb] = dstart[idx]
                    if d > tdone[bb]:
                        tdone[bb] = d
                    if last_use[bb] == idx and not rel[bb]:
                        rel[bb] = True
                        kd = b_mem[bb] - 1
                        seq += 1
                        hn[kd] = _heap_push(ht[kd], hs[kd], hz[kd], hp[kd], hn[kd], tdone[bb], seq,
                                            b_size[bb], idx)
                        lt_kind[nlt] = kd
                        lt_size[nlt] = b_size[bb] * partk[kd]
                        lt_t0[nlt] = t0[bb]
                        lt_t1[nlt] = tdone[bb]
                        nlt += 1
                elif d > tdone[bb]:
                    tdone[bb] = d
    si[0] = n if stop_row < 0 else stop_row
    si[10] = 0 if stop_row < 0 else 1
    si[1] = 1 if synced else 0
    si[2] = 1 if pe_has else 0
    si[3] = pe_b
    si[4] = pe_lo
    si[5] = pe_hi
    si[6] = wused
    si[7] = rused
    si[8] = seq
    si[9] = nlt
    sf[0] = pe_prev_start
    sf[1] = pe_load_free
    return (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u,
            op_i, last_use, eng_free, eng_last, q_free, bs, be, bo, bn, qend, qlast, dbs, dbe, dbo, dbn, p0s, p1s,
            seen, wpool, rpool, woff, wcnt, wcap, wmax, roff, rcnt, rcap, rmax, t0, tdone, rel,
            live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b, lt_kind, lt_size, lt_t0, lt_t1, found, newb, si,
            sf), stop_row, stop_t


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
