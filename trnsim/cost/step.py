"""One decoder layer's forward and backward on the shape-only ``neuron`` device: simulated time by engine class,
device launches, fallbacks, and the bytes autograd saves for backward (the layer's activation memory).

Each (layer kind, shard shapes, micro-batch, sequence, dtype, target) is run once and memoised: a 61-layer model
costs two layer runs (dense and MoE), not 61, and the layer-cost cache (:mod:`.layer_cache`) keeps the result for
later processes, so a layer compiled once is not compiled again by the next estimate.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from . import layer_cache

__all__ = ["LayerCost", "layer_cost", "head_cost", "classify"]

_TENSOR_ENGINE_OPS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product", "convolution", "_grouped_mm",
                      "linear", "sliding_window_attention", "trnsim_attn::sliding_window_attention")


@dataclasses.dataclass(frozen=True)
class LayerCost:
    fwd_ns: float
    bwd_ns: float
    tensor_ns: float          # matmul-family ops (Tensor Engine kernels), forward + backward
    other_ns: float           # every other native op (Vector/Scalar/GpSimd kernels and DMA-bound copies)
    fallback_ns: float        # ops that ran on the CPU, with their host transfers
    launch_ns: float          # the eager per-op (or compiled per-graph) launch cost included in the above
    launches: int
    saved_bytes: int          # what autograd keeps from forward to backward (activations)
    fallbacks: tuple          # aten ops that fell back
    graphs: int = 0           # compiled: graphs compiled for this layer (forward, backward)
    graph_ops: int = 0        # compiled: aten ops in them (what the compile-time model prices)
    flops: float = 0.0        # matmul-family flops of the run, forward + backward (model flops when nothing recomputes)
    comm_fwd_ns: float = 0.0  # compiled: the exposed time of the collectives inside the forward graphs (in fwd_ns)
    comm_bwd_ns: float = 0.0  # ... and inside the backward graphs (in bwd_ns); neither is in tensor_ns/other_ns

    def scaled(self, k):
        return dataclasses.replace(self, fwd_ns=self.fwd_ns * k, bwd_ns=self.bwd_ns * k,
                                   tensor_ns=self.tensor_ns * k, other_ns=self.other_ns * k,
                                   fallback_ns=self.fallback_ns * k, launch_ns=self.launch_ns * k,
                                   launches=int(self.launches * k), flops=self.flops * k,
                                   comm_fwd_ns=self.comm_fwd_ns * k, comm_bwd_ns=self.comm_bwd_ns * k)


def classify(row):
    """"tensor", "fallback", "comm" or "other" for a profile row (a compiled graph's fused kernel is "tensor" when
    its group holds a matmul-family op; "comm": the exposed time of a collective inside a compiled graph,
    ``backend/compile/collective.py``)."""
    if row.kind == "fallback":
        return "fallback"
    op = row.op.replace("aten::", "")
    if op.startswith("fused::collective:"):
        return "comm"
    if op.startswith("fused::"):
        ops = op[len("fused::"):].split("+")
        return "tensor" if any(o.startswith(p) for o in ops for p in _TENSOR_ENGINE_OPS) else "other"
    if any(op.startswith(p) for p in _TENSOR_ENGINE_OPS):
        return "tensor"
    return "other"


_MEMO = {}
_FP8_OPS = ("aten::mm", "aten::addmm", "aten::bmm")


def fp8_matmul_ns(target, m, k, n, batch=1):
    """(matmul ns, cast ns) of one [m, k] x [k, n] product (``batch`` of them) with fp8 operands in the Tensor
    Engine's double-row mode: two rows of the contraction per PE row in the bf16 time (docs/hardware.md: "Tensor FP8
    158 TFLOPS (double-row: K=256 per instruction in the BF16 time)", trn2 and later) and one byte per element.
    Both together make it the same work as the bf16 kernel on a contraction of k/2 (instructions and bytes), so
    it is charged as the simulated bf16 kernel of [m, k/2] x [k/2, n].  The two operands are cast to fp8 by the
    Vector Engine first: charged as elementwise copies of them (bf16 in, an upper bound on fp8 out)."""
    from ..backend import costs
    mm = costs.matmul_cost(target, m, max(1, -(-k // 2)), n, "bfloat16", batch)[0]
    cast = costs.elementwise_cost(target, batch * m * k, "bfloat16", "copy")[0] + \
        costs.elementwise_cost(target, batch * k * n, "bfloat16", "copy")[0]
    return mm, cast


def fp32_matmul_ns(target, m, k, n, batch=1):
    """(matmul ns, cast ns) of an fp32 [m, k] x [k, n] product (``batch`` of them) as neuronx-cc compiles it: the
    one rule the compile backend prices its fp32 matmul kernels with, ``costs.auto_cast_matmul_cost`` (by default,
    ``--auto-cast none``, the fp32 kernel; with ``--auto-cast matmult`` in ``NEURON_CC_FLAGS`` the operands are cast
    to bf16 by the loading DMAs and multiplied at the bf16 rate with fp32 accumulation).  The casts happen inside the DMAs that load the
    operands, so no separate cast kernel is charged (cast ns 0)."""
    from ..backend import costs
    return costs.auto_cast_matmul_cost(target, m, k, n, "float32", batch)[0], 0.0


def _run(build, inputs, target, loss_fn, precision="bf16", compiled=False, meta=False, comm=None):
    """Run ``loss_fn(module, *inputs)`` forward and backward on the shape-only device; returns a LayerCost.
    ``compiled``: the module runs through ``torch.compile(backend="neuron")`` (the compile backend's fused kernels
    and per-graph launch).  ``precision="fp8"``: every linear/expert matmul of the run (mm, addmm, bmm; attention
    stays bf16) is re-priced as its fp8 kernel (:func:`fp8_matmul_ns`); ``precision="fp32"``: every fp32 matmul
    (mm, addmm, bmm) of an eager run is re-priced as neuronx-cc's auto-cast runs it (:func:`fp32_matmul_ns`; a
    compiled graph's matmul kernels are priced by the same rule when compiled).  ``meta`` (eager runs only): the
    shape-only tensors carry plain meta payloads (``shape_only.meta_payloads``: the same costs, a third of the
    dispatch CPU); the decoder templates use it, a model's own code (which may make real tensors) does not.
    ``comm`` (compiled runs): the pricer of the collectives inside the graphs (``backend.compile.collective``: the
    collectives model on the estimate's topology and tensor-parallel group); their exposed time is in ``fwd_ns``/
    ``bwd_ns`` and ``comm_fwd_ns``/``comm_bwd_ns``."""
    from ..backend.shape_only import meta_payloads
    from ..backend import costs
    _RAN[0] = True
    costs.expect_many()         # a layer run on cold caches simulates many kernels: the compiled scheduler at once
    #                             (when numba's cache holds it: sched_fast.choose)
    pricing = contextlib.nullcontext()
    if compiled and comm is not None:
        from ..backend.compile import collective
        pricing = collective.pricing(comm)
    with meta_payloads(meta and not compiled), pricing:
        return _run_payloads(build, inputs, target, loss_fn, precision, compiled)


_RAN = [False]


def layers_run() -> bool:
    """Whether this process has run a layer (a forward and backward pass; ``trnsim.cost.forked`` forks only before)."""
    return _RAN[0]


def _run_payloads(build, inputs, target, loss_fn, precision, compiled):
    import trnsim
    from ..backend import costs
    from ..backend.device_state import STATE
    from ..backend.shape_only import device_target, materialize_shape_only

    with device_target(target) as tg, torch.device("meta"):
        mod = build()
    materialize_shape_only(mod)
    records0 = 0
    if compiled:
        from ..backend.compile import compile_records
        records0 = len(compile_records())
        torch._dynamo.reset()            # a fresh module of the same code is compiled, not guarded out
        run_mod = torch.compile(mod, backend="neuron")
        from ..backend.compile.patching import guard_latency_unmeasured
        unmeasured = guard_latency_unmeasured()         # a log figure of dynamo's, not part of any cost
    else:
        run_mod, unmeasured = mod, contextlib.nullcontext()
    saved = {}

    def pack(t):
        p = getattr(t, "_p", t)
        saved[(id(p), tuple(p.shape))] = p.numel() * p.element_size()     # one entry per saved tensor
        return t

    launch = costs.launch_ns(tg)
    with device_target(target) as tg, unmeasured, own_clock():
        with trnsim.profile_torch() as prof:
            t0 = STATE.now_ns
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn(run_mod, *inputs())
            t1 = STATE.now_ns
            loss.backward()
            t2 = STATE.now_ns
        parts = {"tensor": 0.0, "other": 0.0, "fallback": 0.0}
        comm = [0.0, 0.0]
        fwd, bwd = t1 - t0, t2 - t1
        fb = set()
        flops = 0.0
        for r in prof.rows:
            c = classify(r)
            d = r.duration_ns
            flops += r.flops if c == "tensor" else 0.0
            want = {"fp8": "bfloat16", "fp32": "float32"}.get(precision)
            if want and r.op in _FP8_OPS and r.dtypes and r.dtypes[-1] == want:
                a, b = r.shapes[-2], r.shapes[-1]
                price = fp8_matmul_ns if precision == "fp8" else fp32_matmul_ns
                mm, cast = price(tg, a[-2], a[-1], b[-1], a[0] if len(a) == 3 else 1)
                new = launch + mm + cast
                parts["other"] += cast
                d_tensor = launch + mm
                delta = new - d
                if r.start_ns < t1:
                    fwd += delta
                else:
                    bwd += delta
                parts[c] += d_tensor
                continue
            if c == "comm":
                comm[r.start_ns >= t1] += d
                continue
            parts[c] += d
            if c == "fallback":
                fb.add(r.op)
    graphs = ops = 0
    if compiled:
        from ..backend.compile import compile_records
        recs = compile_records()[records0:]
        graphs, ops = len(recs), sum(r.n_ops for r in recs)
        n = len([r for r in prof.rows if r.op.startswith("neuron::graph_launch") or
                 (r.kind not in ("fallback", "compiled") and r.duration_ns > 0)])
    else:
        n = len([r for r in prof.rows if r.kind != "fallback" and r.duration_ns > 0])
    return LayerCost(fwd, bwd, parts["tensor"], parts["other"], parts["fallback"], n * launch, n,
                     int(sum(saved.values())), tuple(sorted(fb)), graphs, ops, flops, comm[0], comm[1])


@contextlib.contextmanager
def own_clock():
    """The device clock from zero for one measured run, then moved on by what the run took.  The clock is a
    float, so a run's times (differences of it) would otherwise depend in their last bits on everything the
    process ran before: with its own clock a layer run or an optimizer step gives the same bits whatever ran
    before it (the estimate of one configuration does not depend on which others a search estimated first)."""
    from ..backend.device_state import STATE
    base, STATE.now_ns = STATE.now_ns, 0.0
    try:
        yield
    finally:
        STATE.now_ns = base + STATE.now_ns


def _layer_job(spec, kind, tp, ep, micro_batch, seq, dtype, tg, precision, compiled, sp=False, comm=None):
    from ..backend.shape_only import shape_only_tensor
    from .layers import DecoderLayer
    rope = spec.qk_rope_dim if spec.mla else spec.head_dim

    def build():
        return DecoderLayer(spec, kind, tp=tp, ep=ep, sp=sp).to(dtype)

    def inputs():
        s_in = seq // tp if (sp and tp > 1) else seq        # sequence parallel: the rank's part of the sequence
        x = shape_only_tensor((micro_batch, s_in, spec.hidden), dtype, requires_grad=True)
        cos = shape_only_tensor((seq, rope), dtype)
        return x, cos, cos

    return build, inputs, tg, lambda m, x, c, s: m(x, c, s).float().sum(), precision, compiled, _meta(), comm


def _head_job(spec, tp, micro_batch, seq, dtype, tg, precision, compiled, sp=False, comm=None):
    from ..backend.shape_only import shape_only_tensor
    from .layers import LMHead

    def build():
        return LMHead(spec, tp, sp=sp).to(dtype)

    def inputs():
        s_in = seq // tp if (sp and tp > 1) else seq
        x = shape_only_tensor((micro_batch, s_in, spec.hidden), dtype, requires_grad=True)
        labels = shape_only_tensor((micro_batch, seq), torch.int64)
        return x, labels

    return build, inputs, tg, lambda m, x, lab: m(x, lab), precision, compiled, _meta(), comm


def _meta():
    """Whether the template layers' eager runs use meta payloads (``TRNSIM_SHAPE_ONLY_META``, default on)."""
    from .. import config
    return bool(config.shape_only_meta)


def _key_job(what, spec, *, kind="dense", tp=1, ep=1, micro_batch=1, seq=2048, dtype=torch.bfloat16,
             target="trn2", precision="bf16", compiled=False, sp=False, comm=None):
    from ..targets import get_target
    tg = get_target(target)
    sp = bool(sp and tp > 1)
    # the collectives are priced inside compiled sequence-parallel graphs only (eagerly the estimator times them)
    comm = comm if (compiled and sp) else None
    ck = (comm.key,) if comm is not None else ()
    if sp and seq % tp:
        raise ValueError(f"sequence parallelism: the sequence ({seq} per rank) is not divisible by tp={tp}")
    if what == "layer":
        return (("layer", spec, kind, tp, ep, micro_batch, seq, dtype, tg.name, precision, compiled, sp) + ck,
                lambda: _layer_job(spec, kind, tp, ep, micro_batch, seq, dtype, tg, precision, compiled, sp, comm))
    return (("head", spec, tp, micro_batch, seq, dtype, tg.name, precision, compiled, sp) + ck,
            lambda: _head_job(spec, tp, micro_batch, seq, dtype, tg, precision, compiled, sp, comm))


def layer_cost(spec, kind, *, tp=1, ep=1, micro_batch=1, seq=2048, dtype=torch.bfloat16, target="trn2",
               precision="bf16", compiled=False, sp=False, comm=None):
    """Forward + backward of one ``kind`` ("dense"/"moe") decoder layer of ``spec`` on one rank (``sp``:
    sequence parallel, the layer's input is the rank's 1/tp of the sequence; ``comm``: the pricer of the
    collectives inside compiled sequence-parallel graphs, see :func:`_run`)."""
    key, job = _key_job("layer", spec, kind=kind, tp=tp, ep=ep, micro_batch=micro_batch, seq=seq, dtype=dtype,
                        target=target, precision=precision, compiled=compiled, sp=sp, comm=comm)
    return _cached(key, job)


def _cached(key, job):
    """The memoised cost of ``key``: this process's, the layer-cost cache's (an earlier process ran it), or a
    run now (then kept in both)."""
    r = _MEMO.get(key)
    if r is None:
        r = layer_cache.lookup(key)
        if r is None:
            r = _run(*job())
            layer_cache.store(key, r)
        _MEMO[key] = r
    return r


def head_cost(spec, *, tp=1, micro_batch=1, seq=2048, dtype=torch.bfloat16, target="trn2", precision="bf16",
              compiled=False, sp=False, comm=None):
    """The final norm, vocabulary projection and cross-entropy (forward + backward), plus the embedding lookup."""
    key, job = _key_job("head", spec, tp=tp, micro_batch=micro_batch, seq=seq, dtype=dtype, target=target,
                        precision=precision, compiled=compiled, sp=sp, comm=comm)
    return _cached(key, job)


# -- many layer shapes at once: collect their missing kernel simulations, run those in parallel -------------
def prepare(requests, jobs=None):
    """Make ``layer_cost``/``head_cost`` of every request cheap: ``requests`` are ``("layer", spec, kwargs)`` or
    ``("head", spec, kwargs)``.  With ``jobs`` 1 (the default) each not yet memoised is run once, simulating
    its missing kernels as it meets them.  With more, each is run once with its kernel simulations deferred
    (charged zero; the result is kept when none was missing) to learn which op costs are missing; those are
    simulated over ``jobs`` worker processes, longest first, and memoised (and cached on disk), and a layer run
    afterwards finds every op cost memoised.  Returns the number of kernel costs simulated in parallel."""
    from ..backend import costs
    jobs = _jobs(jobs)
    pending = {}
    for what, spec, kw in requests:
        key, job = _key_job(what, spec, **kw)
        if key in _MEMO or key in _SEEN:
            continue
        cached = layer_cache.lookup(key)
        if cached is not None:
            _MEMO[key] = cached     # run by an earlier process: no layer run at all
            continue
        if kw.get("compiled"):
            continue            # a compiled graph's plan keeps its kernel costs (and is cached): never deferred
        if jobs <= 1:
            _cached(key, job)       # one process: simulate what is missing as the run meets it (no second run)
            continue
        _SEEN.add(key)
        mine = {}
        with costs.deferring(mine):
            r = _run(*job())
        if not mine:
            _MEMO[key] = r          # nothing was missing: this run was the real one (a warm cache: one run)
            layer_cache.store(key, r)
        for k, c in mine.items():
            pending.setdefault(k, c)
    if not pending:
        return 0
    items = sorted(pending.items(), key=lambda kv: -_size(kv[0]))
    for key, value in zip([k for k, _ in items], _compute_all([c for _, c in items], jobs)):
        costs.fill(key, value)
    return len(items)


_SEEN = set()


def _size(key):
    """A rough work measure of a deferred kernel cost (its shape's product) to schedule the longest first."""
    n = 1
    for v in key[2:]:
        if isinstance(v, int) and v > 0:
            n *= v
    return n


_WORK = []


def _compute_one(i):
    return tuple(float(x) for x in _WORK[i]())


def _jobs(jobs):
    """``jobs``, default 1: one process.  Over 2 cores, forked workers cost more CPU than they save (a cold
    compiled Qwen3-32B estimate: 16.3 s of CPU with 2 workers, 13.4 s in one process, before the launches were
    deduplicated): every layer runs twice (deferred, then real), and workers repeat the launches their closures
    share (``costs._sim``'s memo is per process)."""
    return 1 if jobs is None else int(jobs)


def _compute_all(computes, jobs=None):
    """Run the kernel simulations ``computes`` (closures): in this process, or over ``jobs`` forked workers (they
    inherit the closures; each returns three floats)."""
    import os
    jobs = _jobs(jobs)
    if jobs <= 1 or len(computes) < 2 or not hasattr(os, "fork"):
        return [tuple(c()) for c in computes]
    import multiprocessing as mp
    _WORK[:] = computes
    try:
        with mp.get_context("fork").Pool(min(jobs, len(computes))) as pool:
            return pool.map(_compute_one, range(len(computes)), chunksize=1)
    finally:
        _WORK.clear()
