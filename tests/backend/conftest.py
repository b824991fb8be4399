import pytest
import torch

from trnsim import backend


@pytest.fixture(autouse=True)
def _neuron_device():
    backend.register()
    backend.reset_fallback_counts()      # counts left by earlier tests in the same worker are not this test's
    prev = backend.set_fallback_mode("warn")
    yield
    backend.set_fallback_mode(prev)


@pytest.fixture
def fresh_compile(tmp_path, monkeypatch):
    """A compile cache in the test's own directory and dynamo's caches reset before and after the test."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tiny_decoder(vocab=64, dim=32, heads=4, layers=2, seq=16, seed=0):
    """A small decoder-only transformer: embedding, causal attention, SiLU MLP, RMSNorm, tied head."""
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = nn.RMSNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.proj = nn.Linear(dim, dim, bias=False)
            self.n2 = nn.RMSNorm(dim)
            self.up = nn.Linear(dim, 4 * dim)
            self.down = nn.Linear(4 * dim, dim)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.n1(x)).split(C, dim=-1)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
            return x + self.down(F.silu(self.up(self.n2(x))))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.pos = nn.Parameter(torch.zeros(seq, dim))
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(dim)

        def forward(self, idx):
            x = self.emb(idx) + self.pos[: idx.shape[1]]
            for b in self.blocks:
                x = b(x)
            return self.norm(x) @ self.emb.weight.t()      # tied head

    torch.manual_seed(seed)
    return Decoder()


@pytest.fixture
def pytester(request, tmp_path_factory, monkeypatch):
    """pytest's own ``pytester`` (enabled here without a root-level ``pytest_plugins``)."""
    from _pytest.pytester import Pytester
    if not hasattr(request.config.option, "runpytest"):        # the option the pytester plugin would add
        monkeypatch.setattr(request.config.option, "--runpytest", "inprocess", raising=False)
    return Pytester(request, tmp_path_factory, monkeypatch, _ispytest=True)
