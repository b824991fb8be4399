"""Round robin among the queues of a DMA engine (NeuronCore-v2 and v3), as processor sharing, to a fixed point.

docs/hardware.md, "DMA in detail", quoting dma-overview: "DMA transfers within a queue on the same DMA engine are
executed in order. DMA transfers from different DMA queues are scheduled in a round robin fashion (for
NeuronCore-v2 and v3) or based on the queue QoS configured (for NeuronCore-v4)".  An engine serving its queues
round robin, descriptor by descriptor, is modelled as a fluid (each descriptor small against a transfer):

* each DMA engine serves the *classes* that have a transfer ready, each an equal share of the engine's time
  (generalised processor sharing); a transfer moving alone on the engine moves at its own rate (its ``work``, the
  engine time ``isa/dma_timing.py`` gives it), two of different queues at half of it each, and so on;
* a class is one named queue (``isa/dma_dge.py``: a trigger engine the kernel named and a DGE mode), served in
  program order (a transfer waits on that engine for the queue's previous transfer to end, as the scheduler's
  ``qend`` has it), or the class of transfers whose queue the kernel did not name: trnsim does not know whether
  those are on one queue or several (the compiler's assignment is not documented, ``dma_dge``), so they are served
  among themselves as before (the earliest in program order first, a later one taking the time the earlier ones
  leave: the scheduler's gap filling), and together they take one class's share.  A kernel that names no trigger
  engine therefore has one class and keeps its timeline;
* v4 (trn3): "based on the queue QoS configured", with no QoS figure or default in the documents: not modelled,
  trn3 keeps the scheduler's placement (gap filling with in-queue order).

The scheduler places the transfers in program order, so a transfer's end is fixed when it is placed; under round
robin a later transfer of another queue arriving while it moves slows it.  As ``hbm_share`` does for the HBM, the
cores are scheduled and then shared (``sharing.share_rounds``):

* ``core_share`` runs each core's DMA engines event by event in simulated time (``simulate``) from the last
  schedule: each transfer's arrival (its data start before any wait on the engine), engine time and class, and
  the transfer whose end its arrival waited for (``roots``: through the instructions that bound each other's
  start, the ``bind`` column, or the capacity gate); a transfer ending later or sooner than in that schedule moves
  the arrivals that waited for it by as much, in the same pass;
* the cores are scheduled again with each transfer's data start and end taken as its arrival there plus its
  delays in that run (``moves``), so what waits for a slowed transfer moves too, and again, until the schedule is
  its own round robin (its transfers' data starts and ends are what ``simulate`` gives from their own arrivals).
  The propagation makes most schedules converge in 2 to 6 rounds; a long stream whose loads wait on the capacity
  gate can need many more (the gate's opening moves in steps the linear propagation does not foresee): after
  ``MAX_ROUNDS`` schedules the scheduler takes the gap filling instead and warns.

The engines' busy time is the same under both rules (both serve whenever a transfer is ready); only the
individual ends differ.  The placement's own busy intervals stay the gap filling's (they order the placement of
the transfers that are not moved; the moved ones report the shared start and end).
"""

from __future__ import annotations

import heapq

import numpy as np

from .. import config

__all__ = ["MAX_ROUNDS", "applies", "queue_classes", "simulate", "core_share"]

MAX_ROUNDS = 12         # trnsim's choice: schedules of a core until it is its own processor-sharing result
# Off by default (``TRNSIM_DMA_ROUND_ROBIN=1`` turns it on): the rescheduling reaches its fixed point on short
# kernels but not on long streams whose loads wait on the capacity gate or whose stores chain through one HBM
# output (a 2,000-tile load/compute/store stream on two queues: 3,996 transfers off the fixed point after the
# first round, still 1,928 after the twelfth, 0.06 s -> 1.2 s to schedule; 10,000 tiles: 51 s), and those fall
# back to the gap filling.  A model that changes with a kernel's length would make "which kernel is faster"
# answers depend on it, so the default stays the gap filling for every kernel (docs/notes/timing.md#dma, NOTES.md).


def enabled() -> bool:
    return config.dma_round_robin


def set_enabled(on: bool) -> bool:
    """Turn the round robin on or off for this process; returns the previous setting."""
    return config.set("dma_round_robin", bool(on))
_EPS = 1e-9


def applies(target) -> bool:
    """Round robin among a DMA engine's queues: when turned on (:func:`enabled`), on NeuronCore-v2 and v3 (trn1,
    trn2; dma-overview, above)."""
    return config.dma_round_robin and target.nc_version in (2, 3)


def queue_classes(core):
    """``(rows, classes)`` of ``core``'s DMA rows (row numbers and each one's class: 0 for a transfer of no named
    queue, queue number + 1 otherwise), or None when they are of fewer than two classes (nothing to share)."""
    c = getattr(core, "columns", None)
    n = len(core.instructions)
    if c is not None and len(c) == n and len(c.nops) == n:
        rows, dges = c.dma, c.dge
    else:
        rows, dges = [], []
        for r in core.instructions:
            if r.engine == "dma":
                rows.append(r.id)
                dges.append(r.dge)
    if dges.count(None) == len(dges):
        return None
    cls = np.fromiter((0 if d is None or d[1] < 0 else d[1] + 1 for d in dges), np.int64, len(dges))
    if len(cls) == 0 or (cls == cls[0]).all():
        return None
    return np.asarray(rows, np.int64), cls


def simulate(arrive, prev_end, work, cls, groups, root):
    """Processor sharing of a core's DMA engines among the classes that have a transfer ready (see the module
    docstring), event by event in simulated time.  Per transfer, in program order: ``arrive`` (at its engines),
    ``work`` (engine time), ``cls`` (0: no named queue; else its queue's class), ``root`` (the transfer whose end
    its arrival waits for, through the instructions between them, or -1) and ``prev_end`` (its end in the schedule
    ``arrive`` comes from): a transfer with a root arrives at ``arrive + (root's end here - root's prev_end)``, so
    that a transfer slowed by sharing delays what waits for it in the same pass.  ``groups``: the transfers served
    by each group of DMA engines that serve the same transfers (one engine of a group stands for all).  Returns
    ``(arrival, data start, end)`` per transfer: its arrival here, its first service on any engine, its last
    part's end."""
    m = len(arrive)
    arrive = [float(x) for x in arrive]
    prev_end = [float(x) for x in prev_end]
    work = [float(x) for x in work]
    cls = [int(x) for x in cls]
    ds = [float("inf")] * m
    end = [float("nan")] * m
    left = [0] * m                          # groups that have not finished each transfer
    where = [[] for _ in range(m)]          # (group, index in the group) of each transfer
    ncls = max(cls) + 1 if m else 1
    gs = []
    for g, members in enumerate(groups):
        members = [int(x) for x in members]
        fifo = {}
        for li, i in enumerate(members):
            left[i] += 1
            where[i].append((g, li))
            if cls[i]:
                fifo.setdefault(cls[i], []).append(li)
        # per group: members, named queues (class -> members in program order), their heads, the arrived
        # members of no named queue (a heap by program order), arrived flags, work left, first service
        gs.append((members, sorted(fifo.items()), [0] * (ncls), [], [False] * len(members),
                   [work[i] for i in members], [None] * len(members)))
    ev = []                                 # (arrival time, transfer) of the transfers whose arrival is known
    waiting = [[] for _ in range(m)]
    arr = list(arrive)
    for i in range(m):
        if root[i] < 0:
            ev.append((arrive[i], i))
        else:
            waiting[root[i]].append(i)
    heapq.heapify(ev)
    ndone = 0
    t = ev[0][0] if ev else 0.0
    while ndone < m:
        while ev and ev[0][0] <= t:
            _, i = heapq.heappop(ev)
            for g, li in where[i]:
                grp = gs[g]
                grp[4][li] = True
                if cls[i] == 0:
                    heapq.heappush(grp[3], li)
        best = float("inf")
        active = []
        for g, (members, fifo, head, pool, arrived, rem, first) in enumerate(gs):
            serv = [pool[0]] if pool else []
            for c, q in fifo:
                h = head[c]
                if h < len(q) and arrived[q[h]]:
                    serv.append(q[h])
            k = len(serv)
            if k == 0:
                continue
            jmin = 0
            mn = rem[serv[0]]
            for j in range(1, k):
                if rem[serv[j]] < mn:
                    mn = rem[serv[j]]
                    jmin = j
            dtg = mn * k
            active.append((g, serv, k, jmin, dtg))
            if dtg < best:
                best = dtg
        if not active:
            t = ev[0][0]
            continue
        dt_arr = ev[0][0] - t if ev else float("inf")
        dt = best if best <= dt_arr else dt_arr
        for g, serv, k, _, _ in active:
            rem = gs[g][5]
            first = gs[g][6]
            share = dt / k
            for li in serv:
                if first[li] is None:
                    first[li] = t
                rem[li] -= share
        t = t + dt
        for g, serv, k, jmin, dtg in active:
            members, fifo, head, pool, arrived, rem, first = gs[g]
            if dtg <= dt:
                rem[serv[jmin]] = 0.0
            for li in serv:
                i = members[li]
                if rem[li] > _EPS * max(1.0, work[i]):
                    continue
                rem[li] = 0.0
                if cls[i] == 0:
                    heapq.heappop(pool)         # only the pool's first is served
                else:
                    head[cls[i]] += 1
                if first[li] < ds[i]:
                    ds[i] = first[li]
                left[i] -= 1
                if left[i] == 0:
                    end[i] = t
                    ndone += 1
                    for x in waiting[i]:
                        a = arrive[x] + (t - prev_end[i])
                        arr[x] = a
                        heapq.heappush(ev, (a, x))
    return np.array(arr), np.array(ds), np.array(end)


def arrivals(cols, rows, fixed):
    """Each DMA row's arrival at its engines in a schedule's columns: its descriptors ready (the end of its
    descriptor generation, else its issue) plus the fixed semaphore-to-start cost (the scheduler's ``ds``)."""
    start = cols["start"]
    ge = {r: e for r, _, _, _, e in cols["dge"]}
    return np.array([(ge[r] if r in ge else start[r]) + fixed for r in rows.tolist()], float)


def roots(cols, rows, sema):
    """For each DMA row of ``rows``: the position in ``rows`` of the transfer whose end its arrival waited for in
    the schedule ``cols`` (the dependency or earlier row whose result was its issue time, then back through the
    instructions that bound each other's start, the ``bind`` column), or -1 (none: it waited for nothing, for
    descriptor generation only, or the chain reached no transfer)."""
    n = len(cols["engine"])
    rl = rows.tolist()
    bind_a = np.asarray(cols["bind"], np.int64)
    nxt = np.empty(n + 1, np.int64)
    nxt[:n] = np.where(bind_a >= 0, bind_a, n)
    nxt[n] = n
    nxt[rows] = rows                        # a chain stops at the first transfer it reaches
    while True:
        nn = nxt[nxt]
        if (nn == nxt).all():
            break
        nxt = nn
    pos = np.full(n + 1, -1, np.int64)
    pos[rows] = np.arange(len(rl))
    eng, done, start, deps, bind = cols["engine"], cols["done"], cols["start"], cols["deps"], cols["bind"]
    out = np.full(len(rl), -1, np.int64)
    when = None
    for j, x in enumerate(rl):
        # the row its issue waited for: a dependency whose result is its issue time, else a row whose result
        # is its issue time (a capacity gate opens at the result of the last access of a buffer it waited for)
        drv = -1
        b = bind[x]
        for p in (b,) + tuple(deps[x]):
            if p >= 0 and (done[p] if eng[p] == "dma" else done[p] + sema) == start[x]:
                drv = p
                break
        if drv < 0 and start[x] > 0.0:
            if when is None:
                when = {}
                for p, d in enumerate(done[:rl[-1]]):
                    when.setdefault(d, p)
            drv = when.get(start[x], -1)
            if drv >= x:                    # only an earlier row (the chains point back: no transfer waits on
                drv = -1                    # itself or a later one in ``simulate``)
        if drv >= 0:
            out[j] = pos[nxt[drv]]
    return out


def core_share(cols, rows, cls, nq, fixed, sema):
    """The DMA transfers ``rows`` of one core's schedule ``cols`` under round robin among each engine's queues
    (``simulate``): ``(arrival, data start, end)`` per row."""
    rl = rows.tolist()
    q0 = np.array([cols["queue"][r] for r in rl], np.int64)
    nuse = np.array([cols["nqueues"][r] for r in rl], np.int64)
    groups = {}
    for q in range(nq):                     # engines serving the same transfers behave alike: one group
        sel = np.flatnonzero((q - q0) % nq < nuse)
        if len(sel):
            groups.setdefault(sel.tobytes(), sel)
    return simulate(arrivals(cols, rows, fixed), [cols["end"][r] for r in rl], [cols["work"][r] for r in rl],
                    cls, list(groups.values()), roots(cols, rows, sema))
