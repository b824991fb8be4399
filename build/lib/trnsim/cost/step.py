"""One decoder layer's forward and backward on the shape-only ``neuron`` device: simulated time by engine class,
device launches, fallbacks, and the bytes autograd saves for backward (the layer's activation memory).

Each (layer kind, shard shapes, micro-batch, sequence, dtype, target) is run once per process and memoised: a
61-layer model costs two layer runs (dense and MoE), not 61.
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["LayerCost", "layer_cost", "head_cost", "classify"]

_TENSOR_ENGINE_OPS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product", "convolution", "_grouped_mm",
                      "linear")


@dataclasses.dataclass(frozen=True)
class LayerCost:
    fwd_ns: float
    bwd_ns: float
    tensor_ns: float          # matmul-family ops (Tensor Engine kernels), forward + backward
    other_ns: float           # every other native op (Vector/Scalar/GpSimd kernels and DMA-bound copies)
    fallback_ns: float        # ops that ran on the CPU, with their host transfers
    launch_ns: float          # the eager per-op launch cost included in the above
    launches: int
    saved_bytes: int          # what autograd keeps from forward to backward (activations)
    fallbacks: tuple          # aten ops that fell back

    def scaled(self, k):
        return LayerCost(self.fwd_ns * k, self.bwd_ns * k, self.tensor_ns * k, self.other_ns * k,
                         self.fallback_ns * k, self.launch_ns * k, int(self.launches * k), self.saved_bytes,
                         self.fallbacks)


def classify(row):
    """"tensor", "fallback" or "other" for a profile row."""
    if row.kind == "fallback":
        return "fallback"
    op = row.op.replace("aten::", "")
    if any(op.startswith(p) for p in _TENSOR_ENGINE_OPS):
        return "tensor"
    return "other"


_MEMO = {}


def _run(build, inputs, target, loss_fn):
    """Run ``loss_fn(module, *inputs)`` forward and backward on the shape-only device; returns a LayerCost."""
    import trnsim
    from ..backend import costs
    from ..backend.device_state import STATE
    from ..backend.shape_only import device_target, materialize_shape_only

    with device_target(target) as tg, torch.device("meta"):
        mod = build()
    materialize_shape_only(mod)
    saved = {}

    def pack(t):
        p = getattr(t, "_p", t)
        saved[(id(p), tuple(p.shape))] = p.numel() * p.element_size()     # one entry per saved tensor
        return t

    launch = costs.launch_ns(tg)
    with device_target(target) as tg:
        with trnsim.profile_torch() as prof:
            t0 = STATE.now_ns
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn(mod, *inputs())
            t1 = STATE.now_ns
            loss.backward()
            t2 = STATE.now_ns
    parts = {"tensor": 0.0, "other": 0.0, "fallback": 0.0}
    fb = set()
    for r in prof.rows:
        c = classify(r)
        parts[c] += r.duration_ns
        if c == "fallback":
            fb.add(r.op)
    n = len([r for r in prof.rows if r.kind != "fallback" and r.duration_ns > 0])
    return LayerCost(t1 - t0, t2 - t1, parts["tensor"], parts["other"], parts["fallback"], n * launch, n,
                     int(sum(saved.values())), tuple(sorted(fb)))


def layer_cost(spec, kind, *, tp=1, ep=1, micro_batch=1, seq=2048, dtype=torch.bfloat16, target="trn2"):
    """Forward + backward of one ``kind`` ("dense"/"moe") decoder layer of ``spec`` on one rank."""
    from ..targets import get_target
    from .layers import DecoderLayer
    tg = get_target(target)
    key = ("layer", spec, kind, tp, ep, micro_batch, seq, dtype, tg.name)
    r = _MEMO.get(key)
    if r is not None:
        return r
    from ..backend.shape_only import shape_only_tensor
    rope = spec.qk_rope_dim if spec.mla else spec.head_dim

    def build():
        return DecoderLayer(spec, kind, tp=tp, ep=ep).to(dtype)

    def inputs():
        x = shape_only_tensor((micro_batch, seq, spec.hidden), dtype, requires_grad=True)
        cos = shape_only_tensor((seq, rope), dtype)
        return x, cos, cos

    r = _MEMO[key] = _run(build, inputs, tg, lambda m, x, c, s: m(x, c, s).float().sum())
    return r


def head_cost(spec, *, tp=1, micro_batch=1, seq=2048, dtype=torch.bfloat16, target="trn2"):
    """The final norm, vocabulary projection and cross-entropy (forward + backward), plus the embedding lookup."""
    from ..targets import get_target
    from .layers import LMHead
    tg = get_target(target)
    key = ("head", spec, tp, micro_batch, seq, dtype, tg.name)
    r = _MEMO.get(key)
    if r is not None:
        return r
    from ..backend.shape_only import shape_only_tensor

    def build():
        return LMHead(spec, tp).to(dtype)

    def inputs():
        x = shape_only_tensor((micro_batch, seq, spec.hidden), dtype, requires_grad=True)
        labels = shape_only_tensor((micro_batch, seq), torch.int64)
        return x, labels

    r = _MEMO[key] = _run(build, inputs, tg, lambda m, x, lab: m(x, lab))
    return r
