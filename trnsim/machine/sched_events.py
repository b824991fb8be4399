"""The scheduler's loop in simulated-time order, for a core whose DMA engines serve their queues round robin
(NeuronCore-v2/v3, ``dma_share``): the DMA engines, their queues, descriptor generation, the engines, semaphores
(dependencies) and the SBUF/PSUM capacity gate advanced together, event by event, so that a transfer arriving on
an engine while another queue's transfer moves there slows it (and what waits for it) at once, with no
rescheduling.

Under round robin a transfer's end depends on the transfers of other queues that arrive while it moves, and those
can come later in program order than the instructions waiting for it.  So the record is taken in two steps:

1. In program order, each instruction's dependencies (the rows whose result or end it waits for), its new
   on-chip buffers and the access trackers: nothing here depends on time.
2. In simulated time: an instruction is placed (its start, and for a transfer its arrival at the DMA engines) once
   every row it waits for is known, it is the next of its engine's instructions (engines run their programs in
   order; a ``swdge`` transfer's descriptors are the GpSimd Engine's) and its new buffers have passed the
   capacity gate.  The gate takes each memory's new buffers in program order, as
   ``sched_kernels`` does (a new buffer waits for enough buffers whose last access comes before it to be
   released, the earliest released first), whether or not their instructions can start yet.  The DMA engines
   serve the transfers that have arrived as a fluid (``dma_share``'s model): each engine shares its time equally
   among its classes with a transfer ready (a named queue serves its transfers in program order, the transfers
   of no named queue are one class served the earliest in program order first), and time advances to the next
   arrival or the next end of a transfer's part on an engine.  A transfer that waited on an engine behind
   another (its queue's previous transfer, an earlier one of no named queue) names it as its critical-path link
   (``bind``); one only slowed by sharing keeps the row it was issued after.

Time only advances to ``T`` once nothing still unplaced can start before ``T``: every instruction not placed
waits, directly or through others, for a transfer that has not ended (so no sooner than the next end the engines
give), and a new buffer waiting on the gate takes a release that is known and no later than ``T`` or waits for
one that is not known yet.  Each instruction is placed once: no rescheduling, no rounds.  The hardware DGE blocks
are filled in the order transfers are placed (in program order in ``sched_kernels``).

The dependency scan, the access trackers, the Tensor Engine's stationary load, descriptor generation and a
transfer's engine time are ``sched_kernels``' code, repeated here: a change to one of these rules is made in both
loops (tests/machine/test_dma_share.py and test_sched_fast.py compare them).  Calling them as shared functions from
the program-order loop made it 40% slower (1.84 -> 2.61 us per instruction scheduled), so they are not shared yet.

With a single class of transfers per engine (no named queue, or one) the loop of ``sched_kernels`` gives the same
rule (its gap filling is the program-order priority among one class) in one pass in program order, and runs
instead.  Not modelled here: barriers between cores (a launch with ``core_barrier`` keeps that loop's gap
filling).
"""

from __future__ import annotations

import numpy as np

from .sched_heaps import _grow1, _ipop, _ipush, _tpop, _tpush
from .sched_intervals import _grow
from .sched_jit import njit
from .sched_kernels import _compute_times, _heap_pop, _heap_push
from .sched_rules import dep_scan, dge_place, dma_xfer, pe_load, scan_room, track

__all__ = ["schedule_events"]

_EPS = 1e-9        # a transfer's part with less engine time left than this (relative) has ended


@njit(cache=True)
def schedule_events(eng, dma_code, clk, cycles, ns, pre, rows, part0, nbytes, ptr, nw,
                    op_b, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, v_size, b_mem, b_size,
                    static, acc, sema, fixed, nq, ppe, hbm_bytes_per_ns,
                    dge_m, dge_q, dge_c, nqk, state):
    """The whole record of one core in simulated-time order (see the module docstring); the arguments and the
    state are ``sched_kernels.schedule_arrays``'s (no barrier rows).  Returns the state."""
    n = eng.shape[0]
    (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u,
     op_i, last_use, eng_free, eng_last, q_free, bs, be, bo, bn, qend, qlast, dbs, dbe, dbo, dbn, p0s, p1s,
     seen, wpool, rpool, woff, wcnt, wcap, wmax, roff, rcnt, rcap, rmax, t0, tdone, rel,
     live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b, lt_kind, lt_size, lt_t0, lt_t1, found, newb, si, sf) = state
    gp = 3                                   # the GpSimd Engine's code (sched_fast._ENG_FIXED)
    nb = b_mem.shape[0]
    wused = si[6]
    rused = si[7]
    seq = si[8]
    nlt = si[9]
    dcap = dbs.shape[1]

    # -- 1. program order: dependencies, new buffers, access trackers ---------------------------------------
    pr_ptr = np.zeros(n + 1, np.int64)
    pr_row = np.empty(max(16, 2 * n), np.int64)
    pr_end = np.empty(max(16, 2 * n), np.bool_)      # waits for the row's end (same engine, after it) not result
    pr_first = np.zeros(n, np.int64)                 # entries found for the first read operand
    nb_ptr = np.zeros(n + 1, np.int64)
    nb_list = np.empty(max(1, nb), np.int64)
    bacc = np.zeros(nb, np.int64)                    # accesses of each on-chip buffer not yet known
    npr = 0
    nnb = 0
    for idx in range(n):
        e = eng[idx]
        w0 = ptr[idx]
        w1 = w0 + nw[idx]
        r0 = w1
        r1 = ptr[idx + 1]
        nops = r1 - r0 + w1 - w0
        mx, tot = scan_room(w0, r1, op_b, wcnt, rcnt)
        if found.size < mx:
            found = np.empty(2 * mx, np.int64)
        if newb.size < nops:
            newb = np.empty(nops, np.int64)
        pr_row = _grow1(pr_row, npr + tot)
        pr_end = _grow1(pr_end, npr + tot)
        npr, nfirst, nd, nnew, _, _, _ = dep_scan(
            idx, e, w0, w1, r0, r1, op_b, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, b_mem, seen,
            (wpool, woff, wcnt, wmax), (rpool, roff, rcnt, rmax), op_i, eng, deps, found, newb, pr_row, pr_end, npr,
            False, done, end, sema)
        pr_first[idx] = nfirst
        ndeps[idx] = nd
        pr_ptr[idx + 1] = npr
        for k in range(nnew):
            nb_list[nnb + k] = newb[k]
        nnb += nnew
        nb_ptr[idx + 1] = nnb
        for j in range(w0, r1):
            if b_mem[op_b[j]] != 0:
                bacc[op_b[j]] += 1
        wpool, wused, rpool, rused = track(e, w0, w1, r0, r1, op_b, op_lo, op_hi, op_v, v_size, eng, op_i, wpool,
                                           wused, woff, wcnt, wcap, wmax, rpool, rused, roff, rcnt, rcap, rmax)

    # -- 2. the order constraints and the DMA engines' classes --------------------------------------------
    nlane = dma_code + 1
    lane = np.full(n, -1, np.int64)          # engine rows: their engine; swdge transfers: the GpSimd Engine
    lane_next = np.full(n, -1, np.int64)
    lane_head = np.full(nlane, -1, np.int64)
    lane_last = np.full(nlane, -1, np.int64)
    gate_next = np.full((2, n), -1, np.int64)    # per kind (SBUF, PSUM): the rows with new buffers of it
    gate_head = np.full(2, -1, np.int64)
    gate_last = np.full(2, -1, np.int64)
    hk = np.zeros((n, 2), np.bool_)
    q0a = np.zeros(n, np.int64)
    nusea = np.zeros(n, np.int64)
    cls = np.zeros(n, np.int64)
    ncls = nqk + 1
    pbase = np.zeros(n + 1, np.int64)
    for i in range(n):
        e = eng[i]
        if e != dma_code:
            lane[i] = e
        elif dge_m[i] == 1:
            lane[i] = gp
        l = lane[i]
        if l >= 0:
            if lane_last[l] >= 0:
                lane_next[lane_last[l]] = i
            else:
                lane_head[l] = i
            lane_last[l] = i
        for kk in range(nb_ptr[i], nb_ptr[i + 1]):
            hk[i, b_mem[nb_list[kk]] - 1] = True
        for kd in range(2):
            if hk[i, kd]:
                if gate_last[kd] >= 0:
                    gate_next[kd, gate_last[kd]] = i
                else:
                    gate_head[kd] = i
                gate_last[kd] = i
        pbase[i + 1] = pbase[i]
        if e == dma_code:
            nrow = rows[i]
            if nrow == 0:
                nrow = 1
            nuse = -(-nrow // ppe)
            if nuse > nq:
                nuse = nq
            q0a[i] = (part0[i] // ppe) % nq
            nusea[i] = nuse
            cls[i] = dge_q[i] + 1 if dge_q[i] >= 0 else 0
            pbase[i + 1] = pbase[i] + nuse
    # the named queues of each DMA engine: their transfers in program order (key q * ncls + class)
    fcnt = np.zeros(nq * ncls + 1, np.int64)
    for i in range(n):
        if eng[i] == dma_code and cls[i] > 0:
            for jq in range(nusea[i]):
                fcnt[((q0a[i] + jq) % nq) * ncls + cls[i] + 1] += 1
    for k in range(nq * ncls):
        fcnt[k + 1] += fcnt[k]
    fptr = fcnt.copy()
    frow = np.empty(max(1, fcnt[nq * ncls]), np.int64)
    for i in range(n):
        if eng[i] == dma_code and cls[i] > 0:
            for jq in range(nusea[i]):
                key = ((q0a[i] + jq) % nq) * ncls + cls[i]
                frow[fptr[key]] = i
                fptr[key] += 1
    fhead = fcnt[:nq * ncls].copy()              # next transfer of each (engine, queue) not finished there
    qcls = np.zeros((nq, ncls), np.int64)        # the named classes present on each engine
    nqc = np.zeros(nq, np.int64)
    for q in range(nq):
        for c in range(1, ncls):
            if fcnt[q * ncls + c + 1] > fcnt[q * ncls + c]:
                qcls[q, nqc[q]] = c
                nqc[q] += 1
    n0 = 0
    for i in range(n):
        if eng[i] == dma_code and cls[i] == 0:
            n0 += 1
    c0h = np.empty((nq, max(1, n0)), np.int64)   # per engine: arrived transfers of no named queue (by row)
    c0n = np.zeros(nq, np.int64)
    rem = np.zeros(max(1, pbase[n]))             # each transfer's engine time left on each of its engines
    left = np.zeros(n, np.int64)
    arrived = np.zeros(n, np.bool_)
    first = np.full(n, np.inf)
    arr_t = np.zeros(n)                          # each transfer's arrival at its engines
    blk = np.full(n, -1, np.int64)               # the transfer it last waited behind on an engine
    # successors (the rows waiting for each row)
    npend = np.zeros(n, np.int64)
    scnt = np.zeros(n + 1, np.int64)
    for i in range(n):
        npend[i] = pr_ptr[i + 1] - pr_ptr[i]
        for k in range(pr_ptr[i], pr_ptr[i + 1]):
            scnt[pr_row[k] + 1] += 1
    for i in range(n):
        scnt[i + 1] += scnt[i]
    sfill = scnt.copy()
    srow = np.empty(max(1, npr), np.int64)
    for i in range(n):
        for k in range(pr_ptr[i], pr_ptr[i + 1]):
            p = pr_row[k]
            srow[sfill[p]] = i
            sfill[p] += 1
    # buffers not yet released, per kind, by the row of their last access (the gate's program order)
    ur = np.empty((2, max(1, nb)), np.int64)
    urn = np.zeros(2, np.int64)
    for bb in range(nb):
        if b_mem[bb] != 0 and seen[bb]:
            kd = b_mem[bb] - 1
            ur[kd, urn[kd]] = bb
            urn[kd] += 1
    for kd in range(2):
        order = np.argsort(last_use[ur[kd, :urn[kd]]], kind="mergesort")
        ur[kd, :urn[kd]] = ur[kd, :urn[kd]][order]
    urp = np.zeros(2, np.int64)
    # released buffers not yet in the gate's heap, by the row of their last access
    sh = np.empty((2, max(1, nb)), np.int64)      # heap of buffers keyed by last access row
    shn = np.zeros(2, np.int64)
    skey = np.empty((2, max(1, nb)), np.int64)
    g_k = np.zeros(2, np.int64)                  # per kind: new buffers of its head row passed so far
    g_blocked = np.zeros(2, np.bool_)            # per kind: its head waits for a release
    gpass = np.zeros((n, 2), np.bool_)
    g_t = np.zeros(n)                            # each row's gate so far and the row it waited for
    g_b = np.full(n, -1, np.int64)

    placed = np.zeros(n, np.bool_)
    known = np.zeros(n, np.bool_)
    nknown = 0
    wl = np.empty(max(16, 2 * n), np.int64)      # rows to try to place
    wln = 0
    kq = np.empty(max(16, n), np.int64)          # rows just known
    kqn = 0
    ah_t = np.empty(max(1, n))                   # arrivals not yet at the engines (time, row)
    ah_i = np.empty(max(1, n), np.int64)
    ahn = 0
    T = 0.0
    lb = 0.0                                     # no time still unknown is earlier than this
    pe_has = si[2] == 1
    pe_b = si[3]
    pe_lo = si[4]
    pe_hi = si[5]
    pe_prev_start = sf[0]
    pe_load_free = sf[1]
    for i in range(n - 1, -1, -1):
        wl[wln] = i
        wln += 1

    while True:
        while kqn > 0 or wln > 0:
            if kqn > 0:
                # -- a row's times are known: its accesses' lifetimes, releases, the rows waiting for it --
                kqn -= 1
                i = kq[kqn]
                known[i] = True
                nknown += 1
                for j in range(ptr[i], ptr[i + 1]):
                    bb = op_b[j]
                    if b_mem[bb] == 0:
                        continue
                    if np.isnan(t0[bb]) or dstart[i] < t0[bb]:
                        t0[bb] = dstart[i]
                    if done[i] > tdone[bb]:
                        tdone[bb] = done[i]
                    bacc[bb] -= 1
                    if bacc[bb] == 0 and not rel[bb]:
                        rel[bb] = True
                        kd = b_mem[bb] - 1
                        skey[kd, bb] = last_use[bb]
                        # heap of buffers by last access row
                        k = shn[kd]
                        sh[kd, k] = bb
                        while k > 0:
                            par = (k - 1) // 2
                            if last_use[sh[kd, par]] <= last_use[sh[kd, k]]:
                                break
                            sh[kd, par], sh[kd, k] = sh[kd, k], sh[kd, par]
                            k = par
                        shn[kd] += 1
                        lt_kind[nlt] = kd
                        lt_size[nlt] = b_size[bb] * partk[kd]
                        lt_t0[nlt] = t0[bb]
                        lt_t1[nlt] = tdone[bb]
                        nlt += 1
                        if g_blocked[kd] and gate_head[kd] >= 0:
                            wl = _grow1(wl, wln + 1)
                            wl[wln] = gate_head[kd]
                            wln += 1
                for k in range(scnt[i], scnt[i + 1]):
                    s = srow[k]
                    npend[s] -= 1
                    if npend[s] == 0:
                        wl = _grow1(wl, wln + 1)
                        wl[wln] = s
                        wln += 1
                continue
            # -- try to place a row ------------------------------------------------------------------
            wln -= 1
            idx = wl[wln]
            if placed[idx]:
                continue
            # the capacity gate, kind by kind (each kind's new buffers in program order)
            stop = False
            for kd in range(2):
                if not hk[idx, kd] or gpass[idx, kd]:
                    continue
                if gate_head[kd] != idx:
                    stop = True
                    continue
                g_blocked[kd] = False
                skip = g_k[kd]
                for kk in range(nb_ptr[idx], nb_ptr[idx + 1]):
                    b = nb_list[kk]
                    if b_mem[b] - 1 != kd:
                        continue
                    if skip > 0:
                        skip -= 1
                        continue
                    size = b_size[b]
                    # the releases of buffers last accessed before this row join the gate's heap
                    while shn[kd] > 0 and last_use[sh[kd, 0]] < idx:
                        bb = sh[kd, 0]
                        shn[kd] -= 1
                        sh[kd, 0] = sh[kd, shn[kd]]
                        k2 = 0
                        while True:
                            c1 = 2 * k2 + 1
                            if c1 >= shn[kd]:
                                break
                            m = c1
                            if c1 + 1 < shn[kd] and last_use[sh[kd, c1 + 1]] < last_use[sh[kd, c1]]:
                                m = c1 + 1
                            if last_use[sh[kd, k2]] <= last_use[sh[kd, m]]:
                                break
                            sh[kd, m], sh[kd, k2] = sh[kd, k2], sh[kd, m]
                            k2 = m
                        seq += 1
                        hn[kd] = _heap_push(ht[kd], hs[kd], hz[kd], hp[kd], hn[kd], tdone[bb], seq, b_size[bb],
                                            last_use[bb])
                    while urp[kd] < urn[kd] and rel[ur[kd, urp[kd]]]:
                        urp[kd] += 1
                    pend = urp[kd] < urn[kd] and last_use[ur[kd, urp[kd]]] < idx
                    while live[kd] + size > capk[kd]:
                        if hn[kd] > 0 and (not pend or ht[kd, 0] <= lb):
                            t_r = ht[kd, 0]
                            sz = hz[kd, 0]
                            pb = hp[kd, 0]
                            hn[kd] = _heap_pop(ht[kd], hs[kd], hz[kd], hp[kd], hn[kd])
                            live[kd] -= sz
                            if t_r > pop_t[kd]:
                                pop_t[kd] = t_r
                                pop_b[kd] = pb
                        elif hn[kd] == 0 and not pend:
                            break
                        else:
                            g_blocked[kd] = True
                            break
                    if g_blocked[kd]:
                        break
                    if pop_t[kd] > g_t[idx]:
                        g_t[idx] = pop_t[kd]
                        g_b[idx] = pop_b[kd]
                    live[kd] += size
                    g_k[kd] += 1
                if g_blocked[kd]:
                    stop = True
                    continue
                gpass[idx, kd] = True
                g_k[kd] = 0
                gate_head[kd] = gate_next[kd, idx]
                if gate_head[kd] >= 0:
                    wl = _grow1(wl, wln + 1)
                    wl[wln] = gate_head[kd]
                    wln += 1
            if stop:
                continue
            if npend[idx] > 0:
                continue
            l = lane[idx]
            if l >= 0 and lane_head[l] != idx:
                continue
            e = eng[idx]
            ready = 0.0
            rb = -1
            ready_s = 0.0
            for k in range(pr_ptr[idx], pr_ptr[idx + 1]):
                p = pr_row[k]
                if eng[p] == e:
                    t = end[p] if pr_end[k] else done[p]
                else:
                    t = done[p] + sema
                if t > ready:
                    ready = t
                    rb = p
                if k - pr_ptr[idx] + 1 == pr_first[idx]:
                    ready_s = ready
            gate = g_t[idx]
            gb = g_b[idx]
            # -- place it ------------------------------------------------------------------------
            w0 = ptr[idx]
            w1 = w0 + nw[idx]
            r0 = w1
            r1 = ptr[idx + 1]
            if e == dma_code:
                if ready >= gate:
                    issue = ready
                    b = rb
                else:
                    issue = gate
                    b = gb
                if dge_m[idx] == 2 and dbn.max() + 2 > dcap:
                    dcap *= 2
                    dbs, dbe, dbo = _grow(dbs, dbe, dbo, dcap)
                ds, b = dge_place(idx, dge_m[idx], issue, b, dge_c[idx], gp, clk[gp], eng_free, eng_last, dbs, dbe,
                                  dbo, dbn, dge_s, dge_e, dge_u, fixed)
                xfer, sk, dk = dma_xfer(idx, ns[idx], fixed, r0, r1, w0, w1, op_b, b_mem, nbytes[idx],
                                        hbm_bytes_per_ns, hbm)
                if ds < T - 1e-6 * (1.0 + T):    # (cannot happen: nothing unplaced is earlier than T)
                    raise ValueError("trnsim: the event-driven scheduler placed a transfer before its time")
                start[idx] = issue
                work[idx] = xfer
                queue[idx] = q0a[idx]
                nqs[idx] = nusea[idx]
                srcm[idx] = sk
                dstm[idx] = dk
                bind[idx] = b
                dstart[idx] = ds
                arr_t[idx] = ds
                left[idx] = nusea[idx]
                for jq in range(nusea[idx]):
                    rem[pbase[idx] + jq] = xfer
                ah_t = _grow1(ah_t, ahn + 1)
                ah_i = _grow1(ah_i, ahn + 1)
                ahn = _tpush(ah_t, ah_i, ahn, ds, idx)
            else:
                ck = clk[e]
                st = eng_free[e]
                b = eng_last[e]
                if ready > st:
                    st = ready
                    b = rb
                if gate > st:
                    st = gate
                    b = gb
                cyc = cycles[idx]
                if pre[idx] != 0.0 and e == 0:
                    st, b, pe_has, pe_b, pe_lo, pe_hi, pe_prev_start, pe_load_free = pe_load(
                        e, st, b, rb, ready_s, pre[idx], ck, r0, r1, op_b, op_lo, op_hi, eng_last, pe_has, pe_b,
                        pe_lo, pe_hi, pe_prev_start, pe_load_free)
                nacc = 0
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
                kq = _grow1(kq, kqn + 1)
                kq[kqn] = idx
                kqn += 1
            placed[idx] = True
            wl = _grow1(wl, wln + 2)
            if l >= 0:
                lane_head[l] = lane_next[idx]
                if lane_next[idx] >= 0:
                    wl[wln] = lane_next[idx]
                    wln += 1
        if nknown == n:
            break
        # -- the DMA engines: the next arrival or the next end of a transfer's part on an engine -----------
        tn = ah_t[0] if ahn > 0 else np.inf
        for q in range(nq):
            k = 0
            mn = np.inf
            if c0n[q] > 0:
                k += 1
                mn = rem[pbase[c0h[q, 0]] + (q - q0a[c0h[q, 0]]) % nq]
            for ci in range(nqc[q]):
                key = q * ncls + qcls[q, ci]
                if fhead[key] < fcnt[key + 1]:
                    i = frow[fhead[key]]
                    if arrived[i]:
                        k += 1
                        r = rem[pbase[i] + (q - q0a[i]) % nq]
                        if r < mn:
                            mn = r
            if k > 0 and T + mn * k < tn:
                tn = T + mn * k
        if tn == np.inf:
            raise ValueError("trnsim: the event-driven scheduler found nothing to advance to (a row waits for "
                             "itself)")
        if (g_blocked[0] or g_blocked[1]) and lb < tn:
            # releases known and no later than the next event can open the gate now
            lb = tn
            wl = _grow1(wl, wln + 2)
            for kd in range(2):
                if g_blocked[kd] and gate_head[kd] >= 0:
                    wl[wln] = gate_head[kd]
                    wln += 1
            continue
        dt = tn - T
        for q in range(nq):
            k = 0
            if c0n[q] > 0:
                k += 1
            for ci in range(nqc[q]):
                key = q * ncls + qcls[q, ci]
                if fhead[key] < fcnt[key + 1] and arrived[frow[fhead[key]]]:
                    k += 1
            if k == 0:
                continue
            share = dt / k
            # the served parts: the earliest transfer of no named queue, each named queue's head
            for ci in range(-1, nqc[q]):
                if ci < 0:
                    if c0n[q] == 0:
                        continue
                    i = c0h[q, 0]
                else:
                    key = q * ncls + qcls[q, ci]
                    if fhead[key] >= fcnt[key + 1]:
                        continue
                    i = frow[fhead[key]]
                    if not arrived[i]:
                        continue
                pi = pbase[i] + (q - q0a[i]) % nq
                if first[i] > T and (dt > 0.0 or rem[pi] <= _EPS * (1.0 + work[i])):
                    first[i] = T
                rem[pi] -= share
                if rem[pi] <= _EPS * (1.0 + work[i]) or T + (rem[pi] + share) * k <= tn * (1.0 + 1e-15):
                    rem[pi] = 0.0
                    if ci < 0:
                        c0n[q] = _ipop(c0h[q], c0n[q])
                        if c0n[q] > 0 and arr_t[c0h[q, 0]] <= T:    # it waited behind this one
                            blk[c0h[q, 0]] = i
                    else:
                        fhead[key] += 1
                        if fhead[key] < fcnt[key + 1] and arrived[frow[fhead[key]]]:
                            blk[frow[fhead[key]]] = i
                    left[i] -= 1
                    if left[i] == 0:
                        dstart[i] = first[i] if first[i] < np.inf else tn
                        end[i] = tn
                        done[i] = tn
                        if blk[i] >= 0 and tn > arr_t[i] + work[i] + 1e-9:
                            bind[i] = blk[i]
                        kq = _grow1(kq, kqn + 1)
                        kq[kqn] = i
                        kqn += 1
        T = tn
        lb = T
        while ahn > 0 and ah_t[0] <= T:
            i = ah_i[0]
            ahn = _tpop(ah_t, ah_i, ahn)
            arrived[i] = True
            if cls[i] == 0:
                for jq in range(nusea[i]):
                    q = (q0a[i] + jq) % nq
                    c0n[q] = _ipush(c0h[q], c0n[q], i)

    si[0] = n
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
            live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b, lt_kind, lt_size, lt_t0, lt_t1, found, newb, si, sf)
