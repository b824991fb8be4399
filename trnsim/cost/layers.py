"""The decoder layers the estimator runs on the shape-only device: trnsim's own PyTorch code for the layer types
of :class:`~trnsim.cost.models.ModelSpec` (grouped-query attention with rotary embeddings, DeepSeek's multi-head
latent attention, SwiGLU MLP, mixture of experts), sharded as tensor parallelism shards them on one rank.

A model given as Python code is run as it is (``trnsim.estimate(model=factory)``); these modules serve the
built-in and Hugging Face configurations without needing ``transformers``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .models import is_windowed, mlp_kind

__all__ = ["DecoderLayer", "LMHead"]


def _div(n, k, what):
    if n % k:
        raise ValueError(f"{what} ({n}) is not divisible by the tensor-parallel degree {k}")
    return n // k


class RMSNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-6)


def _attention(q, k, v, window=0):
    """Causal attention through the fused (flash) kernel the device implements natively, as a Trainium attention
    kernel is: torch's composite SDPA on a PrivateUse1 device takes the math path (materialised scores) instead.
    ``window``: a sliding window of that many keys (``trnsim_attn::sliding_window_attention``, one fused kernel
    that skips the key tiles outside the window; ``backend/window_attention.py``).
    Value heads narrower than the query's (latent attention) are padded to the query's head size.  Under
    ``torch.compile`` the op is traced into the layer's graph and the neuron backend keeps it one node, the same
    kernel (``compile.backend._KEEP_WHOLE``), so a compiled layer is one graph with attention inside it."""
    dv = v.shape[-1]
    if dv != q.shape[-1]:
        v = F.pad(v, (0, q.shape[-1] - dv))
    if window:
        from ..backend.window_attention import sliding_window_attention
        o = sliding_window_attention(q, k, v, window)
    else:
        o = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0]
    return o[..., :dv] if dv != q.shape[-1] else o


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    """Grouped-query attention, heads sharded over ``tp`` ranks, causal SDPA (with a sliding ``window`` of keys
    when not 0)."""

    def __init__(self, spec, tp, window=0):
        super().__init__()
        self.window = int(window)
        self.h = _div(spec.heads, tp, "attention heads")
        self.kv = max(1, spec.kv_heads // tp) if spec.kv_heads >= tp else 1
        self.d = spec.head_dim
        self.q = nn.Linear(spec.hidden, self.h * self.d, bias=False)
        self.k = nn.Linear(spec.hidden, self.kv * self.d, bias=False)
        self.v = nn.Linear(spec.hidden, self.kv * self.d, bias=False)
        self.o = nn.Linear(self.h * self.d, spec.hidden, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv, self.d).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        o = _attention(q, k, v, self.window)
        return self.o(o.transpose(1, 2).reshape(b, s, self.h * self.d))


class LatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention: low-rank query and key/value projections, heads sharded."""

    def __init__(self, spec, tp):
        super().__init__()
        self.h = _div(spec.heads, tp, "attention heads")
        self.nope, self.rope, self.vd = spec.qk_nope_dim, spec.qk_rope_dim, spec.v_head_dim
        qk = self.nope + self.rope
        if spec.q_lora_rank:
            self.q_a = nn.Linear(spec.hidden, spec.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(spec.q_lora_rank)
            self.q_b = nn.Linear(spec.q_lora_rank, self.h * qk, bias=False)
        else:
            self.q_a = None
            self.q_b = nn.Linear(spec.hidden, self.h * qk, bias=False)
        self.kv_a = nn.Linear(spec.hidden, spec.kv_lora_rank + self.rope, bias=False)
        self.kv_norm = RMSNorm(spec.kv_lora_rank)
        self.kv_b = nn.Linear(spec.kv_lora_rank, self.h * (self.nope + self.vd), bias=False)
        self.o = nn.Linear(self.h * self.vd, spec.hidden, bias=False)
        self.kv_lora = spec.kv_lora_rank

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_b(self.q_norm(self.q_a(x))) if self.q_a is not None else self.q_b(x)
        q = q.view(b, s, self.h, self.nope + self.rope).transpose(1, 2)
        q_nope, q_rope = q[..., :self.nope], _rotate(q[..., self.nope:], cos, sin)
        kv = self.kv_a(x)
        c, k_rope = kv[..., :self.kv_lora], kv[..., self.kv_lora:]
        k_rope = _rotate(k_rope.unsqueeze(1), cos, sin).expand(b, self.h, s, self.rope)
        kvb = self.kv_b(self.kv_norm(c)).view(b, s, self.h, self.nope + self.vd).transpose(1, 2)
        k = torch.cat((kvb[..., :self.nope], k_rope), dim=-1)
        v = kvb[..., self.nope:]
        o = _attention(torch.cat((q_nope, q_rope), dim=-1), k, v)
        return self.o(o.transpose(1, 2).reshape(b, s, self.h * self.vd))


class MLP(nn.Module):
    def __init__(self, hidden, ffn, tp):
        super().__init__()
        f = _div(ffn, tp, "MLP intermediate size")
        self.gate = nn.Linear(hidden, f, bias=False)
        self.up = nn.Linear(hidden, f, bias=False)
        self.down = nn.Linear(f, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    """Routed experts (top-k of ``experts``) plus shared experts.  With expert parallelism ``ep`` a rank holds
    ``experts / ep`` experts and, after the all-to-all, processes its own tokens' share: ``tokens x top_k`` rows
    spread evenly over its experts (balanced routing, an assumption); expert matrices sharded over ``tp``."""

    def __init__(self, spec, tp, ep):
        super().__init__()
        self.e_local = _div(spec.experts, ep, "experts (by the expert-parallel degree)")
        self.top_k = spec.top_k
        self.experts = spec.experts
        f = _div(spec.moe_ffn, tp, "expert intermediate size")
        self.router = nn.Linear(spec.hidden, spec.experts, bias=False)
        self.w_gate = nn.Parameter(torch.empty(self.e_local, spec.hidden, f))
        self.w_up = nn.Parameter(torch.empty(self.e_local, spec.hidden, f))
        self.w_down = nn.Parameter(torch.empty(self.e_local, f, spec.hidden))
        self.shared = MLP(spec.hidden, spec.moe_ffn * spec.shared_experts, tp) if spec.shared_experts else None

    def forward(self, x):
        b, s, h = x.shape
        t = x.reshape(b * s, h)
        probs = torch.softmax(self.router(t).float(), dim=-1)
        w, idx = torch.topk(probs, self.top_k, dim=-1)
        rows = b * s * self.top_k
        order = torch.argsort(idx.reshape(-1))          # the routed rows grouped by expert
        tok = order // self.top_k                       # the token of each grouped row
        xs = t.index_select(0, tok)                     # dispatch (an all-to-all with expert parallelism)
        cap = -(-rows // self.e_local)                  # balanced routing: every local expert gets cap rows
        if cap * self.e_local != rows:
            xs = F.pad(xs, (0, 0, 0, cap * self.e_local - rows))
        xe = xs.reshape(self.e_local, cap, h)
        ye = torch.bmm(F.silu(torch.bmm(xe, self.w_gate)) * torch.bmm(xe, self.w_up), self.w_down)
        y = ye.reshape(-1, h)[:rows] * w.reshape(-1, 1).index_select(0, order).to(ye.dtype)
        out = torch.zeros_like(t).index_add(0, tok, y)  # combine
        if self.shared is not None:
            out = out + self.shared(t)
        return out.reshape(b, s, h)


def _seq(x, factor):
    """``x`` [b, s, h] resharded along the sequence over the tensor-parallel group: ``factor`` > 1 all-gathers
    (s * factor), < 1 reduce-scatters (s / factor ranks).  One ``trnsim_coll::seq_reshard`` op
    (``backend.seq_reshard``): no device work on the rank (its time is the collectives model's, charged by the
    estimator eagerly and by the compile backend's graph plan when compiled), traced by ``torch.compile`` into the
    layer's graph as one node, so a sequence-parallel layer is one graph too."""
    from ..backend.seq_reshard import seq_reshard
    if factor >= 1:
        return seq_reshard(x, int(round(factor)), True)
    return seq_reshard(x, int(round(1 / factor)), False)


def _define_reshard():
    """The reshard op defined before any trace (so ``torch.compile`` never traces its definition)."""
    from ..backend import seq_reshard
    seq_reshard.op()


class DecoderLayer(nn.Module):
    """One decoder layer on one tensor-parallel rank.  ``sp`` (sequence parallelism, Megatron-LM style): the
    norms and residual adds work on the rank's 1/tp of the sequence; the input of attention and of the MLP is
    all-gathered, their outputs reduce-scattered (instead of all-reduced)."""

    def __init__(self, spec, kind="dense", tp=1, ep=1, sp=False):
        super().__init__()
        window = spec.sliding_window if is_windowed(kind) else 0
        if window and spec.mla:
            raise ValueError(f"{spec.name}: a sliding window on latent attention is not modelled")
        self.norm1 = RMSNorm(spec.hidden)
        self.attn = LatentAttention(spec, tp) if spec.mla else Attention(spec, tp, window)
        self.norm2 = RMSNorm(spec.hidden)
        self.mlp = MoE(spec, tp, ep) if mlp_kind(kind) == "moe" else MLP(spec.hidden, spec.ffn, tp)
        self.sp = tp if (sp and tp > 1) else 0
        if self.sp:
            _define_reshard()
        if window:                      # defined before any trace, as the reshard
            from ..backend import window_attention
            window_attention.op()

    def forward(self, x, cos, sin):
        if not self.sp:
            x = x + self.attn(self.norm1(x), cos, sin)
            return x + self.mlp(self.norm2(x))
        k = self.sp
        x = x + _seq(self.attn(_seq(self.norm1(x), k), cos, sin), 1 / k)
        return x + _seq(self.mlp(_seq(self.norm2(x), k)), 1 / k)


class LMHead(nn.Module):
    """The final norm, the vocabulary projection (sharded over ``tp``) and the cross-entropy loss."""

    def __init__(self, spec, tp, sp=False):
        super().__init__()
        self.norm = RMSNorm(spec.hidden)
        self.proj = nn.Linear(spec.hidden, _div(spec.vocab, tp, "vocabulary") if spec.vocab % tp == 0
                              else -(-spec.vocab // tp), bias=False)
        self.sp = tp if (sp and tp > 1) else 0
        if self.sp:
            _define_reshard()

    def forward(self, x, labels):
        h = self.norm(x)
        if self.sp:                      # the final norm on the rank's part of the sequence, then all-gathered
            h = _seq(h, self.sp)
        logits = self.proj(h).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
