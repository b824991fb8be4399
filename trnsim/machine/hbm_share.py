"""The chip's HBM bandwidth shared over time by the DMA transfers in flight (processor sharing).

Every core of a launch on one chip moves its HBM bytes through the same HBM (docs/hardware.md, "Per chip and
instance": 820 GB/s trn1, 2.9 TB/s trn2, 4.9 TB/s trn3, the chip pages' peak; ``Target.hbm_peak_bytes_per_s``).
The scheduler first places every core's transfers as if each had the HBM to itself (a transfer moves at the rate
its descriptors and DMA engines allow, ``isa/dma_timing.py``, never above the chip's peak).  Then this module
shares the bandwidth among the transfers that overlap in simulated time, across the DMA queues of one core and
across the cores (programs) of the launch:

* each transfer asks for its own rate (its HBM bytes over its DMA engines' busy time for it, before any
  slowdown) and is in flight from its data start for that time (stretched by the slowdown an earlier round
  applied; not to its end, which may include gaps that the core's other transfers filled);
* a fluid processor-sharing model over the in-flight set hands out the chip's bandwidth: when the rates asked
  sum to more than the peak, each transfer gets the peak in proportion to its rate (HBM serves the DMA engines
  moving data in turn, each engine an equal share: trnsim's assumption, no document states the arbitration);
  a transfer alone, or a set whose rates sum to at most the peak, gets its full rate.  A core's transfers that
  overlap in time share its own DMA engines first (their rates are scaled to the engines' practical rate);
* each slowed transfer's engine time is stretched by its slowdown (completion under sharing over completion
  alone), and the cores are scheduled again with the stretched transfers, so what waits for them moves too.
  This repeats until no slowdown changes (at most ``MAX_ROUNDS`` rounds; a transfer starting later in a new
  round changes which transfers overlap).

Deterministic: the in-flight set is processed in (start, core, row) order.  When the rates of everything in flight
never sum to more than the peak (every single-core launch: one core's 16 DMA engines move at most 2 x 16 x the
practical rate, 544 / 736 / 1,056 GB/s for HBM-to-HBM on trn1 / trn2 / trn3, below 820 / 2,900 / 4,900 GB/s),
nothing changes and the first placement is the timeline.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_ROUNDS", "demand_exceeds", "share", "slowdowns"]

MAX_ROUNDS = 4          # trnsim's choice: rounds of reschedule-and-share (see the module docstring)
_EPS = 1e-9


def demand_exceeds(starts, ends, rates, capacity) -> bool:
    """Whether the rates of the transfers in flight ever sum to more than ``capacity`` (a sweep over the
    transfers' ``[start, end)`` intervals)."""
    if len(starts) == 0:
        return False
    s = np.asarray(starts, float)
    e = np.asarray(ends, float)
    r = np.asarray(rates, float)
    t = np.concatenate((s, e))
    d = np.concatenate((r, -r))
    order = np.lexsort((d, t))          # at equal times the ends (negative) come first
    run = np.cumsum(d[order])
    return bool(run.max() > capacity * (1.0 + _EPS))


def share(starts, nbytes, rates, capacity, group=None, group_cap=None):
    """Completion times of transfers starting at ``starts`` (ns) moving ``nbytes`` at up to ``rates`` (bytes/ns)
    each, sharing ``capacity`` bytes/ns among those in flight in proportion to their rates (fluid processor
    sharing with each DMA engine's stream an equal client).
    ``group``/``group_cap``: each transfer's core and each core's own limit (its DMA engines): the rates of one
    core's transfers in flight are first scaled down together to that limit (an engine interleaves the
    descriptors of its queues, so a core's transfers overlapping in time share its engines)."""
    n = len(starts)
    s = np.asarray(starts, float)
    rem = np.asarray(nbytes, float).copy()
    r = np.minimum(np.asarray(rates, float), capacity)
    grp = np.zeros(n, np.int64) if group is None else np.asarray(group, np.int64)
    gcap = None if group_cap is None else np.asarray(group_cap, float)
    order = np.argsort(s, kind="stable")
    fin = np.full(n, np.nan)
    active = []
    pos = 0
    t = s[order[0]] if n else 0.0
    while pos < n or active:
        while pos < n and s[order[pos]] <= t:
            active.append(int(order[pos]))
            pos += 1
        if not active:
            t = s[order[pos]]
            continue
        want = r[active]
        if gcap is not None:
            g = grp[active]
            tot = np.bincount(g, weights=want, minlength=len(gcap))
            scale = np.where(tot > gcap, gcap / np.where(tot > 0, tot, 1.0), 1.0)
            want = want * scale[g]
        # the peak is served in proportion to what is asked (each DMA engine moving data gets an equal turn)
        tot = want.sum()
        alloc = want if tot <= capacity else want * (capacity / tot)
        rem_a = rem[active]
        tleft = rem_a / alloc
        jmin = int(np.argmin(tleft))
        dt_done = float(tleft[jmin])
        dt_arr = s[order[pos]] - t if pos < n else np.inf
        dt = dt_done if dt_done <= dt_arr else dt_arr
        rem_a = rem_a - alloc * dt
        if dt == dt_done:
            rem_a[jmin] = 0.0
        t = t + dt
        keep = []
        for j, i in enumerate(active):
            if rem_a[j] <= _EPS * max(1.0, float(nbytes[i])):
                fin[i] = t
                rem[i] = 0.0
            else:
                rem[i] = rem_a[j]
                keep.append(i)
        active = keep
    return fin


def slowdowns(starts, ends, nbytes, prev, capacity, group=None, group_cap=None):
    """Each transfer's slowdown under sharing (>= 1): its completion under processor sharing of ``capacity``
    over its completion with the HBM unlimited (both with each core's own limit, ``share``).  ``starts``/``ends``:
    the transfers' data starts in the last schedule and those plus their engine time there; ``prev``: the
    slowdowns that schedule applied (divided out to recover each transfer's own rate)."""
    s = np.asarray(starts, float)
    dur = (np.asarray(ends, float) - s) / np.asarray(prev, float)
    b = np.asarray(nbytes, float)
    rate = np.where(dur > 0, b / np.where(dur > 0, dur, 1.0), capacity)
    rate = np.minimum(rate, capacity)
    if not demand_exceeds(s, s + b / rate, rate, capacity):
        return np.ones(len(s))
    free = share(s, b, rate, np.inf, group, group_cap)
    fin = share(s, b, rate, capacity, group, group_cap)
    f = (fin - s) / (free - s)
    return np.where(f > 1.0 + 1e-12, f, 1.0)
