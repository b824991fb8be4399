"""``trnsim estimate --search``: parallelism x instance count x micro-batch, pruned by memory first, and the
Pareto front of step time against cost (or against instances when no price is known).

How 200 configurations stay within a couple of minutes on a laptop:

1. memory first: the training state per rank (weights, gradients, optimizer; :func:`estimator.state_memory`) is
   known before any layer runs; a configuration that cannot hold it is rejected without running anything;
2. layer shapes once: the layers of a configuration depend only on (TP, EP, micro-batch, sequence / CP); every
   distinct shape of the survivors is run once (:func:`trnsim.cost.step.prepare`), its missing kernel simulations
   simulated once (in this process, or collected and simulated over ``jobs`` processes, longest first);
3. then every configuration is composed from those memoised layer costs and the collectives of its topology,
   in this process (a few milliseconds each).
"""

from __future__ import annotations

import itertools

import math

from .estimator import (INSTANCES, GiB, instance_name, Parallelism, capacity_per_rank, default_global_batch, estimate,
                        is_template, state_memory)
from .models import load_model

__all__ = ["candidates", "search", "pareto"]


def candidates(model, instance, counts=(1,), micro_batches=(1, 2), seq=4096, lnc=None, max_tp=None):
    """Configurations to try: tp over powers of two up to the cores of an instance's chips, pp dividing the
    layers, ep for MoE models; dp fills the rest."""
    from ..collectives import get_topology
    spec = load_model(model)
    out = []
    for count in counts:
        topo = get_topology(INSTANCES[instance_name(instance)]["topology"], nodes=count, lnc=lnc)
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


def _one(model, instance, c, seq, global_batch, lnc, checkpointing, kw):
    out = []
    for ck in checkpointing:
        try:
            e = estimate(model, instance, c["count"], dp=c["dp"], tp=c["tp"], pp=c["pp"], ep=c["ep"],
                         micro_batch=c["micro_batch"], seq=seq, global_batch=global_batch, lnc=lnc,
                         checkpointing=ck, jobs=1, **kw)
        except ValueError as err:
            return [("rejected", (c, str(err)))]
        if e.fits:
            return [("ok", e)]          # checkpointing only when needed to fit
        out = [("rejected", (c, e.notes[-1]))]
    return out


def search_global_batch(instance, counts, micro_batches, lnc=None):
    """The global batch every candidate of a search shares when none is given: :func:`default_global_batch` of
    the least common multiple of the candidates' rank counts (so it does not change between candidates)."""
    from ..collectives import get_topology
    ranks = math.lcm(*[get_topology(INSTANCES[instance_name(instance)]["topology"], nodes=c, lnc=lnc).ranks
                       for c in counts])
    return default_global_batch(ranks, micro_batches)


def _search_any(model, instance, counts, micro_batches, seq, global_batch, lnc, progress, **kw):
    """A model run as its own code: data parallel over every rank, so the choices are the instance count and
    the micro-batch (the one that fits and is fastest)."""
    res, rejected = [], []
    cands = [(c, mb) for c in counts for mb in micro_batches]
    for i, (c, mb) in enumerate(cands):
        cand = dict(count=c, tp=1, pp=1, dp=None, ep=1, micro_batch=mb)
        try:
            e = estimate(model, instance, c, micro_batch=mb, seq=seq, global_batch=global_batch, lnc=lnc, **kw)
        except ValueError as err:
            rejected.append((cand, str(err)))
        else:
            (res.append(e) if e.fits else rejected.append((cand, e.notes[-1])))
        if progress:
            progress(i + 1, len(cands))
    return res, pareto(res), rejected


def _compiled_note(ranked, top, compiled, global_batch):
    """What a compiled search compiled and why not the rest (the estimate's note)."""
    def name(e):
        return f"{e.parallelism.label()}{'' if e.count == 1 else f' x{e.count}'}"
    done = "; ".join(f"{name(e)} (eager {e.step_time_s:.3f} s, compiled {c.step_time_s:.3f} s)"
                     for e, c in zip(top, compiled))
    rest = len(ranked) - len(top)
    why = (f"; the other {rest} not compiled: eagerly {ranked[len(top)].step_time_s:.3f} s ({name(ranked[len(top)])})"
           f" or slower, ranked by that eager step time, not proven slower compiled (no sound lower bound of a "
           f"compiled step taken from the eager breakdown rules them out: benchmarks/speed-estim14.md)") if rest else ""
    return (f"compiled search: all {len(ranked)} configurations that fit estimated eagerly at the global batch "
            f"{global_batch}; the {len(top)} fastest compiled: {done}{why}")


def _layer_shape(e):
    """What a configuration's layer runs depend on besides the model and the sequence (step._key_job)."""
    p = e.parallelism
    return p.tp, p.ep, p.cp, p.micro_batch


def _helper(compiled):
    """A forked helper (:mod:`trnsim.cost.forked`) that compiles the configurations it is sent, or None when
    ``TRNSIM_ESTIMATE_FORK`` and the host do not want one.  Forked once dynamo and the compile backend are imported
    (both processes need them) and before any layer runs."""
    from . import forked
    if not forked.wanted():
        return None
    import torch._dynamo  # noqa: F401
    from ..backend import compile as _backend  # noqa: F401  (registers backend="neuron")
    from ..backend import costs
    costs.load_scheduler()
    return forked.start(lambda jobs: [compiled(**j) for j in jobs])


def search(model, instance, counts=(1,), micro_batches=(1, 2), seq=None, global_batch=None, lnc=None,
           checkpointing=(False, True), progress=None, jobs=None, compile_top=None, fork=False, **kw):
    """Every candidate that fits in memory, estimated; returns ``(feasible, front, rejected)``.  Memory is
    checked first (the training state, then with activations: a configuration that does not fit is retried
    with activation checkpointing, then dropped).  ``jobs``: processes for the kernel simulations (default 1:
    this one).  ``compile_top=k`` with ``compiled=True``: every candidate is estimated eagerly (its layers run
    op by op), and only the ``k`` fastest are compiled and estimated compiled (a layer's ``torch.compile`` costs
    a second or more of CPU per shape); ``feasible`` then holds those ``k`` compiled estimates, each with a note
    naming them and the first one left out.  That the rest are slower compiled is not proven: no lower bound of a
    compiled step taken from the eager estimate's breakdown separates them (fusion can remove any amount of the
    vector/scalar/DMA time, and a fused matmul kernel is not bounded by the eager one; benchmarks/speed-estim14.md
    gives the figures).  ``global_batch`` defaults to :func:`search_global_batch` (one value for every
    candidate).  ``fork``: with ``compile_top`` above 1, a helper process compiles the finalists after the first
    while this one compiles the first (:mod:`trnsim.cost.forked`, when ``TRNSIM_ESTIMATE_FORK`` and the host allow;
    the same figures).  A model run as its own code searches counts and micro-batches only (data parallel).  See
    the module docstring."""
    global_batch = global_batch or search_global_batch(instance, counts, micro_batches, lnc)
    if not is_template(model):
        return _search_any(model, instance, counts, micro_batches, seq, global_batch, lnc, progress, **kw)
    seq = seq or 4096
    if compile_top and kw.get("compiled"):
        def compiled(count, dp, tp, pp, cp, ep, micro_batch, checkpointing):
            return estimate(model, instance, count, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, micro_batch=micro_batch,
                            seq=seq, global_batch=global_batch, lnc=lnc, checkpointing=checkpointing, jobs=jobs,
                            **kw)

        def job(e):
            p = e.parallelism
            return dict(count=e.count, dp=p.dp, tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep, micro_batch=p.micro_batch,
                        checkpointing=p.checkpointing)
        helper = _helper(compiled) if fork and int(compile_top) > 1 else None
        try:
            eager, _, rejected = search(model, instance, counts, micro_batches, seq, global_batch, lnc,
                                        checkpointing, progress, jobs, None, **dict(kw, compiled=False))
            ranked = sorted(eager, key=lambda e: e.step_time_s)
            top = ranked[:int(compile_top)]
            # the helper's job: the finalists whose layers differ from the first's (the same layers would be
            # compiled twice; what else a finalist needs, its optimizer step and composition, is cheap here)
            first = _layer_shape(top[0])
            jobs_out = [job(e) for e in top[1:] if _layer_shape(e) != first]
            if helper is not None and not jobs_out:
                helper.cancel()
                helper = None
            elif helper is not None:
                helper.send(jobs_out)
            res = [compiled(**job(top[0]))]
            if helper is not None:
                helper.collect()        # the finalists' layer costs (a helper that failed: run below)
            res += [compiled(**job(e)) for e in top[1:]]
        finally:
            if helper is not None:
                helper.cancel()
        note = _compiled_note(ranked, top, res, global_batch)
        for c in res:
            c.notes.append(note)
        return res, pareto(res), rejected
    from .step import prepare
    import torch
    spec = load_model(model)
    instance = instance_name(instance)
    cap = capacity_per_rank(instance, lnc)
    cands = candidates(spec, instance, counts, micro_batches, seq, lnc)
    keep, rejected = [], []
    for c in cands:
        par = Parallelism(c["dp"], c["tp"], c["pp"], 1, c["ep"], kw.get("fsdp", True), c["micro_batch"])
        need = sum(state_memory(spec, par).values())
        if need > cap:
            rejected.append((c, f"does not fit: the training state alone needs {need / GiB:.1f} GiB per rank, "
                                f"has {cap / GiB:.1f} GiB"))
        else:
            keep.append(c)
    # every distinct layer shape of the survivors, run once; their kernel simulations spread over the cores
    from ..targets import get_target
    tg = get_target(INSTANCES[instance]["target"])
    common = dict(seq=seq, dtype=torch.bfloat16, target=tg, precision=kw.get("precision", "bf16"),
                  compiled=kw.get("compiled", False))
    shapes = sorted({(c["tp"], c["ep"], c["micro_batch"]) for c in keep})
    reqs = []
    for tp, ep, mb in shapes:
        sp = bool(kw.get("sequence_parallel", True) and tp > 1 and seq % tp == 0)
        reqs += [("layer", spec, dict(kind=k, tp=tp, ep=ep, micro_batch=mb, sp=sp, **common))
                 for k, _ in spec.layer_kinds()]
        reqs.append(("head", spec, dict(tp=tp, micro_batch=mb, sp=sp, **common)))
    prepare(reqs, jobs=jobs)
    res = []
    for i, c in enumerate(keep):
        for kind, v in _one(spec, instance, c, seq, global_batch, lnc, tuple(checkpointing), kw):
            (res if kind == "ok" else rejected).append(v)
        if progress:
            progress(i + 1, len(keep))
    return res, pareto(res), rejected
