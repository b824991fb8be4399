"""Small models and an op-perturbing dispatch mode for the difftest tests (importable by spawned ranks)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


class Block(nn.Module):
    def __init__(self, dim, heads, attn=True):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.n1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.n2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        if not self.attn:
            return x + self.down(F.gelu(self.up(self.n2(x))))
        q, k, v = self.qkv(self.n1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=32, dim=16, heads=2, layers=2, attn=True):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, attn) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def tiny_lm(seed=0, **kw):
    torch.manual_seed(seed)
    return TinyLM(**kw)


def mlp(seed=0, dim=8):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(dim, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))


def forward_backward(model, idx):
    """The function the replay tests record and replay."""
    out = model(idx)
    return out


def linear_gelu(x, w, b):
    """A plain function of tensors (recorded with rec.call, replayed by import path)."""
    return F.gelu(x @ w.t() + b)


def linear_gelu_wrong(x, w, b):
    return F.gelu(x @ w.t() + b * 1.01)


class PerturbOp(TorchDispatchMode):
    """Multiply the outputs of aten op ``op`` by ``1 + rel`` while ``module`` runs its forward: an injected error in
    one layer.  Enter it before the recording (so the recorder sees the perturbed values)."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False

    def __init__(self, module, op="aten.addmm.default", rel=1e-2):
        super().__init__()
        self.op, self.rel, self.inside, self.hits = op, rel, False, 0
        self._h = [module.register_forward_pre_hook(lambda m, a: setattr(self, "inside", True)),
                   module.register_forward_hook(lambda m, a, o: setattr(self, "inside", False))]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.inside and str(func) == self.op:
            out.mul_(1 + self.rel)
            self.hits += 1
        return out

    def __exit__(self, *exc):
        for h in self._h:
            h.remove()
        return super().__exit__(*exc)


_LOW = (torch.bfloat16, torch.float16)


class Float64Ops(TorchDispatchMode):
    """Every op with bfloat16/float16 operands computed in float64 and rounded once to its output dtype: a host
    independent reference for low-precision runs (the CPU's own bf16 kernels differ by instruction set: a fused
    attention kernel with AVX-512 BF16 rounds at other steps than the AVX2 one).  Views and in-place ops run as
    they are (they keep aliasing; in-place ops of this model are exact copies and additions).  Enter it before the
    recording, as :class:`PerturbOp`."""

    @classmethod
    def _should_skip_dynamo(cls):
        return False

    def __init__(self):
        super().__init__()
        self.hits = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        low = any(isinstance(t, torch.Tensor) and t.dtype in _LOW for t in leaves)
        sch = func._schema
        if not low or sch.is_mutable or any(r.alias_info is not None for r in sch.returns):
            return func(*args, **kwargs)
        to = torch.utils._pytree.tree_map
        meta = func(*to(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, (args, kwargs))[0],
                    **to(lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, kwargs))
        wide = to(lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                  (args, kwargs))
        out = func(*wide[0], **wide[1])
        self.hits += 1
        return to(lambda o, m: o.to(m.dtype) if isinstance(o, torch.Tensor) else o, out, meta) \
            if isinstance(out, (tuple, list)) else (out.to(meta.dtype) if isinstance(out, torch.Tensor) else out)
