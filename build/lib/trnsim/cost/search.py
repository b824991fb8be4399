"""``trnsim estimate --search``: parallelism x instance count x micro-batch, pruned by memory first, and the
Pareto front of step time against cost (or against instances when no price is known)."""

from __future__ import annotations

import itertools

from .estimator import INSTANCES, estimate
from .models import load_model

__all__ = ["candidates", "search", "pareto"]


def _divisors(n, cap=None):
    return [d for d in range(1, n + 1) if n % d == 0 and (cap is None or d <= cap)]


def candidates(model, instance, counts=(1,), micro_batches=(1, 2), seq=4096, lnc=None, max_tp=None):
    """Configurations to try: tp over powers of two up to the cores of an instance's chips, pp dividing the
    layers, ep for MoE models; dp fills the rest."""
    from ..collectives import get_topology
    spec = load_model(model)
    out = []
    for count in counts:
        topo = get_topology(INSTANCES[instance]["topology"], nodes=count, lnc=lnc)
        ranks = topo.ranks
        for tp in [t for t in (1, 2, 4, 8, 16, 32) if ranks % t == 0 and (max_tp is None or t <= max_tp)
                   and spec.heads % t == 0]:
            for pp in [p for p in (1, 2, 4, 8, 16) if (ranks // tp) % p == 0 and spec.layers >= p]:
                dp = ranks // (tp * pp)
                eps = [e for e in (1, 2, 4, 8, 16, 32, 64) if spec.moe and dp % e == 0 and spec.experts % e == 0] \
                    or [1]
                for ep, mb in itertools.product(eps, micro_batches):
                    out.append(dict(count=count, tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=mb))
    return out


def pareto(results):
    """Estimates not beaten on both step time and cost (cost: $/billion tokens, else instances)."""
    def cost(e):
        return e.usd_per_billion_tokens if e.usd_per_hour is not None else e.count
    front = []
    for e in results:
        if not any((o.step_time_s <= e.step_time_s and cost(o) <= cost(e)) and
                   (o.step_time_s < e.step_time_s or cost(o) < cost(e)) for o in results):
            front.append(e)
    return front


def _one(args):
    model, instance, c, seq, global_batch, lnc, checkpointing, kw = args
    out = []
    for ck in checkpointing:
        try:
            e = estimate(model, instance, c["count"], dp=c["dp"], tp=c["tp"], pp=c["pp"], ep=c["ep"],
                         micro_batch=c["micro_batch"], seq=seq, global_batch=global_batch, lnc=lnc,
                         checkpointing=ck, **kw)
        except ValueError as err:
            return [("rejected", (c, str(err)))]
        if e.fits:
            return [("ok", e)]          # checkpointing only when needed to fit
        out = [("rejected", (c, e.notes[-1]))]
    return out


def search(model, instance, counts=(1,), micro_batches=(1, 2), seq=4096, global_batch=None, lnc=None,
           checkpointing=(False, True), progress=None, jobs=1, **kw):
    """Every candidate that fits in memory, estimated; returns ``(feasible, front, rejected)``.  Memory is
    checked first: a configuration that does not fit is retried with activation checkpointing, then dropped.
    ``jobs`` > 1 spreads the candidates over worker processes (grouped by layer shapes, so each worker
    simulates its layers once)."""
    cands = candidates(model, instance, counts, micro_batches, seq, lnc)
    cands.sort(key=lambda c: (c["tp"], c["ep"], c["micro_batch"]))
    work = [(model, instance, c, seq, global_batch, lnc, tuple(checkpointing), kw) for c in cands]
    res, rejected = [], []
    if jobs > 1 and len(work) > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(jobs) as pool:
            outs = pool.imap(_one, work, chunksize=max(1, len(work) // (4 * jobs)))
            for i, o in enumerate(outs):
                for kind, v in o:
                    (res if kind == "ok" else rejected).append(v)
                if progress:
                    progress(i + 1, len(work))
    else:
        for i, w in enumerate(work):
            for kind, v in _one(w):
                (res if kind == "ok" else rejected).append(v)
            if progress:
                progress(i + 1, len(work))
    return res, pareto(res), rejected
