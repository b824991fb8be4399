"""The training step of a model run as its own code (:mod:`trnsim.cost.anymodel`): data parallelism only.

What a user's framework applies to a model it knows nothing about is data parallelism: every rank holds the
whole model (DDP: gradients all-reduced once per step, overlapping the last micro-batch's backward) or a shard of
it (FSDP: each block's parameters all-gathered before its forward and backward, its gradients reduce-scattered,
overlapping the neighbouring block's compute).  Tensor, pipeline, context and expert parallelism need to know how
the layers shard; they apply to the decoder templates only, and asking for them here is an error naming that.

``compiled``: the model runs through ``torch.compile(backend="neuron")`` (:mod:`trnsim.backend.compile`: fused
elementwise chains, attention as one kernel, one launch per graph), the graphs of one and two blocks compiled once
and kept by the layer-cost cache; the compile time before the first step is the compile backend's neuronx-cc model.

A step: ``global_batch / (dp x micro_batch)`` micro-batches of the model's forward and backward (one rank, the
cost of :func:`trnsim.cost.anymodel.model_cost`), the gradients of every micro-batch after the first added into
the accumulated ones (:func:`accumulation_s`), the data-parallel collectives on the instance's topology, and the
optimizer step over the rank's parameters (:func:`trnsim.cost.estimator.optimizer_s`).  Compiled, the accumulation
is fused into the kernels that produce the gradients and the optimizer step is one compiled graph (both as
torch-neuronx traces them into the step's graphs).

Precision (``precision``):

* ``"bf16"``: parameters, activations and gradients bf16; fp32 master weights and two moments in the optimizer;
* ``"autocast"`` (Neuron's "Autocast BF16", torch.autocast): fp32 parameters and gradients, the matmul family in
  bf16 (the device's autocast policy), fp32 moments; stochastic rounding is a hardware rounding mode, no cost;
* ``"fp32"``: fp32 throughout, the matmuls priced as neuronx-cc's auto-cast runs them (by default, ``--auto-cast none``
  since Neuron 2.27, fp32 operands; ``NEURON_CC_FLAGS="--auto-cast matmult"``: bf16 operands cast by the loading
  DMAs, fp32 accumulation;
  ``costs.auto_cast_matmul_cost``, the one rule of the compiled graphs and of :func:`trnsim.cost.step.fp32_matmul_ns`).

Throughput is reported per sample (``samples_per_s``) and per token (a sample's tokens: the sequence for text,
twice it for encoder-decoders, the patches plus the class token for ViT, the factory's ``tokens``); MFU counts the
matmul flops of the run (forward and backward) against the bf16 peak.
"""

from __future__ import annotations

import math

from .anymodel import PRECISIONS, load_any, model_cost

__all__ = ["estimate_any", "accumulation_s", "check_flags", "PARAM_BYTES", "OPTIMIZER_BYTES"]

# bytes per parameter: (weights, gradients); optimizer state: fp32 moments (+ fp32 master weights under bf16)
PARAM_BYTES = {"bf16": (2, 2), "autocast": (4, 4), "fp32": (4, 4)}
OPTIMIZER_BYTES = {"bf16": 12, "autocast": 8, "fp32": 8}


def _limit(what, am):
    return ValueError(f"{what}: {am.name} runs as its own code ({am.source}), and only data parallelism (DP or "
                      f"FSDP) applies to a model whose layers trnsim does not know how to shard; tensor, "
                      f"pipeline, context and expert parallelism need the decoder templates (a built-in or a "
                      f"decoder config of model_type {', '.join(('llama', 'qwen3', 'mixtral', 'deepseek_v3'))}, ...)")


def check_flags(model, tp=1, pp=1, cp=1, ep=1, checkpointing=False, compiled=False, precision="bf16"):
    """The model (an AnyModel) when the options apply to a model run as its own code; a ValueError naming the
    limit otherwise."""
    am = load_any(model)
    for flag, v in (("--tp", tp), ("--pp", pp), ("--cp", cp), ("--ep", ep)):
        if (v or 1) != 1:
            raise _limit(f"{flag} {v}", am)
    if checkpointing:
        raise _limit("activation checkpointing", am)
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} for {am.name}: expected one of {', '.join(PRECISIONS)} "
                         f"(fp8 is modelled for the decoder templates only)")
    return am


def accumulation_s(numel, micro_batches, grad_bytes, target, compiled=False):
    """Seconds one rank spends adding gradients over ``micro_batches`` micro-batches: autograd writes the first
    micro-batch's gradients and adds every later one into them in place (PyTorch's AccumulateGrad: ``grad +=
    new`` once ``.grad`` exists).

    * eager: each add is the device's elementwise kernel over the rank's ``numel`` gradients (reads both, writes
      one), taken as one kernel over all of them plus one launch;
    * ``compiled``: the add is part of the micro-batch's graph (torch-neuronx traces ``grad += new`` into it) and
      fuses into the kernel that produces the new gradient (the weight-gradient matmul's epilogue, the bias
      gradient's reduction): that kernel writes the sum where it wrote the gradient, and reads the accumulated
      gradient once more.  Charged that read: the roofline of ``numel`` adds over ``numel x grad_bytes`` bytes
      (``costs.roofline_ns``: the core's practical DMA rate), no launch."""
    from ..backend import costs
    if micro_batches <= 1 or numel <= 0:
        return 0.0
    if compiled:
        add = costs.roofline_ns(target, float(numel), float(numel) * grad_bytes)
    else:
        dt = "bfloat16" if grad_bytes == 2 else "float32"
        add = costs.launch_ns(target) + costs.elementwise_cost(target, int(numel), dt, "binary", "add")[0]
    return (micro_batches - 1) * add * 1e-9


def estimate_any(model, instance="trn2.48xlarge", count=1, *, dp=None, tp=1, pp=1, cp=1, ep=1, fsdp=True,
                 micro_batch=1, seq=None, global_batch=None, checkpointing=False, precision="bf16",
                 compiled=False, lnc=None, prices=None, jobs=None, sequence_parallel=True, optimizer="adamw"):
    """One training step of ``model`` (a factory reference, or a transformers config outside the templates)."""
    from ..targets import get_target
    from . import estimator as E
    am = check_flags(model, tp=tp, pp=pp, cp=cp, ep=ep, checkpointing=checkpointing, compiled=compiled,
                     precision=precision)
    instance = E.instance_name(instance)
    if count < 1:
        raise ValueError(f"count {count}: at least one instance")
    if am.kind in ("text", "seq2seq"):
        seq = seq or am.default_seq
        if am.max_seq and seq > am.max_seq:
            raise ValueError(f"sequence {seq}: {am.name} has {am.max_seq} positions (max_position_embeddings); "
                             f"give --seq {am.max_seq} or less")
    else:
        seq = None
    tg = get_target(E.INSTANCES[instance]["target"])
    lnc = lnc or tg.default_lnc
    topo = E._topology(instance, count, lnc)
    ranks = topo.ranks
    if dp is not None and dp != ranks:
        raise ValueError(f"dp {dp}: {count} x {instance} has {ranks} ranks, and a model run as its own code is "
                         f"data parallel over all of them")
    dp = ranks
    par = E.Parallelism(dp, 1, 1, 1, 1, fsdp, micro_batch, False)
    gb = global_batch or E.default_global_batch(ranks, [micro_batch])
    if gb % (dp * micro_batch):
        raise ValueError(f"global batch {gb} is not a multiple of dp x micro_batch = {dp * micro_batch}")
    mbs = gb // (dp * micro_batch)
    mc = model_cost(am, micro_batch=micro_batch, seq=seq, target=tg, precision=precision, compiled=compiled)
    c = mc.total
    split = 1.0 / lnc
    mb_s = (c.fwd_ns + c.bwd_ns) * split * 1e-9
    bwd_s = c.bwd_ns * split * 1e-9
    wbytes, gbytes = PARAM_BYTES[precision]
    groups = E.rank_layout(par)
    dp_group = groups["dp"][0]
    coll = {}
    nblocks = max(1, sum(n for _, n, _ in mc.blocks))
    if dp > 1 and fsdp:
        per_block = mc.params / nblocks
        ag = E._coll("all_gather", per_block * wbytes, topo, dp_group)
        rs = E._coll("reduce_scatter", per_block * gbytes, topo, dp_group)
        blk_f, blk_b = c.fwd_ns * split * 1e-9 / nblocks, bwd_s / nblocks
        exposed = max(0.0, ag - blk_f) + max(0.0, ag - blk_b)
        coll["fsdp all_gather/reduce_scatter"] = nblocks * (mbs * exposed + max(0.0, rs - blk_b)) + ag
    elif dp > 1:
        ar = E._coll("all_reduce", mc.params * gbytes, topo, dp_group)
        coll["dp gradient all_reduce"] = max(0.0, ar - bwd_s)
    shard = dp if (fsdp and dp > 1) else 1
    opt_s = E.optimizer_s(math.ceil(mc.params / shard), tg, optimizer, compiled) * split
    acc_s = accumulation_s(math.ceil(mc.params / shard), mbs, gbytes, tg, compiled) * split
    breakdown = {"compute: tensor engine": c.tensor_ns * split * 1e-9 * mbs,
                 "compute: vector/scalar/dma": (c.other_ns - c.launch_ns) * split * 1e-9 * mbs,
                 "launch overhead": c.launch_ns * split * 1e-9 * mbs,
                 "fallbacks": c.fallback_ns * split * 1e-9 * mbs, "optimizer": opt_s,
                 "gradient accumulation": acc_s}
    for k, v in coll.items():
        breakdown[f"comm: {k}"] = v
    step_s = mbs * mb_s + opt_s + acc_s + sum(coll.values())
    assert abs(sum(breakdown.values()) - step_s) <= 1e-6 * step_s, (breakdown, step_s)
    breakdown = {k: v for k, v in breakdown.items() if v > 0}
    tokens = am.tokens_per_sample(seq)
    tps = gb * tokens / step_s
    peak = tg.tensor_bf16_flops_per_core * lnc * ranks
    mfu = c.flops * mbs * dp / (step_s * peak)
    weights = mc.params * wbytes / shard + (2 * mc.params / nblocks * wbytes if shard > 1 else 0)
    mem = {f"weights ({'bf16' if wbytes == 2 else 'fp32'})": weights,
           f"gradients ({'bf16' if gbytes == 2 else 'fp32'})": mc.params * gbytes / shard,
           f"optimizer ({optimizer}: fp32 moments{' + master' if precision == 'bf16' else ''})":
               mc.params * OPTIMIZER_BYTES[precision] / shard,
           "activations": c.saved_bytes}
    need = sum(mem.values())
    cap = tg.hbm_bytes_per_logical_core(lnc)
    notes = [f"{am.name}: {am.source}; {mc.params:,} parameters; {mc.describe()} "
             f"(model run in {mc.wall_s:.1f} s)",
             f"data parallel over all {ranks} ranks ({'FSDP' if fsdp and dp > 1 else 'DDP'}); precision "
             f"{precision}; optimizer {optimizer}; {gb / step_s:,.1f} samples/s of {tokens} tokens each"]
    if not (need <= cap):
        notes.append(f"does not fit: needs {need / E.GiB:.1f} GiB per rank, has {cap / E.GiB:.1f} GiB "
                     f"({tg.marketing_name}, LNC={lnc}); try a smaller micro-batch"
                     + ("" if fsdp else " or FSDP"))
    pr = E.load_prices(prices).get(instance)
    usd = None if pr is None else float(pr["usd_per_hour"])
    price_note = (f"no price known for {instance}: give your own with --prices FILE" if pr is None else
                  f"{instance} at ${usd:.2f}/h per instance ({pr.get('kind', '')}, {pr.get('region', '')}; "
                  f"{pr['source']}, retrieved {pr['retrieved']})")
    if compiled:
        notes.append("compiled: the model runs through torch.compile(backend='neuron') on the shape-only device "
                     "(fused kernels, attention as one kernel, one launch per graph); its graphs are compiled once "
                     "per run of the model (the first block and the first two, the rest multiplied) and kept by "
                     "the layer-cost cache")
    est = E.Estimate(am.name, instance, count, tg.name, ranks, par, tokens, gb, bool(compiled), step_s, breakdown,
                     tps, mfu, mfu, need, cap, mem, need <= cap, tuple(c.fallbacks), coll, usd, price_note, notes)
    est._ranks_per_chip = topo.logical_cores_per_chip
    if compiled:
        # every rank compiles the model's forward and backward graphs (all ranks in parallel): the compile
        # backend's neuronx-cc model (an assumption, trnsim.backend.compile.stats) on the whole model's aten ops
        from ..backend.compile.stats import HW_COMPILE_FIXED_S, HW_COMPILE_PER_OP_S
        est.compile_s = 2 * HW_COMPILE_FIXED_S + HW_COMPILE_PER_OP_S * c.graph_ops
    return est
