"""Causal attention with a sliding window as one operator: ``trnsim_attn::sliding_window_attention`` and its backward,
``torch.library`` custom ops, so that the device charges them as the fused attention kernel with the window
(``costs.attention_cost(..., window=)``: the key tiles outside each query tile's window skipped) and ``torch.compile``
traces each into a graph as one node (compile ``ops.kind``: an opaque kernel, charged what eager charges).

``sliding_window_attention(q, k, v, window)``: ``q[..., L, D]``, ``k[..., S, D]``, ``v[..., S, Dv]``; query ``i``
attends to keys ``i - window < j <= i`` (Hugging Face's ``sliding_window_causal_mask_function``: the causal mask,
top-left aligned as torch's ``is_causal``, and at most ``window`` keys, itself included).  The values on any device
are those of torch's scaled dot-product attention with that boolean mask (default scale ``D ** -0.5``); the backward
is its gradient.  A Trainium kernel with the same contract: nki-library's ``attention_cte`` (``sliding_window``,
causal only) and ``attention_bwd``.
"""

from __future__ import annotations

import torch

__all__ = ["sliding_window_attention", "op", "NAMESPACE", "FORWARD", "BACKWARD"]

NAMESPACE = "trnsim_attn"
FORWARD = "sliding_window_attention"
BACKWARD = "sliding_window_attention_backward"
_OPS = []


def _check(q, k, v, window):
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"sliding_window_attention: q, k, v must have the same rank (at least 2), got shapes "
                         f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if k.shape[-1] != q.shape[-1] or k.shape[-2] != v.shape[-2] or k.shape[:-2] != q.shape[:-2] \
            or v.shape[:-2] != q.shape[:-2]:
        raise ValueError(f"sliding_window_attention: shapes q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} "
                         "do not match [..., L, D], [..., S, D], [..., S, Dv]")
    if int(window) < 1:
        raise ValueError(f"sliding_window_attention: window {window}: a window keeps at least 1 key (the query's own)")
    L, S = q.shape[-2], k.shape[-2]
    if L > S + int(window) - 1:
        raise ValueError(f"sliding_window_attention: query rows from {S + int(window) - 1} of {L} keep no key (keys "
                         f"end at {S}, the window is {window})")


def _mask(L, S, window, device):
    i = torch.arange(L, device=device).unsqueeze(1)
    j = torch.arange(S, device=device).unsqueeze(0)
    return (j <= i) & (j > i - int(window))


def _reference(q, k, v, window):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=_mask(q.shape[-2], k.shape[-2], window,
                                                                                     q.device))


def _out_like(q, v):
    """An empty output ``[..., L, Dv]``; for ``[B, H, L, D]`` laid out as token rows ``[B, L, H, Dv]`` (torch's
    flash attention writes its output so, and a kernel writes the rows the output projection reads), so that the
    caller's ``transpose(1, 2).reshape(B, L, H * Dv)`` is a view, as after ``scaled_dot_product_attention``."""
    if q.dim() != 4:
        return q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    B, H, L, _ = q.shape
    return q.new_empty((B, L, H, v.shape[-1])).transpose(1, 2)


def _gradients(grad, q, k, v, window):
    """``(dq, dk, dv)`` of the masked attention (FlashAttention's backward, Dao et al. 2022, Algorithm 4, with the
    probabilities recomputed whole): ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P (dP - rowsum(dP P))``,
    ``dQ = scale dS K``, ``dK = scale dS^T Q``; in fp32 (each result rounded once to its input's dtype)."""
    f = [t.float() for t in (grad, q, k, v)]
    g, qf, kf, vf = f
    scale = q.shape[-1] ** -0.5
    s = (qf @ kf.transpose(-1, -2)) * scale
    s = s.masked_fill(~_mask(q.shape[-2], k.shape[-2], window, q.device), float("-inf"))
    p = torch.softmax(s, dim=-1)
    dv = p.transpose(-1, -2) @ g
    dp = g @ vf.transpose(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = (ds @ kf) * scale
    dk = (ds.transpose(-1, -2) @ qf) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def op():
    """``(forward, backward)`` custom ops, defined on first use."""
    if not _OPS:
        _OPS.extend(_define())
    return _OPS[0]


def sliding_window_attention(q, k, v, window: int):
    """``softmax(q k^T / sqrt(D) + mask) v`` with the sliding-window causal mask (module docstring)."""
    _check(q, k, v, window)
    return op()(q, k, v, int(window))


def _define():
    from . import registration  # noqa: F401  -- the neuron device name, for register_kernel
    from .tensor import dispatch

    @torch.library.custom_op(f"{NAMESPACE}::{FORWARD}", mutates_args=())
    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
        _check(q, k, v, window)
        out = _out_like(q, v)
        out.copy_(_reference(q, k, v, window))
        return out

    @forward.register_fake
    def _fake(q, k, v, window):
        _check(q, k, v, window)
        return _out_like(q, v)

    @torch.library.custom_op(f"{NAMESPACE}::{BACKWARD}", mutates_args=())
    def backward_op(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _gradients(grad, q, k, v, window)

    @backward_op.register_fake
    def _fake_bw(grad, q, k, v, window):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup(ctx, inputs, output):
        q, k, v, window = inputs
        ctx.save_for_backward(q, k, v)
        ctx.window = window

    def backward(ctx, g):
        q, k, v = ctx.saved_tensors
        dq, dk, dv = backward_op(g, q, k, v, ctx.window)
        return dq, dk, dv, None

    forward.register_autograd(backward, setup_context=setup)

    # on the device, each op goes through the device's dispatch as a native op (the op table's "sdpa" and
    # "backward:sdpa": the values on the payloads, the charge of the fused kernel), not through its composite
    # implementation, whose aten ops the device would run and charge one by one
    @forward.register_kernel("neuron")
    def _neuron(q, k, v, window):
        return dispatch(torch.ops.trnsim_attn.sliding_window_attention.default, (q, k, v, window), {})

    @backward_op.register_kernel("neuron")
    def _neuron_bw(grad, q, k, v, window):
        return dispatch(torch.ops.trnsim_attn.sliding_window_attention_backward.default, (grad, q, k, v, window), {})
    return forward, backward_op
