"""``trnsim.estimate``: the time, memory and price of one training step of a model on Trainium instances.

How a step is put together (each piece from the simulator, never from a fitted constant):

* compute: one decoder layer of each kind (and the LM head) runs forward and backward on the shape-only
  ``neuron`` device (:mod:`trnsim.cost.step`): the device's own dispatch and op costs, i.e. the shape-only
  simulation of the library NKI kernel behind each op.  The device simulates an op on one physical NeuronCore;
  a logical core of LNC=2 splits each op over its two physical cores (an ideal split is assumed).
* the optimizer: ``torch.optim.AdamW(foreach=True).step()`` run on a shape-only parameter of the rank's size;
* sequence parallelism (default with TP > 1, Megatron-LM style): norms and residuals on 1/tp of the sequence,
  the TP all-reduces become all-gathers and reduce-scatters (``sequence_parallel=False`` for plain TP);
* communication: every collective the parallelism implies, timed by :mod:`trnsim.collectives` on the instance's
  topology (links, hop latency, contention, the runtime's algorithm for the size).  TP all-reduces, CP
  all-gathers and EP all-to-alls are exposed (on the critical path); FSDP's per-layer all-gathers and reduce-
  scatters overlap the neighbouring layer's compute (only the excess is exposed); DDP's gradient all-reduce
  overlaps the last micro-batch's backward; pipeline sends are exposed once per micro-batch step.
* pipeline: 1F1B with equal stages: (micro-batches + stages - 1) stage steps, the bubble being the (stages - 1).
* memory per rank: bf16 weights and gradients, fp32 master weights and AdamW moments (sharded over the data-
  parallel group with FSDP), and the activations autograd saved in the shape-only run, times the micro-batches
  in flight (1F1B: as many as stages), or only the layer inputs with activation checkpointing.

* precision fp8 (trn2 and later): the linear and expert matmuls of the layer runs are re-priced as fp8 double-row
  kernels (:func:`trnsim.cost.step.fp8_matmul_ns`), with the casts of their operands; the rest stays bf16.
* compiled (``compiled=True``): every layer and the head run through ``torch.compile(backend="neuron")`` on the
  shape-only device (the compile backend's fused kernels and one launch per graph; attention is the flash kernel
  inside the layer's graph; a group of ops costs the lesser of its fused kernel and its ops' eager kernels, so a
  compiled layer is never slower than eager; with sequence parallelism the all-gathers and reduce-scatters are
  nodes of the layer's graph, ``trnsim_coll::seq_reshard``, timed by the same collectives model, of which only
  what the graph's order and dependencies leave exposed is charged: ``backend/compile/collective.py``,
  :class:`TpCollectives`); the compile time before the first step is the compile backend's
  neuronx-cc model (``trnsim.backend.compile.stats``, an assumption) on the stage's forward and backward graphs,
  priced too.  Layer runs are kept by the layer-cost cache (:mod:`trnsim.cost.layer_cache`): a layer is compiled
  once, not once per estimate.  The optimizer step is compiled too (:func:`optimizer_s`: one fused kernel,
  parameters and moments updated in place).
* speed: each distinct kernel launch is simulated once per process (``costs._sim``), each op cost kept on disk
  by the op-cost cache (``trnsim.backend.cost_cache``); with ``jobs`` > 1 the kernel simulations a configuration
  needs are collected first (a run with them deferred) and simulated over that many processes
  (:func:`trnsim.cost.step.prepare`).

Everything is deterministic: the same arguments give the same result.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import torch

from .models import BUILTIN, ModelSpec, load_model, mlp_kind

__all__ = ["Parallelism", "Estimate", "estimate", "INSTANCES", "instance_name", "load_prices", "rank_layout",
           "state_memory", "capacity_per_rank", "default_global_batch", "optimizer_s", "OPTIMIZERS",
           "is_template"]

_DATA = os.path.join(os.path.dirname(__file__), "data")
GiB = 2 ** 30


def _load(name):
    with open(os.path.join(_DATA, name), encoding="utf-8") as f:
        return json.load(f)


INSTANCES = {k: v for k, v in _load("instances.json").items() if not k.startswith("_")}


def instance_name(name) -> str:
    """The one name of an instance type (a key of :data:`INSTANCES`, the same names as
    ``trnsim.collectives.TOPOLOGIES``) for ``name`` or any alias ``trnsim.collectives.MACHINE_ALIASES`` accepts
    (``trn2u.48xlarge`` is ``trn2-ultraserver``); a clear error naming the accepted names otherwise."""
    from ..collectives.topology import MACHINE_ALIASES, machine_name
    try:
        key = machine_name(name)
    except ValueError:
        key = None
    if key not in INSTANCES:
        raise ValueError(f"unknown instance {name!r}: expected one of {', '.join(INSTANCES)} (aliases: "
                         f"{', '.join(f'{a} = {b}' for a, b in MACHINE_ALIASES.items() if b in INSTANCES)})")
    return key


def _price_rows(doc, where):
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"price file {where}: expected {{\"rows\": [...]}}")
    out = {}
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"price file {where}: row {i} is not an object")
        for key in ("instance", "usd_per_hour", "source", "retrieved"):
            if key not in r:
                raise ValueError(f"price file {where}: row {i} ({r.get('instance', '?')}) has no {key!r} "
                                 f"(every row: instance, usd_per_hour, source, retrieved)")
        v = r["usd_per_hour"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"price file {where}: row {i} ({r['instance']}): usd_per_hour {v!r} is not a "
                             f"positive number")
        try:
            name = instance_name(r["instance"])
        except ValueError as e:
            raise ValueError(f"price file {where}: row {i}: {e}") from None
        out.setdefault(name, dict(r, instance=name))
    return out


def load_prices(path=None):
    """``{instance: row}``: the built-in dated price file, with the rows of the user's own file (``path``, same
    format) replacing the built-in row of each instance they name."""
    out = _price_rows(_load("prices.json"), "prices.json")
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            raise ValueError(f"price file {path}: no such file") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"price file {path}: not JSON ({e})") from None
        out.update(_price_rows(doc, path))
    return out


@dataclasses.dataclass(frozen=True)
class Parallelism:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    fsdp: bool = True
    micro_batch: int = 1
    checkpointing: bool = False

    @property
    def ranks(self):
        return self.dp * self.tp * self.pp * self.cp

    def label(self):
        s = f"DP{self.dp}{'(FSDP)' if self.fsdp and self.dp > 1 else ''} TP{self.tp} PP{self.pp}"
        if self.cp > 1:
            s += f" CP{self.cp}"
        if self.ep > 1:
            s += f" EP{self.ep}"
        return s + f" mb{self.micro_batch}" + (" ckpt" if self.checkpointing else "")


def rank_layout(par: Parallelism, rank_of=None):
    """Groups of global ranks for each parallel dimension: TP innermost (neighbouring cores of one chip),
    then CP, then PP, DP outermost; EP groups are consecutive DP ranks.  Returns ``{dim: [group, ...]}``."""
    def rank(d, p, c, t):
        return ((d * par.pp + p) * par.cp + c) * par.tp + t
    groups = {"tp": [], "cp": [], "pp": [], "dp": [], "ep": []}
    for d in range(par.dp):
        for p in range(par.pp):
            for c in range(par.cp):
                groups["tp"].append(tuple(rank(d, p, c, t) for t in range(par.tp)))
    for d in range(par.dp):
        for p in range(par.pp):
            groups["cp"].append(tuple(rank(d, p, c, 0) for c in range(par.cp)))
    groups["pp"].append(tuple(rank(0, p, 0, 0) for p in range(par.pp)))
    groups["dp"].append(tuple(rank(d, 0, 0, 0) for d in range(par.dp)))
    groups["ep"].append(tuple(rank(d, 0, 0, 0) for d in range(min(par.ep, par.dp))))
    return groups


@dataclasses.dataclass
class Estimate:
    model: str
    instance: str
    count: int
    target: str
    ranks: int
    parallelism: Parallelism
    seq: int
    global_batch: int
    compiled: bool
    step_time_s: float
    breakdown: dict            # seconds per component of the step (they add up to step_time_s)
    tokens_per_s: float
    mfu: float
    hfu: float
    hbm_per_rank_bytes: float
    hbm_capacity_bytes: float
    memory: dict               # bytes per rank per component
    fits: bool
    fallbacks: tuple
    collectives: dict          # seconds per step per collective (exposed)
    usd_per_hour: float | None
    price_note: str
    notes: list

    @property
    def hbm_per_chip_bytes(self):
        return self.hbm_per_rank_bytes * self._ranks_per_chip

    _ranks_per_chip: int = 1
    compile_s: float = 0.0     # compiled: estimated Neuron compiler time before the first step (0 when eager)

    def dollars(self, seconds):
        return None if self.usd_per_hour is None else self.usd_per_hour * self.count * seconds / 3600.0

    @property
    def samples_per_s(self):
        """Sequences (or samples: images, a factory's inputs) per second."""
        return self.global_batch / self.step_time_s

    @property
    def usd_per_step(self):
        return self.dollars(self.step_time_s)

    @property
    def usd_per_billion_tokens(self):
        return None if self.usd_per_hour is None else self.dollars(1e9 / self.tokens_per_s)

    @property
    def usd_for_compile(self):
        return self.dollars(self.compile_s) if self.compile_s else (0.0 if self.usd_per_hour is not None else None)

    def usd_for_tokens(self, tokens):
        return None if self.usd_per_hour is None else self.dollars(tokens / self.tokens_per_s)

    def to_json(self):
        d = dataclasses.asdict(self)
        d.pop("_ranks_per_chip", None)
        d["parallelism"] = dataclasses.asdict(self.parallelism)
        d["parallelism"]["label"] = self.parallelism.label()
        d.update(samples_per_s=self.samples_per_s, usd_per_step=self.usd_per_step, usd_per_billion_tokens=self.usd_per_billion_tokens,
                 hbm_per_chip_bytes=self.hbm_per_chip_bytes, fallbacks=list(self.fallbacks),
                 usd_for_compile=self.usd_for_compile)
        return d


def capacity_per_rank(instance, lnc=None):
    """HBM bytes one rank (logical core) of ``instance`` has."""
    from ..targets import get_target
    tg = get_target(INSTANCES[instance_name(instance)]["target"])
    return tg.hbm_bytes_per_logical_core(lnc or tg.default_lnc)


def _topology(inst, count, lnc):
    from ..collectives import get_topology
    return get_topology(INSTANCES[instance_name(inst)]["topology"], nodes=count, lnc=lnc)


def _coll_ns(op, nbytes, topo, group):
    """ns of collective ``op`` of ``nbytes`` over ``group`` (ranks of ``topo``): :mod:`trnsim.collectives`' model."""
    from ..collectives import collective_time
    if len(group) <= 1 or nbytes <= 0:
        return 0.0
    return collective_time(op, int(nbytes), topo, nranks=topo.ranks, group=group).time_ns


def _coll(op, nbytes, topo, group):
    return _coll_ns(op, nbytes, topo, group) * 1e-9


class TpCollectives:
    """The pricer of the collectives inside a compiled sequence-parallel layer's graphs
    (``backend.compile.collective``): :func:`_coll_ns` on the estimate's topology and the rank's tensor-parallel
    group, the model the eager estimate times them with.  ``compute_scale`` (1 / LNC): the graph's kernels are
    simulated on one physical core and a logical core runs them in that fraction of the time, which is the window
    a collective can overlap."""

    def __init__(self, topo, group, where, lnc):
        self.topo, self.group, self.compute_scale = topo, tuple(group), 1.0 / lnc
        self.key = f"{where} lnc={lnc} tp group={list(self.group)}"

    def ns(self, op, nbytes, group_size):
        if group_size != len(self.group):
            raise ValueError(f"a {op} over {group_size} ranks in a graph priced for the tensor-parallel group of "
                             f"{len(self.group)} ranks {list(self.group)}")
        return _coll_ns(op, nbytes, self.topo, self.group)


def default_global_batch(ranks, micro_batches=(1,)):
    """The default global batch (sequences or samples per step): 4 x ranks x the least common multiple of the
    micro-batches tried.  Fixed for every candidate of one instance count (it does not depend on the
    parallelism), a multiple of dp x micro_batch for each, and at least 4 x pp x tp micro-batches per step (a
    pipeline bubble under 1/4 of the step)."""
    return 4 * int(ranks) * math.lcm(*[int(m) for m in micro_batches])


OPTIMIZERS = ("adamw", "lamb")


def _lamb_step(params, grads, m, v, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, wd=0.01):
    """One LAMB step (You et al. 2019, "Large Batch Optimization for Deep Learning", Algorithm 2) as foreach
    ops: Adam moments, the Adam update plus weight decay, then each tensor scaled by its trust ratio
    ||w|| / ||update||.  Written here (torch has no Lamb); only its device cost is used."""
    import torch
    torch._foreach_mul_(m, betas[0])
    torch._foreach_add_(m, grads, alpha=1 - betas[0])
    torch._foreach_mul_(v, betas[1])
    torch._foreach_addcmul_(v, grads, grads, value=1 - betas[1])
    denom = torch._foreach_add(torch._foreach_sqrt(v), eps)
    upd = torch._foreach_div(m, denom)
    torch._foreach_add_(upd, params, alpha=wd)
    ratio = torch._foreach_div(torch._foreach_norm(params), torch._foreach_norm(upd))
    torch._foreach_mul_(upd, ratio)
    torch._foreach_add_(params, upd, alpha=-lr)


def _adamw_flat(p, g, m, v, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, wd=0.01, step=2):
    """``torch.optim.AdamW``'s update (decoupled weight decay, bias-corrected moments) on one flat tensor, as plain
    elementwise ops (what a compiled graph of the step holds); only its device cost is used."""
    p.mul_(1 - lr * wd)
    m.mul_(betas[0]).add_(g * (1 - betas[0]))
    v.mul_(betas[1]).add_(g * g * (1 - betas[1]))
    denom = v.sqrt() / (1 - betas[1] ** step) ** 0.5 + eps
    p.add_(m / denom * (-lr / (1 - betas[0] ** step)))


def _lamb_flat(p, g, m, v, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, wd=0.01):
    """:func:`_lamb_step` on one flat tensor as plain elementwise ops and two norms."""
    m.mul_(betas[0]).add_(g * (1 - betas[0]))
    v.mul_(betas[1]).add_(g * g * (1 - betas[1]))
    upd = m / (v.sqrt() + eps) + wd * p
    p.add_(upd * (p.norm() / upd.norm()) * -lr)


def optimizer_s(numel, target, name="adamw", compiled=False):
    """One optimizer step over ``numel`` fp32 parameters on the shape-only device.

    * eager: ``torch.optim.AdamW(foreach=True).step()``, or LAMB (:func:`_lamb_step`) as foreach ops; each op's
      cost is the device's (the memory traffic of its elementwise kernels: AdamW reads parameter, gradient and two
      moments and writes three of them; LAMB adds the update's round trips and two norms);
    * ``compiled``: the step as the compiled training graph holds it (torch-neuronx traces the optimizer into the
      step's graph): the same math (:func:`_adamw_flat`, :func:`_lamb_flat`) run through
      ``torch.compile(backend="neuron")``, its elementwise chain one fused kernel and the updated parameter and
      moments written in place (the compile backend's input/output aliasing).

    Memoised, and kept by the layer-cost cache (:mod:`trnsim.cost.layer_cache`) under the same key."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer {name!r}: expected one of {', '.join(OPTIMIZERS)}")
    if numel <= 0:
        return 0.0
    key = (int(numel), target.name, name) + (("compiled",) if compiled else ())
    if key in _OPT:
        return _OPT[key]
    from . import layer_cache
    hit = layer_cache.lookup_seconds(("optimizer",) + key)      # run by an earlier process
    if hit is not None:
        _OPT[key] = hit
        return hit
    from .. import config
    from ..backend.device_state import STATE
    from ..backend.shape_only import device_target, meta_payloads, shape_only_tensor
    # eager: plain meta payloads (the same costs, less CPU; shape_only.meta_payloads); compiled: fake ones
    from .step import own_clock
    with device_target(target), meta_payloads(bool(config.shape_only_meta) and not compiled), own_clock():
        p = torch.nn.Parameter(shape_only_tensor((int(numel),), torch.float32))
        p.grad = shape_only_tensor((int(numel),), torch.float32)
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(_adamw_flat if name == "adamw" else _lamb_flat, backend="neuron")
            m, v = (shape_only_tensor((int(numel),), torch.float32) for _ in range(2))
            with torch.no_grad():
                fn(p, p.grad, m, v)              # compiles (its host time is not the step's)
                t0 = STATE.now_ns
                fn(p, p.grad, m, v)
        elif name == "adamw":
            opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
            opt.step()                       # the first step creates the moments
            t0 = STATE.now_ns
            opt.step()
        else:
            m, v = (shape_only_tensor((int(numel),), torch.float32) for _ in range(2))
            with torch.no_grad():
                t0 = STATE.now_ns
                _lamb_step([p], [p.grad], [m], [v])
        _OPT[key] = (STATE.now_ns - t0) * 1e-9
    layer_cache.store_seconds(("optimizer",) + key, _OPT[key])
    return _OPT[key]


_OPT = {}


def is_template(model) -> bool:
    """True when ``model`` is estimated by the decoder templates (a built-in name, a ModelSpec, a decoder config
    the templates describe); False for a factory (``path.py:function``) or any other transformers config, which
    run as their own code (:mod:`trnsim.cost.anyestimate`)."""
    from .anymodel import AnyModel, uses_template
    if isinstance(model, ModelSpec):
        return True
    if isinstance(model, AnyModel) or (callable(model) and not isinstance(model, type)):
        return False         # an AnyModel or a factory function
    if isinstance(model, str):
        if model.strip().lower() in BUILTIN:
            return True
        if ":" in model and model.rpartition(":")[0].endswith(".py"):
            return False
        if os.path.isfile(model):
            try:
                with open(model, encoding="utf-8") as f:
                    cfg = json.load(f)
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"model {model!r}: not a readable JSON config ({e})") from None
            return uses_template(cfg)
        return True             # load_model names what is wrong
    return uses_template(model)


def estimate(model, instance="trn2.48xlarge", count=1, *, dp=None, tp=1, pp=1, cp=1, ep=1, fsdp=True,
             micro_batch=1, seq=None, global_batch=None, checkpointing=False, precision="bf16",
             compiled=False, lnc=None, prices=None, jobs=None, sequence_parallel=True,
             optimizer="adamw") -> Estimate:
    """Estimate one training step (see the module docstring).  ``dp`` defaults to the ranks left after
    tp x pp x cp; ``global_batch`` (sequences) to :func:`default_global_batch` (4 x ranks x micro_batch);
    ``seq`` to 4096.  A model outside the decoder templates (:func:`is_template`) is run as its own code,
    data parallel only (:func:`trnsim.cost.anyestimate.estimate_any`)."""
    from ..targets import get_target
    from .step import head_cost, layer_cost, prepare

    if not is_template(model):
        from .anyestimate import estimate_any
        return estimate_any(model, instance, count, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, fsdp=fsdp,
                            micro_batch=micro_batch, seq=seq, global_batch=global_batch,
                            checkpointing=checkpointing, precision=precision, compiled=compiled, lnc=lnc,
                            prices=prices, jobs=jobs, sequence_parallel=sequence_parallel, optimizer=optimizer)
    seq = seq or 4096
    spec: ModelSpec = load_model(model)
    instance = instance_name(instance)
    if count < 1:
        raise ValueError(f"count {count}: at least one instance")
    if precision not in ("bf16", "fp8"):
        raise ValueError(f"precision {precision!r} for the decoder template of {spec.name}: expected bf16 or fp8 "
                         f"(fp32 and autocast are modelled for models run as their own code)")
    inst = INSTANCES[instance]
    tg = get_target(inst["target"])
    lnc = lnc or tg.default_lnc
    topo = _topology(instance, count, lnc)
    ranks = topo.ranks
    if dp is None:
        if ranks % (tp * pp * cp):
            raise ValueError(f"tp x pp x cp = {tp * pp * cp} does not divide the {ranks} ranks of {count} x {instance}")
        dp = ranks // (tp * pp * cp)
    par = Parallelism(dp, tp, pp, cp, ep, fsdp, micro_batch, checkpointing)
    if par.ranks != ranks:
        raise ValueError(f"dp x tp x pp x cp = {par.ranks}, but {count} x {instance} has {ranks} ranks "
                         f"({topo.chips} chips x {topo.logical_cores_per_chip} logical cores at LNC={lnc})")
    if ep > 1 and (not spec.moe or (dp * cp) % ep):
        raise ValueError(f"ep={ep}: needs a mixture-of-experts model and to divide dp x cp = {dp * cp}")
    if seq % cp:
        raise ValueError(f"seq {seq} is not divisible by cp={cp}")
    gb = global_batch or default_global_batch(ranks, [micro_batch])
    if gb % (dp * micro_batch):
        raise ValueError(f"global batch {gb} is not a multiple of dp x micro_batch = {dp * micro_batch}")
    mbs = gb // (dp * micro_batch)
    dtype = torch.bfloat16
    notes = []
    if precision == "fp8":
        if not tg.fp8_double_row:
            raise ValueError(f"precision fp8 on {instance} ({tg.marketing_name}): no fp8 Tensor Engine rate above "
                             f"bf16 is modelled for this chip (fp8 double-row mode is Trainium2 and later)")
        notes.append("fp8: linear and expert matmuls priced as fp8 double-row kernels (the bf16 kernel on half the "
                     "contraction) plus casts of both operands; attention, weights, gradients and optimizer state "
                     "stay bf16/fp32; MFU is against the bf16 peak")
    if compiled:
        notes.append("compiled: every layer runs through torch.compile(backend='neuron') on the shape-only device "
                     "(fused kernels, each no slower than its ops run eagerly; one launch per graph; sequence-"
                     "parallel collectives inside the layer's graph, overlapping only the kernels after them that "
                     "do not depend on them; other TP collectives exposed); compile time is the compile backend's "
                     "neuronx-cc model (an assumption: 20 s per graph + 0.05 s per aten op)")
    s_local = seq // cp
    split = 1.0 / lnc                 # the device simulates one physical core; a logical core has lnc of them
    # -- compute per micro-batch per stage ----------------------------------------------------------------
    kinds = spec.layer_kinds()
    sp = bool(sequence_parallel and tp > 1)
    if sp and s_local % tp:
        raise ValueError(f"sequence parallelism needs the sequence per rank ({s_local}) divisible by tp={tp}: "
                         f"choose another --seq or --tp, or --no-sequence-parallel")
    groups = rank_layout(par)
    comm = TpCollectives(topo, groups["tp"][0], f"{instance} x{count}", lnc) if (compiled and sp) else None
    common = dict(micro_batch=micro_batch, seq=s_local, dtype=dtype, target=tg, precision=precision,
                  compiled=compiled, sp=sp, comm=comm)
    prepare([("layer", spec, dict(kind=k, tp=tp, ep=ep, **common)) for k, _ in kinds] +
            [("head", spec, dict(tp=tp, **common))], jobs=jobs)
    per_kind = {}
    fallbacks = set()
    for kind, n in kinds:
        c = layer_cost(spec, kind, tp=tp, ep=ep, **common)
        per_kind[kind] = (n, c)
        fallbacks.update(c.fallbacks)
    head = head_cost(spec, tp=tp, **common)
    fallbacks.update(head.fallbacks)
    # the slowest pipeline stage's layers (ceil(layers / pp) consecutive layers a stage; kinds mixed as the model
    # orders them)
    slowest = max(spec.stages(pp), key=lambda d: sum(n * (per_kind[k][1].fwd_ns + per_kind[k][1].bwd_ns)
                                                      for k, n in d.items()))
    layers_per_stage = {k: slowest.get(k, 0) for k in per_kind}
    comp = {"tensor": 0.0, "other": 0.0, "fallback": 0.0, "launch": 0.0, "recompute": 0.0}
    fwd_stage = bwd_stage = 0.0
    graph_comm_ns = 0.0     # compiled: the exposed time of the collectives inside the graphs (not split by LNC)
    for kind, (n, c) in per_kind.items():
        k = layers_per_stage[kind]
        comp["tensor"] += k * c.tensor_ns
        comp["other"] += k * (c.other_ns - c.launch_ns)
        comp["fallback"] += k * c.fallback_ns
        comp["launch"] += k * c.launch_ns
        fwd_stage += k * (c.fwd_ns - c.comm_fwd_ns)
        bwd_stage += k * (c.bwd_ns - c.comm_bwd_ns)
        graph_comm_ns += k * (c.comm_fwd_ns + c.comm_bwd_ns)
        if checkpointing:       # the forward recomputed; its collectives are not counted again (nor eagerly)
            comp["recompute"] += k * (c.fwd_ns - c.comm_fwd_ns)
    # the LM head sits on the last stage: the bottleneck stage carries it (equal stages otherwise)
    comp["tensor"] += head.tensor_ns
    comp["other"] += head.other_ns - head.launch_ns
    comp["fallback"] += head.fallback_ns
    comp["launch"] += head.launch_ns
    fwd_stage += head.fwd_ns - head.comm_fwd_ns
    bwd_stage += head.bwd_ns - head.comm_bwd_ns
    graph_comm_ns += head.comm_fwd_ns + head.comm_bwd_ns
    stage_ns = sum(comp.values())
    comp = {k: v * split * 1e-9 for k, v in comp.items()}
    stage_s = stage_ns * split * 1e-9
    bwd_s = bwd_stage * split * 1e-9
    # -- communication ------------------------------------------------------------------------------------
    act_bytes = micro_batch * s_local * spec.hidden * 2
    coll = {}
    nlayers_stage = sum(layers_per_stage.values())
    if tp > 1:
        if sp and comm is not None:     # compiled: inside the graphs, what they leave exposed (collective.py)
            coll["tp all_gather/reduce_scatter (sequence parallel)"] = graph_comm_ns * 1e-9
        elif sp:    # per layer: 2 all-gathers + 2 reduce-scatters forward, the same backward; the LM head on the
            #         last stage: the all-gather of its normed input, and its reduce-scatter backward
            coll["tp all_gather/reduce_scatter (sequence parallel)"] = (4 * nlayers_stage + 1) * (
                _coll("all_gather", act_bytes, topo, groups["tp"][0]) +
                _coll("reduce_scatter", act_bytes, topo, groups["tp"][0]))
        else:       # per layer: 2 all-reduces forward (attention and MLP outputs), 2 backward
            coll["tp all_reduce"] = 4 * nlayers_stage * _coll("all_reduce", act_bytes, topo, groups["tp"][0])
    if cp > 1:
        kv = 2 * micro_batch * s_local * max(1, spec.kv_heads // tp) * spec.head_dim * 2
        t = _coll("all_gather", kv * cp, topo, groups["cp"][0]) + _coll("reduce_scatter", kv * cp, topo,
                                                                          groups["cp"][0])
        coll["cp all_gather/reduce_scatter"] = nlayers_stage * t
    if ep > 1 and spec.moe:
        moe_layers = sum(n for k, n in layers_per_stage.items() if mlp_kind(k) == "moe")
        a2a = micro_batch * s_local * spec.top_k * spec.hidden * 2
        coll["ep all_to_all"] = 4 * moe_layers * _coll("all_to_all", a2a, topo, groups["ep"][0])
    per_mb_comm = sum(coll.values())
    stage_io = act_bytes / tp if sp else act_bytes        # what a rank sends to the next stage
    p2p = 2 * _coll("send_recv", stage_io, topo, groups["pp"][0][:2]) if pp > 1 else 0.0
    steps = mbs + pp - 1
    pipeline_s = steps * (stage_s + per_mb_comm + p2p)
    bubble_s = (pp - 1) * stage_s        # the collectives of the bubble steps are counted with the others
    # parameters held by one rank
    dense_layer_local = {k: layer_params_per_rank(spec, k, tp, ep) for k, _ in kinds}
    layer_params_local = sum(layers_per_stage[k] * dense_layer_local[k] for k, _ in kinds)
    emb_local = spec.embedding_params() / tp
    params_local = layer_params_local + emb_local
    dp_group = groups["dp"][0]
    grad_s = 0.0
    fsdp_s = 0.0
    if dp > 1:
        if fsdp:
            per_layer_bytes = (layer_params_local / max(nlayers_stage, 1)) * 2
            ag = _coll("all_gather", per_layer_bytes, topo, dp_group)
            rs = _coll("reduce_scatter", per_layer_bytes, topo, dp_group)
            layer_fwd = fwd_stage * split * 1e-9 / max(nlayers_stage, 1)
            layer_bwd = bwd_s / max(nlayers_stage, 1)
            exposed = max(0.0, ag - layer_fwd) + max(0.0, ag - layer_bwd)
            fsdp_s = nlayers_stage * (mbs * exposed + max(0.0, rs - layer_bwd)) + ag
            coll["fsdp all_gather/reduce_scatter"] = fsdp_s
        else:
            ar = _coll("all_reduce", params_local * 2, topo, dp_group)
            grad_s = max(0.0, ar - bwd_s)
            coll["dp gradient all_reduce"] = grad_s
    shard = dp if (fsdp and dp > 1) else 1
    opt_s = optimizer_s(math.ceil(params_local / shard), tg, optimizer, compiled) * split
    coll_total = {k: (v * steps if k in ("tp all_reduce", "tp all_gather/reduce_scatter (sequence parallel)",
                                         "cp all_gather/reduce_scatter", "ep all_to_all")
                      else v) for k, v in coll.items()}
    if pp > 1:
        coll_total["pp send/recv"] = steps * p2p
    step_s = pipeline_s + grad_s + fsdp_s + opt_s
    breakdown = {"compute: tensor engine": comp["tensor"] * mbs, "compute: vector/scalar/dma": comp["other"] * mbs,
                 "compute: recompute (checkpointing)": comp["recompute"] * mbs,
                 "launch overhead": comp["launch"] * mbs, "fallbacks": comp["fallback"] * mbs,
                 "pipeline bubble": bubble_s, "optimizer": opt_s}
    for k, v in coll_total.items():
        breakdown[f"comm: {k}"] = v
    tot = sum(breakdown.values())
    breakdown = {k: v for k, v in breakdown.items() if v > 0}
    assert abs(tot - step_s) <= 1e-6 * max(step_s, 1e-9), (tot, step_s)
    tokens = gb * seq
    tps = tokens / step_s
    peak = tg.tensor_bf16_flops_per_core * lnc * ranks
    mfu = spec.model_flops_per_token(seq) * tokens / (step_s * peak)
    hfu = mfu * ((8.0 / 6.0) if checkpointing else 1.0)
    # -- memory per rank ----------------------------------------------------------------------------------
    saved = max(c.saved_bytes for _, c in per_kind.values())
    in_flight = min(mbs, pp) if pp > 1 else 1
    if checkpointing:
        acts = nlayers_stage * stage_io * in_flight + saved
    else:
        acts = sum(layers_per_stage[k] * c.saved_bytes for k, (_, c) in per_kind.items()) * in_flight
    mem = dict(state_memory(spec, par), **{"activations": acts, "LM head and loss": head.saved_bytes})
    need = sum(mem.values())
    cap = tg.hbm_bytes_per_logical_core(lnc)
    fits = need <= cap
    if not fits:
        notes.append(f"does not fit: needs {need / GiB:.1f} GiB per rank, has {cap / GiB:.1f} GiB "
                     f"({tg.marketing_name}, LNC={lnc}); " + _what_would_fit(par, spec, mem, cap))
    # -- price --------------------------------------------------------------------------------------------
    pr = load_prices(prices).get(instance)
    if pr is None:
        price_note = (f"no price known for {instance}: give your own with --prices FILE (rows: instance, "
                      f"usd_per_hour, source, retrieved)")
        usd = None
    else:
        usd = float(pr["usd_per_hour"])
        price_note = (f"{instance} at ${usd:.2f}/h per instance ({pr.get('kind', '')}, {pr.get('region', '')}; "
                      f"{pr['source']}, retrieved {pr['retrieved']})")
    est = Estimate(spec.name, instance, count, tg.name, ranks, par, seq, gb, compiled, step_s, breakdown, tps,
                   mfu, hfu, need, cap, mem, fits, tuple(sorted(fallbacks)), coll_total, usd, price_note, notes)
    est._ranks_per_chip = topo.logical_cores_per_chip
    if compiled:
        # every rank compiles its stage's forward and backward graphs (all ranks in parallel): the compile
        # backend's neuronx-cc model on the stage's aten ops (the layers' graphs times the layers, plus the head)
        from ..backend.compile.stats import HW_COMPILE_FIXED_S, HW_COMPILE_PER_OP_S
        stage_ops = sum(layers_per_stage[k] * c.graph_ops for k, (_, c) in per_kind.items()) + head.graph_ops
        est.compile_s = 2 * HW_COMPILE_FIXED_S + HW_COMPILE_PER_OP_S * stage_ops
    return est


def layer_params_per_rank(spec, kind, tp, ep):
    """Parameters of one layer of ``kind`` that one rank holds: attention split over the tensor-parallel group, the
    MLP over it too (a MoE layer's experts also over the expert-parallel group), the two norms' weights whole."""
    experts = ep if mlp_kind(kind) == "moe" else 1
    return spec.attention_params() / tp + spec.mlp_params(kind) / (tp * experts) + 2 * spec.hidden


def state_memory(spec, par):
    """Bytes per rank of the training state alone (no activations): bf16 weights (with FSDP the rank's shard plus
    two gathered layers), bf16 gradients and the fp32 master weights and AdamW moments (sharded over the data-
    parallel group with FSDP).  Known before any layer runs: the search drops configurations it cannot hold."""
    def local(k):
        return layer_params_per_rank(spec, k, par.tp, par.ep)
    # the pipeline stage with the most parameters (ceil(layers / pp) consecutive layers a stage)
    per_stage = max(spec.stages(par.pp), key=lambda d: sum(n * local(k) for k, n in d.items()))
    nl = sum(per_stage.values())
    layer_local = sum(n * local(k) for k, n in per_stage.items())
    params_local = layer_local + spec.embedding_params() / par.tp
    shard = par.dp if (par.fsdp and par.dp > 1) else 1
    weights = params_local * 2 if shard == 1 else params_local * 2 / shard + 2 * layer_local / max(nl, 1) * 2
    return {"weights (bf16)": weights, "gradients (bf16)": params_local * 2 / shard,
            "optimizer (fp32 master + AdamW moments)": params_local * 12 / shard}


def _what_would_fit(par, spec, mem, cap):
    tips = []
    if not par.checkpointing and mem["activations"] > 0.3 * cap:
        tips.append("activation checkpointing")
    if par.dp > 1 and not par.fsdp:
        tips.append("FSDP (shards the optimizer state and gradients over the data-parallel ranks)")
    tips.append(f"more tensor or pipeline parallelism (now TP{par.tp} PP{par.pp})")
    if par.micro_batch > 1:
        tips.append("a smaller micro-batch")
    return "try " + ", or ".join(tips)
