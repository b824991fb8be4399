"""The sharing passes over a first schedule of a launch's cores (``scheduler.schedule``): the chip's HBM bandwidth
among the transfers in flight (``hbm_share``) and each DMA engine's time among its queues (``dma_share``), each
round rescheduling the cores with the shared transfers until nothing changes."""

from __future__ import annotations

import warnings

import numpy as np

from . import dma_share, hbm_share

__all__ = ["share_rounds"]


def share_rounds(cores, results, cap, reschedule, queues=True):
    """The sharing passes over a first schedule (``results``): each chip's HBM bandwidth among the transfers in
    flight (``hbm_share``) and, on NeuronCore-v2/v3, each DMA engine's time among its queues (``dma_share``, round
    robin; not when ``queues`` is false).  Each round computes both from the last schedule and schedules every
    core again with ``reschedule(ns_overrides, dma_overrides)`` (per core: DMA row -> its ns; DMA row -> its data
    start and end after its arrival at the engines), until neither changes (the HBM's slowdowns are recomputed
    in the first ``hbm_share.MAX_ROUNDS`` rounds).  When the round robin has not reached its fixed point within
    ``dma_share.MAX_ROUNDS`` schedules, the first schedule is shared again without it (a warning says so).
    Returns the last ``(columns, counters)`` per core, or None when nothing changed."""
    tg = cores[0].target
    groups = {}
    for i, c in enumerate(cores):
        groups.setdefault(id(c.chip), []).append(i)
    # a chip whose launched cores' DMA engines cannot together exceed its HBM peak (each moves at most twice its
    # practical rate, HBM to HBM) needs no sharing: every single-core launch on every generation
    bound = 2 * tg.dma_bytes_per_ns_per_core
    groups = [g for g in groups.values() if len(g) * bound > cap]
    queued = {}
    if queues and dma_share.applies(tg):
        for i, c in enumerate(cores):
            qc = dma_share.queue_classes(c)
            if qc is not None:
                queued[i] = qc
    if not groups and not queued:
        return None
    first = results
    fixed = tg.dma_fixed_ns
    nq = tg.dma_engines_per_core
    base = {}                          # (core, row) -> (unshared work, slowdown applied)
    overrides = [None] * len(cores)
    moves = [None] * len(cores)        # per core: DMA row -> its data start and end after its arrival
    changed_any = False
    rounds = dma_share.MAX_ROUNDS if queued else hbm_share.MAX_ROUNDS
    for rnd in range(rounds + 1):
        changed = False
        if groups and rnd < hbm_share.MAX_ROUNDS:
            overrides, changed = _hbm_round(tg, groups, results, base, cap, fixed)
        for i, (rows, cls) in queued.items():
            cols = results[i][0]
            g_arr, g_ds, g_end = dma_share.core_share(cols, rows, cls, nq, fixed, tg.semaphore_ns)
            rl = rows.tolist()
            ds = np.array([cols["data_start"][r] for r in rl])
            en = np.array([cols["end"][r] for r in rl])
            if np.allclose(g_end, en, rtol=1e-9, atol=1e-6) and np.allclose(g_ds, ds, rtol=1e-9, atol=1e-6):
                continue
            if rnd == rounds:          # no fixed point: the placement without the round robin
                warnings.warn(f"trnsim: the round robin among DMA queues (core {cores[i].core_id}) did not reach "
                              f"a fixed point in {rounds} rounds; the timeline uses the engines' gap filling "
                              "instead (trnsim/machine/dma_share.py)", RuntimeWarning, stacklevel=3)
                return share_rounds(cores, first, cap, reschedule, queues=False)
            changed = True
            # each transfer's data start and end after its arrival (the next schedule gives its arrival)
            moves[i] = dict(zip(rl, zip((g_ds - g_arr).tolist(), (g_end - g_arr).tolist())))
        if not changed or rnd == rounds:
            break
        changed_any = True
        results = reschedule(overrides, moves)
    return results if changed_any else None


def _hbm_round(tg, groups, results, base, cap, fixed):
    """One round of ``hbm_share`` over the last schedule: ``(per core DMA row -> ns or None, changed)``."""
    overrides = [None] * len(results)
    changed = False
    for g in groups:
        key, st, en, hb, prev, grp, gcap = [], [], [], [], [], [], []
        for gi, i in enumerate(g):
            cols = results[i][0]
            nh = 1.0
            for k, h in enumerate(cols["hbm_bytes"]):
                if h:
                    w, f = base.setdefault((i, k), (cols["work"][k], 1.0))
                    key.append((i, k))
                    st.append(cols["data_start"][k])
                    # in flight from its data start for its own engine time (stretched by the slowdown
                    # applied): not to its end, which may include gaps the core's other transfers filled
                    en.append(cols["data_start"][k] + w * f)
                    hb.append(h)
                    prev.append(f)
                    grp.append(gi)
                    nh = max(nh, h / max(1, cols["nbytes"][k]))
            # the core's own limit: its DMA engines' practical rate, in HBM bytes (twice for HBM to HBM)
            gcap.append(tg.dma_bytes_per_ns_per_core * nh)
        if not key:
            continue
        f_new = hbm_share.slowdowns(st, en, hb, prev, cap, grp, gcap)
        for (i, k), f0, f in zip(key, prev, f_new.tolist()):
            if abs(f - f0) > 1e-9 * f0:
                changed = True
                base[(i, k)] = (base[(i, k)][0], f)
            else:
                f = f0
            if f != 1.0:
                if overrides[i] is None:
                    overrides[i] = {}
                overrides[i][k] = fixed + base[(i, k)][0] * f
    return overrides, changed
