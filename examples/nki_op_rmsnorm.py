"""An RMSNorm NKI kernel (forward and backward) registered as a PyTorch operator with ``nki_op`` and trained inside a
small transformer block on the simulated ``neuron`` device, against the same block with PyTorch's RMSNorm.

    TORCHNEURON_TARGET=sim python examples/nki_op_rmsnorm.py [--steps N] [--trace out.json]

Prints both loss curves and the profile of the last training step (the ``nki::`` rows are the kernels); with
``--trace`` writes a Chrome/Perfetto trace whose second process row holds the kernels' instructions per engine and
DMA queue, with their source lines.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import trnsim

trnsim.install_nki()       # `import nki` is trnsim's (automatic under TORCHNEURON_TARGET=sim)

import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

try:                        # under TORCHNEURON_TARGET=sim without the real package: trnsim's stand-in
    from torch_neuronx import nki_op
except ImportError:         # run without the env var: the same stand-in, imported by its own name
    from trnsim.backend.neuronx_standin import nki_op

EPS = 1e-6


def _row_rstd(t, rows, cols):
    """[rows, 1] fp32 tile of 1 / sqrt(mean(t^2) + EPS) for an SBUF tile ``t`` [rows, cols]."""
    sq = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
    ssum = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(sq, "square", t, reduce_op="add", reduce_res=ssum)
    ms = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(ms, ssum, "multiply", 1.0 / cols, op1="add", operand1=EPS)
    rstd = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(rstd, "rsqrt", ms)
    return rstd


@nki.jit
def rmsnorm_fwd(x, w):
    """y = x / rms(x) * w for x [R, C]; w [P, C] is the weight row repeated over P = min(R, 128) partitions (the
    caller passes a stride-0 view)."""
    R, C = x.shape
    P = nl.tile_size.pmax
    y = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    wp = min(R, P)
    tw = nl.ndarray((wp, C), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(tw, w[0:wp, :])
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        t = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, :])
        rstd = _row_rstd(t, p, C)
        xh = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(xh, t, "multiply", rstd)
        res = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(res, xh, tw[0:p, :], op="multiply")
        nisa.dma_copy(y[r0:r0 + p, :], res)
    return y


@nki.jit
def rmsnorm_bwd(x, w, dy):
    """dx = rstd * (g - xh * mean(g * xh)) with xh = x * rstd, g = dy * w; also dy * xh per row (its sum over rows
    is the weight's gradient).  Shapes as in :func:`rmsnorm_fwd`."""
    R, C = x.shape
    P = nl.tile_size.pmax
    dx = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    dwr = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.shared_hbm)
    wp = min(R, P)
    tw = nl.ndarray((wp, C), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(tw, w[0:wp, :])
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        t = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        g = nl.ndarray((p, C), dtype=dy.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, :])
        nisa.dma_copy(g, dy[r0:r0 + p, :])
        rstd = _row_rstd(t, p, C)
        xh = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(xh, t, "multiply", rstd)
        part = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(part, g, xh, op="multiply")
        nisa.dma_copy(dwr[r0:r0 + p, :], part)
        gw = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(gw, g, tw[0:p, :], op="multiply")
        prod = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        dot = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(prod, gw, xh, op="multiply")
        nisa.activation(prod, "copy", prod, reduce_op="add", reduce_res=dot)
        m = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(m, dot, "multiply", 1.0 / C)
        corr = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(corr, xh, "multiply", m)
        nisa.tensor_tensor(corr, gw, corr, op="subtract")
        res = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(res, corr, "multiply", rstd)
        nisa.dma_copy(dx[r0:r0 + p, :], res)
    return dx, dwr


def _rows(x):
    return x.reshape(-1, x.shape[-1])


def _wide(w, rows):
    return w.unsqueeze(0).expand(min(rows, 128), w.shape[0])      # a stride-0 view: no copy on the host side


@nki_op("examples::rmsnorm", mutates_args=())
def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x2 = _rows(x)
    return rmsnorm_fwd(x2, _wide(w, x2.shape[0])).reshape(x.shape)


@rmsnorm.register_fake
def _(x, w):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy):
    x, w = ctx.saved_tensors
    x2 = _rows(x)
    dx, dwr = rmsnorm_bwd(x2, _wide(w, x2.shape[0]), _rows(dy.contiguous()))
    return dx.reshape(x.shape), dwr.sum(0).to(w.dtype)


rmsnorm.register_autograd(_backward, setup_context=_setup)


class RMSNorm(nn.Module):
    def __init__(self, dim, use_kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.use_kernel = use_kernel

    def forward(self, x):
        if self.use_kernel:
            return rmsnorm(x, self.weight)
        return F.rms_norm(x, (x.shape[-1],), self.weight, EPS)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a SiLU MLP."""

    def __init__(self, dim=64, heads=4, use_kernel=True):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(dim, use_kernel), RMSNorm(dim, use_kernel)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.down(F.silu(self.up(self.n2(x))))


def train(model, device, steps, batch=4, seq=32, dim=64, profile=None):
    """AdamW on a fixed synthetic regression task; returns the losses (the last step profiled into ``profile``)."""
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(batch, seq, dim, generator=g), torch.randn(batch, seq, dim, generator=g))
            for _ in range(steps)]
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for i, (x, y) in enumerate(data):
        ctx = trnsim.profile_torch() if (profile is not None and i == steps - 1) else None
        if ctx is not None:
            p = ctx.__enter__()
        opt.zero_grad()
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if ctx is not None:
            ctx.__exit__(None, None, None)
            profile.append(p)
    return losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--trace", help="write the last step's Chrome/Perfetto trace here")
    args = ap.parse_args(argv)
    from trnsim import backend
    backend.register()
    torch.manual_seed(0)
    ref_model = Block(use_kernel=False)
    dev_model = Block(use_kernel=True)
    dev_model.load_state_dict(ref_model.state_dict())
    prof = []
    dev = train(dev_model, "neuron", args.steps, profile=prof)
    ref = train(ref_model, "cpu", args.steps)
    print("step  neuron+nki_op  pytorch(cpu)  rel.diff")
    for i, (a, b) in enumerate(zip(dev, ref)):
        print(f"{i:4d}  {a:13.6f}  {b:12.6f}  {abs(a - b) / abs(b):.2e}")
    print(prof[0].summary(top=12))
    if args.trace:
        prof[0].to_chrome_trace(args.trace)
        print(f"trace written to {args.trace}")
    return dev, ref


if __name__ == "__main__":
    main()
