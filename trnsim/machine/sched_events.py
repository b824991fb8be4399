"""The scheduler's loop, the one timing model of trnsim: the engines, the DMA engines and their queues,
descriptor generation, semaphores (dependencies), barriers and the SBUF/PSUM capacity gate of one core advanced
together in simulated time, event by event.  The model is described in ``scheduler``'s docstring.

The record is taken in two steps:

1. In program order (``sched_state.new_state``), each instruction's dependencies (the rows whose result or end it
   waits for), its new on-chip buffers and the access trackers: nothing here depends on time.
2. In simulated time (``run``): an instruction is placed (its start, and for a transfer its arrival at the DMA
   engines) once every row it waits for is timed, it is the next of its engine's instructions (engines run their
   programs in order; a ``swdge`` transfer's descriptors are the GpSimd Engine's), a barrier is the next barrier
   of the record, and its new buffers have passed the capacity gate.  The gate takes each memory's new buffers in
   program order (a new buffer waits for enough buffers whose last access comes before it to be released, the
   earliest released first), whether or not their instructions can start yet.  The DMA engines serve the
   transfers that have arrived as a fluid: on NeuronCore-v2/v3 with the round robin (``rr``, ``dma_share``) each
   engine shares its time equally among its classes with a transfer ready (a named queue serves its transfers in
   program order, the transfers of no named queue are one class served the earliest in program order first);
   without it (NeuronCore-v4, or ``TRNSIM_DMA_ROUND_ROBIN=0``) an engine serves the earliest in program order of
   the transfers ready on it (a named queue's head only), each at the engine's full rate.  Time advances to the
   next arrival or the next end of a transfer's part on an engine.  A transfer that waited on an engine behind
   another (its queue's previous transfer, an earlier one of its class) names it as its critical-path link
   (``bind``); one only slowed by sharing keeps the row it was issued after.

Time only advances to ``T`` once nothing still unplaced can start before ``T``: every instruction not placed
waits, directly or through others, for a transfer that has not ended (so no sooner than the next end the engines
give), and a new buffer waiting on the gate takes a release that is known and no later than ``T`` or waits for
one that is not known yet.  Each instruction is placed once: no rescheduling, no rounds.

A barrier (``core_barrier``, ``bar[i]`` the number of cores it names) whose completion ``bar_t[i]`` is not known
yet (NaN) is not placed: the loop goes on with what does not wait for it, up to this core's arrival at it (the
barrier's start on its engine), and returns there with its state (``sched_state``); the caller (``scheduler``) runs
it on, with the same state, once every participant has arrived (``bar_t[i]`` their latest arrival).  The barrier
then starts at that completion plus the semaphore latency (the remote semaphore update) when it names other cores.

With a single class of transfers on an engine, serving the earliest in program order first is the gap filling of
a loop in program order (each transfer takes the engine's free time from its arrival on, in the gaps the earlier
ones left): the timelines of the gap filling loop this replaced (the golden timelines of issue 29).

Compiled with numba (``cache=True``, ``sched_jit.jitted``); ``run`` itself is the same loop uncompiled
(``schedule(..., impl="python")``, ``TRNSIM_SCHEDULER=python``, or a short run under ``auto``: ``sched_fast.choose``),
and numba's own ``NUMBA_DISABLE_JIT=1`` runs the compiled build as plain Python, for a debugger; all give identical
timelines (tests/machine/test_sched_fast.py).

Encoding (``sched_fast.encode``): instruction ``i`` has engine code ``eng[i]`` (``dma_code`` for DMA),
``cycles``/``ns``/``pre``/``rows``/``part0``/``nbytes`` and, for DMA, ``dge_m``/``dge_q``/``dge_c`` (DGE mode,
queue number or -1, DGE cost: ``InstrRecord.dge``); its operands are ``ptr[i]:ptr[i+1]``, the first ``nw[i]``
of them written and the rest read (indices into the operand arrays ``op_b`` (dense buffer), ``op_lo``, ``op_hi``,
``op_v`` (interned view)).  Per view: ``v_pitch``/``v_c0``/``v_c1`` (row geometry, pitch -1 if none) and
``v_size`` (elements).  Per buffer: ``b_mem`` (0 HBM, 1 SBUF, 2 PSUM) and ``b_size`` (bytes per partition).
"""

from __future__ import annotations

import numpy as np

from .sched_heaps import _heap_pop, _heap_push, _ipop, _ipush, _tpop, _tpush
from .sched_jit import borrow, njit
from .sched_rules import compute_times, dge_place, dma_xfer, pe_load

__all__ = ["run"]

_EPS = 1e-9        # a transfer's part with less engine time left than this (relative) has ended
_WL_FULL = "trnsim: the event-driven scheduler's worklist passed its bound (sched_state.new_state)"


@njit(cache=True)
def run(eng, dma_code, clk, cycles, ns, pre, nbytes, ptr, nw, op_b, op_lo, op_hi, b_mem, b_size, static, acc, sema,
        fixed, hbm_bytes_per_ns, dge_m, dge_c, nqk, bar, bar_t, rr, state):
    """Run the loop from where ``state`` (``sched_state.new_state``, or the state a previous call returned)
    stands to the end of the record, or to a barrier whose completion ``bar_t`` does not know yet.  ``rr``: the
    DMA engines serve their queues round robin.  Returns ``(state, stop_row, stop_t)``: ``stop_row`` -1 when the
    record is done, else that barrier's row and ``stop_t`` this core's arrival at it (call again with the same
    state once ``bar_t`` has its completion)."""
    n = eng.shape[0]
    # every array without reference counts (sched_jit.borrow: the arguments keep them alive).  No array is
    # assigned inside the loop: an array variable assigned in a loop is reference counted (atomically, for an
    # owned array) at every pass of the loops around it, which was about half of the loop's time
    (eng, clk, cycles, ns, pre, nbytes, ptr, nw, op_b, op_lo, op_hi, b_mem, b_size, dge_m, dge_c, bar, bar_t
     ) = borrow((eng, clk, cycles, ns, pre, nbytes, ptr, nw, op_b, op_lo, op_hi, b_mem, b_size, dge_m, dge_c, bar,
                 bar_t))
    (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u,
     lt_kind, lt_size, lt_t0, lt_t1, eng_free, eng_last, dbs, dbe, dbo, dbn,
     last_use, t0, tdone, rel, bacc, live, capk, partk, ht, hs, hz, hp, hn, pop_t, pop_b,
     pr_ptr, pr_row, pr_end, pr_first, nb_ptr, nb_list, npend, scnt, srow,
     lane, lane_next, lane_head, gate_next, gate_head, hk, bar_next,
     q0a, nusea, cls, pbase, fcnt, frow, fhead, qcls, nqc, c0h, c0n, rem, left, arrived, first, arr_t, blk,
     ur, urn, urp, sh, shn, g_k, g_blocked, gpass, g_t, g_b,
     placed, known, wl, kq, ah_t, ah_i, si, sf) = borrow(state)
    gp = 3                                   # the GpSimd Engine's code (sched_fast._ENG_FIXED)
    ncls = nqk + 1
    dcap = dbs.shape[1]
    nknown = si[0]
    wln = si[1]
    kqn = si[2]
    ahn = si[3]
    bar_head = si[4]
    bar_wait = si[5]
    pe_has = si[6] == 1
    pe_b = si[7]
    pe_lo = si[8]
    pe_hi = si[9]
    seq = si[10]
    nlt = si[11]
    nplaced = si[12]
    nq = si[13]                              # DMA engines modelled (sched_state)
    T = sf[0]
    lb = sf[1]                               # no time still unknown is earlier than this
    bar_arr = sf[2]
    pe_prev_start = sf[3]
    pe_load_free = sf[4]
    stop_row = -1
    stop_t = 0.0
    if bar_wait >= 0 and bar_t[bar_wait] == bar_t[bar_wait]:     # its completion is known now: place it
        if wln + 1 > wl.shape[0]:
            raise ValueError(_WL_FULL)
        wl[wln] = bar_wait
        wln += 1
        bar_wait = -1

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
                            if wln + 1 > wl.shape[0]:
                                raise ValueError(_WL_FULL)
                            wl[wln] = gate_head[kd]
                            wln += 1
                for k in range(scnt[i], scnt[i + 1]):
                    s = srow[k]
                    npend[s] -= 1
                    if npend[s] == 0:
                        if wln + 1 > wl.shape[0]:
                            raise ValueError(_WL_FULL)
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
                    if wln + 1 > wl.shape[0]:
                        raise ValueError(_WL_FULL)
                    wl[wln] = gate_head[kd]
                    wln += 1
            if stop:
                continue
            if npend[idx] > 0:
                continue
            l = lane[idx]
            if l >= 0 and lane_head[l] != idx:
                continue
            if bar[idx] >= 0 and bar_head != idx:
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
                if dge_m[idx] == 2 and (dbn[0] + 2 > dcap or dbn[1] + 2 > dcap):
                    # (cannot happen: new_state sizes them for every hwdge transfer)
                    raise ValueError("trnsim: the event-driven scheduler's DGE intervals passed their bound")
                ds, b = dge_place(idx, dge_m[idx], issue, b, dge_c[idx], gp, clk[gp], eng_free, eng_last, dbs, dbe,
                                  dbo, dbn, dge_s, dge_e, dge_u, fixed)
                xfer, sk, dk = dma_xfer(idx, ns[idx], fixed, r0, r1, w0, w1, op_b, b_mem, nbytes[idx],
                                        hbm_bytes_per_ns, hbm)
                if ds < T - 1e-6 * (1.0 + T):    # (cannot happen: nothing unplaced is earlier than T)
                    raise ValueError("trnsim: the event-driven scheduler placed a transfer before its time")
                start[idx] = issue
                work[idx] = xfer
                srcm[idx] = sk
                dstm[idx] = dk
                bind[idx] = b
                dstart[idx] = ds
                arr_t[idx] = ds
                left[idx] = nusea[idx]
                for jq in range(nusea[idx]):
                    rem[pbase[idx] + jq] = xfer
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
                if bar[idx] >= 0:                      # core_barrier: starts when the last participant arrives
                    jt = bar_t[idx]
                    if jt != jt:                       # not known yet: this core's arrival; placed once known
                        bar_wait = idx
                        bar_arr = st
                        continue
                    if bar[idx] > 1:
                        jt += sema                     # the remote semaphore update reaching the other core
                        if jt > st:
                            st = jt
                            b = -1
                cyc = cycles[idx]
                if pre[idx] != 0.0 and e == 0:
                    st, b, pe_has, pe_b, pe_lo, pe_hi, pe_prev_start, pe_load_free = pe_load(
                        e, st, b, rb, ready_s, pre[idx], ck, r0, r1, op_b, op_lo, op_hi, eng_last, pe_has, pe_b,
                        pe_lo, pe_hi, pe_prev_start, pe_load_free)
                nacc = 0
                for j in range(w0, r1):
                    if b_mem[op_b[j]] != 0:
                        nacc += 1
                fin, d = compute_times(st, cyc, ck, static, acc, nacc)
                work[idx] = fin - st
                start[idx] = st
                dstart[idx] = st
                end[idx] = fin
                done[idx] = d
                eng_free[e] = fin
                eng_last[e] = idx
                bind[idx] = b
                kq[kqn] = idx
                kqn += 1
            placed[idx] = True
            nplaced += 1
            if wln + 3 > wl.shape[0]:
                raise ValueError(_WL_FULL)
            if bar[idx] >= 0:
                bar_head = bar_next[idx]
                if bar_head >= 0:
                    wl[wln] = bar_head
                    wln += 1
            if l >= 0:
                lane_head[l] = lane_next[idx]
                if lane_next[idx] >= 0:
                    wl[wln] = lane_next[idx]
                    wln += 1
        if nknown == n:
            break
        # -- the DMA engines: the next arrival or the next end of a transfer's part on an engine -----------
        # (with the round robin each class ready on an engine takes an equal share of it; without, the earliest
        # row ready takes all of it)
        tn = ah_t[0] if ahn > 0 else np.inf
        for q in range(nq):
            k = 0
            mn = np.inf
            best = n
            if c0n[q] > 0:
                k += 1
                best = c0h[q, 0]
                mn = rem[pbase[best] + (q - q0a[best]) % nq]
            for ci in range(nqc[q]):
                key = q * ncls + qcls[q, ci]
                if fhead[key] < fcnt[key + 1]:
                    i = frow[fhead[key]]
                    if arrived[i]:
                        k += 1
                        r = rem[pbase[i] + (q - q0a[i]) % nq]
                        if rr:
                            if r < mn:
                                mn = r
                        elif i < best:
                            best = i
                            mn = r
            if not rr and k > 0:
                k = 1
            if k > 0 and T + mn * k < tn:
                tn = T + mn * k
        hz_t = tn
        if bar_wait >= 0 and bar_arr < hz_t:
            hz_t = bar_arr           # nothing waiting for the barrier starts before this core's arrival at it
        if (g_blocked[0] or g_blocked[1]) and lb < hz_t:
            # releases known and no later than the next event can open the gate now
            lb = hz_t
            if wln + 2 > wl.shape[0]:
                raise ValueError(_WL_FULL)
            for kd in range(2):
                if g_blocked[kd] and gate_head[kd] >= 0:
                    wl[wln] = gate_head[kd]
                    wln += 1
            continue
        if bar_wait >= 0 and tn > bar_arr:
            stop_row = bar_wait                  # the barrier's completion is needed to go on
            stop_t = bar_arr
            break
        if tn == np.inf:
            raise ValueError("trnsim: the event-driven scheduler found nothing to advance to (a row waits for "
                             "itself)")
        dt = tn - T
        for q in range(nq):
            k = 0
            best = n
            if c0n[q] > 0:
                k += 1
                best = c0h[q, 0]
            for ci in range(nqc[q]):
                key = q * ncls + qcls[q, ci]
                if fhead[key] < fcnt[key + 1] and arrived[frow[fhead[key]]]:
                    k += 1
                    if frow[fhead[key]] < best:
                        best = frow[fhead[key]]
            if k == 0:
                continue
            if not rr:
                k = 1
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
                if not rr and i != best:
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

    si[0] = nknown
    si[1] = wln
    si[2] = kqn
    si[3] = ahn
    si[4] = bar_head
    si[5] = bar_wait
    si[6] = 1 if pe_has else 0
    si[7] = pe_b
    si[8] = pe_lo
    si[9] = pe_hi
    si[10] = seq
    si[11] = nlt
    si[12] = nplaced
    sf[0] = T
    sf[1] = lb
    sf[2] = bar_arr
    sf[3] = pe_prev_start
    sf[4] = pe_load_free
    return state, stop_row, stop_t
