"""An AWS nki-library kernel as a PyTorch operator in a model on ``neuron`` (issue 21): the RMSNorm kernel
``rmsnorm_tkg`` of the fetched snapshot (not copied into trnsim) registered with ``nki_op`` and used for both norms
of a small transformer block, trained a few steps; its loss curve equals the PyTorch reference's within bf16
tolerance.  Skips cleanly when the snapshot is absent (``NKI_LIBRARY_PATH`` unset or not a checkout)."""

import importlib
import math
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import trnsim
from trnsim import config
from trnsim.backend.neuronx_standin import nki_op

NKILIB = config.nki_library_path or ""
SRC = os.path.join(NKILIB, "src")
pytestmark = pytest.mark.skipif(not os.path.isfile(os.path.join(SRC, "nkilib_src", "nkilib", "core", "subkernels",
                                                                "rmsnorm_tkg.py")),
                                reason=f"AWS nki-library snapshot not found at {NKILIB} (set NKI_LIBRARY_PATH)")

B, S, H, HEADS = 2, 16, 256, 4
EPS = 1e-6


def _kernel():
    trnsim.install_nki()
    sys.path.insert(0, SRC)
    try:
        mod = importlib.import_module("nkilib_src.nkilib.core.subkernels.rmsnorm_tkg")
    finally:
        sys.path.remove(SRC)
    import nki
    return nki.jit(mod.rmsnorm_tkg)


_OP = {}


def _op():
    """``nkilib21::rmsnorm(x [B, S, H], gamma [H]) -> [B, S, H]``: the library kernel writes its LNC1 tile layout
    ``[128, B*S, H/128]`` (out[p, t, j] = y[t, p * H/128 + j]) into an output buffer; the op hands back [B, S, H].
    Backward: the RMSNorm gradient in PyTorch ops (the library has no RMSNorm backward kernel)."""
    if "op" in _OP:
        return _OP["op"]
    kernel = _kernel()

    @nki_op("nkilib21::rmsnorm", mutates_args=())
    def rmsnorm(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        out = x.new_empty((128, b * s, h // 128))
        kernel(x, gamma.reshape(1, h), out)
        return out.permute(1, 0, 2).reshape(b, s, h).contiguous()

    @rmsnorm.register_fake
    def _(x, gamma):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
        xh = x * r
        gw = (g * xh).sum(dim=(0, 1))
        gx = g * w
        dx = r * (gx - xh * (gx * xh).mean(-1, keepdim=True))
        return dx, gw
    rmsnorm.register_autograd(backward, setup_context=setup)
    _OP["op"] = rmsnorm
    return rmsnorm


class Norm(nn.Module):
    def __init__(self, use_kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))
        self.use_kernel = use_kernel

    def forward(self, x):
        if self.use_kernel:
            return _op()(x, self.weight)
        return F.rms_norm(x, (H,), self.weight, EPS)


class Block(nn.Module):
    def __init__(self, use_kernel):
        super().__init__()
        self.n1, self.n2 = Norm(use_kernel), Norm(use_kernel)
        self.qkv = nn.Linear(H, 3 * H, bias=False)
        self.proj = nn.Linear(H, H, bias=False)
        self.up = nn.Linear(H, 2 * H)
        self.down = nn.Linear(2 * H, H)

    def forward(self, x):
        q, k, v = self.qkv(self.n1(x)).split(H, dim=-1)
        q, k, v = (t.view(B, S, HEADS, H // HEADS).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, H))
        return x + self.down(F.silu(self.up(self.n2(x))))


def _train(model, device, steps=4):
    torch.manual_seed(1)
    xs = [torch.randn(B, S, H) for _ in range(steps)]
    ys = [torch.randn(B, S, H) for _ in range(steps)]
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_nkilib_rmsnorm_kernel_matches_float64():
    x = torch.randn(B, S, H)
    w = torch.randn(H)
    out = _op()(x.to("neuron"), w.to("neuron")).cpu().double()
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    assert (out - ref).abs().max() < 1e-4


def test_nkilib_rmsnorm_op_in_a_transformer_block_trains_like_pytorch():
    torch.manual_seed(0)
    ref_model = Block(use_kernel=False)
    dev_model = Block(use_kernel=True)
    dev_model.load_state_dict(ref_model.state_dict())
    with trnsim.profile_torch() as p:
        dev = _train(dev_model, "neuron")
    ref = _train(ref_model, "cpu")
    assert all(math.isfinite(v) for v in dev)
    assert dev[-1] < dev[0]                       # it learns
    # bf16 tolerance: relative 2**-7 (bf16's 8-bit significand; the device runs fp32, so this is loose)
    for a, b in zip(dev, ref):
        assert abs(a - b) <= 2 ** -7 * abs(b), (dev, ref)
    assert sum(1 for r in p.rows if r.op == "nki::rmsnorm_tkg") == 2 * 4
    assert trnsim.backend.fallback_counts() == {}
