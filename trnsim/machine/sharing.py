"""The chip's HBM bandwidth shared among the transfers in flight (``hbm_share``), over a first schedule of a
launch's cores (``scheduler.schedule``): each round reschedules the cores with the slowed transfers until no
slowdown changes.  (The DMA engines' round robin among their queues is no round here: the loop models it in
simulated time, ``sched_events``.)"""

from __future__ import annotations

from . import hbm_share

__all__ = ["share_rounds"]


def share_rounds(cores, results, cap, reschedule):
    """Each chip's HBM bandwidth among the transfers in flight (``hbm_share``) over a first schedule
    (``results``): each round computes the slowdowns from the last schedule and schedules every core again with
    ``reschedule(ns_overrides)`` (per core: DMA row -> its ns, or None), until none changes or for at most
    ``hbm_share.MAX_ROUNDS`` rounds.  Returns the last ``(columns, counters)`` per core, or None when nothing
    changed."""
    tg = cores[0].target
    groups = {}
    for i, c in enumerate(cores):
        groups.setdefault(id(c.chip), []).append(i)
    # a chip whose launched cores' DMA engines cannot together exceed its HBM peak (each moves at most twice its
    # practical rate, HBM to HBM) needs no sharing: every single-core launch on every generation
    bound = 2 * tg.dma_bytes_per_ns_per_core
    groups = [g for g in groups.values() if len(g) * bound > cap]
    if not groups:
        return None
    fixed = tg.dma_fixed_ns
    base = {}                          # (core, row) -> (unshared work, slowdown applied)
    changed_any = False
    for _ in range(hbm_share.MAX_ROUNDS):
        overrides, changed = _hbm_round(tg, groups, results, base, cap, fixed)
        if not changed:
            break
        changed_any = True
        results = reschedule(overrides)
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
