"""The state of the scheduler's loop (``sched_events.run``) for one core, and its first step.

``new_state`` takes the record in program order once: each instruction's dependencies (the rows whose result or
end it waits for, ``sched_rules.dep_scan``), its new on-chip buffers and the access trackers (nothing there
depends on time), then builds what the loop in simulated time keeps: the rows waiting for each row, the order
constraints (each engine's program order, the capacity gate's order per memory, the barriers' order), each
transfer's DMA engines and class, and the worklist.  Everything is one tuple of arrays, so that a run stopped at a
barrier goes on from there once the barrier's completion is known (``scheduler``) instead of starting again.

Tuple order (``new_state`` builds it; ``sched_events.run`` unpacks and returns it in the same order):

* per instruction, the results ``start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind,
  dge_s, dge_e, dge_u`` (``sched_fast`` reads them) and the on-chip buffers' lifetimes ``lt_kind, lt_size, lt_t0,
  lt_t1``;
* the engines ``eng_free, eng_last`` and the hardware DGE blocks' busy intervals ``dbs, dbe, dbo, dbn``
  (``sched_intervals``);
* per buffer ``last_use, t0, tdone, rel, bacc`` (last accessing row, first data access, last result, released,
  accesses not yet timed); the capacity gate ``live, capk, partk`` and its release heap ``ht, hs, hz, hp, hn,
  pop_t, pop_b``;
* the waits ``pr_ptr, pr_row, pr_end, pr_first`` (row ``i`` waits for ``pr_row[pr_ptr[i]:pr_ptr[i+1]]``, for its
  end when ``pr_end``; the first ``pr_first[i]`` come from its first read operand), its new buffers ``nb_ptr,
  nb_list``, the rows waiting for each row ``npend, scnt, srow``;
* the order constraints ``lane, lane_next, lane_head`` (engines; a ``swdge`` transfer is the GpSimd Engine's),
  ``gate_next, gate_head, hk`` (per memory, the rows with new buffers of it), ``bar_next`` (barriers);
* the DMA engines ``q0a, nusea, cls, pbase, fcnt, frow, fhead, qcls, nqc, c0h, c0n, rem, left, arrived, first,
  arr_t, blk`` (``sched_events``' docstring);
* the gate's release order ``ur, urn, urp, sh, shn, g_k, g_blocked, gpass, g_t, g_b``;
* the loop's ``placed, known, wl, kq, ah_t, ah_i``;
* the scalars ``si`` (int64: 0 rows timed, 1 worklist size, 2 rows just timed, 3 arrivals pending, 4 next
  barrier row, 5 the barrier row waiting for its completion or -1, 6 pe_has, 7 pe_b, 8 pe_lo, 9 pe_hi, 10 seq, 11
  lifetimes recorded, 12 rows placed, 13 the DMA engines modelled: 1 when every transfer uses all of them) and ``sf`` (float64: 0 simulated time, 1 the time no unknown time is
  earlier than, 2 this core's arrival at the waiting barrier, 3 pe_prev_start, 4 pe_load_free).
"""

from __future__ import annotations

import numpy as np

from .sched_heaps import _grow1
from .sched_jit import borrow, njit
from .sched_rules import dep_scan, scan_room, track

__all__ = ["new_state"]


@njit(cache=True)
def new_state(eng, dma_code, rows, part0, ptr, nw, op_b, op_k, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, v_size,
              b_mem, nq, ppe, dge_m, dge_q, nqk, bar, cap_sbuf, cap_psum, parts_sbuf, parts_psum):
    """The loop's state before its first step for a record of ``len(eng)`` instructions (the arrays of
    ``sched_fast.encode``) on ``nq`` DMA engines of ``ppe`` partitions each and ``nqk`` queue keys.  Dependencies
    are tracked per operand key ``op_k`` with extents ``op_lo``/``op_hi`` and patterns ``op_v`` (the buffer, or
    the alias group of placed tiles sharing bytes: ``deps.alias_groups``); ``op_b`` (the buffer) drives the
    capacity gate."""
    n = eng.shape[0]
    nb = b_mem.shape[0]
    ne = dma_code
    nop = op_b.shape[0]
    gp = 3                                   # the GpSimd Engine's code (sched_fast._ENG_FIXED)
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
    lt_kind = np.empty(nb, np.int64)
    lt_size = np.empty(nb, np.int64)
    lt_t0 = np.empty(nb)
    lt_t1 = np.empty(nb)
    eng_free = np.zeros(ne)
    eng_last = np.full(ne, -1, np.int64)
    # busy intervals of the two hardware DGE blocks: each hwdge transfer adds at most one, so ``run`` never grows
    # them (an array reassigned in its loop costs reference counting on every pass)
    nhw = 0
    for i in range(n):
        if dge_m[i] == 2:
            nhw += 1
    dcap = max(64, nhw + 2)
    dbs = np.zeros((2, dcap))
    dbe = np.zeros((2, dcap))
    dbo = np.zeros((2, dcap), np.int64)
    dbn = np.zeros(2, np.int64)

    op_i = np.empty(nop, np.int64)           # instruction of each operand
    last_use = np.full(nb, -1, np.int64)
    for i in range(n):
        for j in range(ptr[i], ptr[i + 1]):
            op_i[j] = i
            last_use[op_b[j]] = i
    t0 = np.full(nb, np.nan)
    tdone = np.zeros(nb)
    rel = np.zeros(nb, np.bool_)
    bacc = np.zeros(nb, np.int64)            # accesses of each on-chip buffer not yet timed
    live = np.zeros(2, np.int64)             # the capacity gate (kind 0 SBUF, 1 PSUM)
    capk = np.array([cap_sbuf, cap_psum], np.int64)
    partk = np.array([parts_sbuf, parts_psum], np.int64)
    ht = np.empty((2, nb + 1))
    hs = np.empty((2, nb + 1), np.int64)
    hz = np.empty((2, nb + 1), np.int64)
    hp = np.empty((2, nb + 1), np.int64)
    hn = np.zeros(2, np.int64)
    pop_t = np.zeros(2)
    pop_b = np.full(2, -1, np.int64)

    # -- program order: dependencies, new buffers, access trackers -----------------------------------------
    seen = np.zeros(nb, np.bool_)
    nk = nb                                  # tracker keys: the buffers, then the alias groups
    for j in range(nop):
        if op_k[j] >= nk:
            nk = op_k[j] + 1
    wpool = np.empty(max(16, 4 * nk), np.int64)
    rpool = np.empty(max(16, 4 * nk), np.int64)
    woff = np.zeros(nk, np.int64)
    wcnt = np.zeros(nk, np.int64)
    wcap = np.zeros(nk, np.int64)
    wmax = np.zeros(nk, np.int64)
    roff = np.zeros(nk, np.int64)
    rcnt = np.zeros(nk, np.int64)
    rcap = np.zeros(nk, np.int64)
    rmax = np.zeros(nk, np.int64)
    wused = 0
    rused = 0
    found = np.empty(64, np.int64)
    newb = np.empty(64, np.int64)
    pr_ptr = np.zeros(n + 1, np.int64)
    pr_row = np.empty(max(16, 2 * n), np.int64)
    pr_end = np.empty(max(16, 2 * n), np.bool_)      # waits for the row's end (same engine, after it) not result
    pr_first = np.zeros(n, np.int64)                 # entries found for the first read operand
    nb_ptr = np.zeros(n + 1, np.int64)
    nb_list = np.empty(max(1, nb), np.int64)
    npr = 0
    nnb = 0
    idx = 0
    while True:                 # the rows in program order (_order_pass), growing what it asks for room in
        arrays = (eng, ptr, nw, op_b, op_k, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, v_size, b_mem, seen, op_i, wpool,
                  woff, wcnt, wcap, wmax, rpool, roff, rcnt, rcap, rmax, found, newb, pr_row, pr_end, pr_first,
                  ndeps, deps, pr_ptr, nb_list, nb_ptr, bacc)
        idx, npr, nnb, wused, rused, what, need = _order_pass(idx, npr, nnb, wused, rused, arrays)
        if what == 0:
            break
        if what == 1:
            found = np.empty(need, np.int64)
        elif what == 2:
            newb = np.empty(need, np.int64)
        elif what == 3:
            pr_row = _grow1(pr_row, need)
            pr_end = _grow1(pr_end, need)
        elif what == 4:
            wpool = _grow1(wpool, need)
        else:
            rpool = _grow1(rpool, need)

    # -- the order constraints and the DMA engines' classes --------------------------------------------
    nlane = dma_code + 1
    lane = np.full(n, -1, np.int64)          # engine rows: their engine; swdge transfers: the GpSimd Engine
    lane_next = np.full(n, -1, np.int64)
    lane_head = np.full(nlane, -1, np.int64)
    lane_last = np.full(nlane, -1, np.int64)
    gate_next = np.full((2, n), -1, np.int64)    # per kind (SBUF, PSUM): the rows with new buffers of it
    gate_head = np.full(2, -1, np.int64)
    gate_last = np.full(2, -1, np.int64)
    bar_next = np.full(n, -1, np.int64)          # the barriers, in program order
    bar_head = -1
    bar_last = -1
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
        if bar[i] >= 0:
            if bar_last >= 0:
                bar_next[bar_last] = i
            else:
                bar_head = i
            bar_last = i
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
            queue[i] = q0a[i]
            nqs[i] = nuse
            cls[i] = dge_q[i] + 1 if dge_q[i] >= 0 else 0
            pbase[i + 1] = pbase[i] + nuse
    # every transfer on every DMA engine (the common case: 128 partitions): the engines serve the same parts in
    # the same order, so one stands for all (the same timeline, a sixteenth of the work)
    nqf = nq
    full = True
    for i in range(n):
        if eng[i] == dma_code and nusea[i] != nq:
            full = False
            break
    if full:
        nqf = 1
        for i in range(n):
            pbase[i + 1] = pbase[i]
            if eng[i] == dma_code:
                q0a[i] = 0
                nusea[i] = 1
                pbase[i + 1] = pbase[i] + 1
    nq = nqf
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
    sh = np.empty((2, max(1, nb)), np.int64)     # released buffers not yet in the gate's heap, by last access row
    shn = np.zeros(2, np.int64)
    g_k = np.zeros(2, np.int64)                  # per kind: new buffers of its head row passed so far
    g_blocked = np.zeros(2, np.bool_)            # per kind: its head waits for a release
    gpass = np.zeros((n, 2), np.bool_)
    g_t = np.zeros(n)                            # each row's gate so far and the row it waited for
    g_b = np.full(n, -1, np.int64)

    placed = np.zeros(n, np.bool_)
    known = np.zeros(n, np.bool_)
    # rows to try to place (a stack).  ``run`` never grows it (an array reassigned in its loop costs reference
    # counting on every pass).  Over a whole record at most these are pushed: every row at the start (n), each
    # row once when its last wait is timed (n), at each of its two kinds' gate passes (2n) and at its placement
    # (the next of its engine, the next barrier: 2n), each buffer at its release (nb); besides, only while it is
    # empty: the blocked gates' heads when the time bound moves (2) and a barrier whose completion is now known
    # (1).  Only reserved memory (np.empty): the pages it never reaches are never touched.
    wl = np.empty(6 * n + nb + 16, np.int64)
    for i in range(n):
        wl[i] = n - 1 - i
    # rows just timed, and arrivals not yet at the engines (time, row): each row is timed once and each transfer
    # arrives once, so n entries always suffice (``run`` never grows them: an array reassigned in its loop costs
    # reference counting on every pass)
    kq = np.empty(max(16, n), np.int64)
    ah_t = np.empty(max(1, n))
    ah_i = np.empty(max(1, n), np.int64)
    si = np.zeros(14, np.int64)
    si[1] = n
    si[4] = bar_head
    si[5] = -1
    si[7] = -1
    si[8] = -1
    si[9] = -1
    si[13] = nqf
    sf = np.zeros(5)
    return (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u,
            lt_kind, lt_size, lt_t0, lt_t1, eng_free, eng_last, dbs, dbe, dbo, dbn,
            last_use, t0, tdone, rel, bacc, live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b,
            pr_ptr, pr_row, pr_end, pr_first, nb_ptr, nb_list, npend, scnt, srow,
            lane, lane_next, lane_head, gate_next, gate_head, hk, bar_next,
            q0a, nusea, cls, pbase, fcnt, frow, fhead, qcls, nqc, c0h, c0n, rem, left, arrived, first, arr_t, blk,
            ur, urn, urp, sh, shn, g_k, g_blocked, gpass, g_t, g_b,
            placed, known, wl, kq, ah_t, ah_i, si, sf)


@njit(cache=True)
def _order_pass(i0, npr, nnb, wused, rused, arrays):
    """``new_state``'s pass over the rows in program order from row ``i0``: each row's dependencies
    (``dep_scan``), new on-chip buffers and accesses into the trackers (``track``), to the end of the record or to
    the first row that needs more room than an array of ``arrays`` has (nothing of that row done yet).  Returns
    ``(next row, npr, nnb, wused, rused, what, need)``: ``what`` 0 at the end, else the array to make at least
    ``need`` long (1 ``found``, 2 ``newb``, 3 ``pr_row`` and ``pr_end``, 4 ``wpool``, 5 ``rpool``).  Every array
    is borrowed (``sched_jit.borrow``: ``arrays`` keeps them alive), none is grown here, none is returned."""
    (eng, ptr, nw, op_b, op_k, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, v_size, b_mem, seen, op_i, wpool, woff, wcnt,
     wcap, wmax, rpool, roff, rcnt, rcap, rmax, found, newb, pr_row, pr_end, pr_first, ndeps, deps, pr_ptr, nb_list,
     nb_ptr, bacc) = borrow(arrays)
    n = eng.shape[0]
    wtr = (wpool, woff, wcnt, wmax)
    rtr = (rpool, roff, rcnt, rmax)
    for idx in range(i0, n):
        e = eng[idx]
        w0 = ptr[idx]
        w1 = w0 + nw[idx]
        r0 = w1
        r1 = ptr[idx + 1]
        nops = r1 - r0 + w1 - w0
        mx, tot = scan_room(w0, r1, op_k, wcnt, rcnt)
        if found.size < mx:
            return idx, npr, nnb, wused, rused, 1, 2 * mx
        if newb.size < nops:
            return idx, npr, nnb, wused, rused, 2, nops
        if npr + tot > pr_row.shape[0]:
            return idx, npr, nnb, wused, rused, 3, npr + tot
        # room for the trackers' segments this row may move to the pools' ends (``_reserve``: a segment full
        # moves at twice its capacity, at least 4; bounded as if every operand of the row were on that buffer)
        needw = 0
        for j in range(w0, w1):
            needw += 4 * (wcap[op_k[j]] + nops) + 4
        if wused + needw > wpool.shape[0]:
            return idx, npr, nnb, wused, rused, 4, wused + needw
        needr = 0
        for j in range(r0, r1):
            needr += 4 * (rcap[op_k[j]] + nops) + 4
        if rused + needr > rpool.shape[0]:
            return idx, npr, nnb, wused, rused, 5, rused + needr
        npr, nfirst, nd, nnew = dep_scan(
            idx, e, w0, w1, r0, r1, op_b, op_k, op_lo, op_hi, op_v, v_pitch, v_c0, v_c1, b_mem, seen,
            wtr, rtr, op_i, eng, deps, found, newb, pr_row, pr_end, npr)
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
        wp, wused, rp, rused = track(e, w0, w1, r0, r1, op_k, op_lo, op_hi, op_v, v_size, eng, op_i, wpool, wused,
                                     woff, wcnt, wcap, wmax, rpool, rused, roff, rcnt, rcap, rmax)
        if wp.shape[0] != wpool.shape[0] or rp.shape[0] != rpool.shape[0]:
            raise AssertionError("sched_state._order_pass: a tracker pool grew in the pass (its room is checked)")
    return n, npr, nnb, wused, rused, 0, 0
