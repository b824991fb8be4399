"""FlexAttention on the neuron device (block masks and score mods), eager and compiled with backend="neuron",
forward and backward, against a dense float64 reference (the materialised mask and score mod)."""

import math

import pytest
import torch

import trnsim.backend.compile  # noqa: F401  (applies the FlexAttention device support, as torch.compile does)
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

B, H, S, D = 1, 2, 32, 8
WINDOW, PREFIX = 6, 10
DOC = torch.tensor([0] * 12 + [1] * 9 + [2] * 11)                  # document id of each position
SLOPES = torch.tensor([2.0 ** -(h + 1) for h in range(H)])          # ALiBi slope per head
CAP = 2.0


def _mask_mods(doc):
    return {
        "causal": lambda b, h, q, k: q >= k,
        "sliding_window": lambda b, h, q, k: (q >= k) & (q - k <= WINDOW),
        "prefix_lm": lambda b, h, q, k: (k < PREFIX) | (q >= k),
        "document": lambda b, h, q, k: (doc[q] == doc[k]) & (q >= k),
    }


def _score_mods(slopes):
    return {
        "alibi": lambda s, b, h, q, k: s - slopes[h] * (q - k).abs(),
        "softcap": lambda s, b, h, q, k: CAP * torch.tanh(s / CAP),
    }


def _dense_reference(q, k, v, variant):
    """float64 attention with the mask / score mod materialised over every (q, k) position."""
    qi = torch.arange(S).view(S, 1)
    ki = torch.arange(S).view(1, S)
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(D)
    if variant in _mask_mods(DOC):
        m = _mask_mods(DOC)[variant](0, 0, qi, ki)
        s = s.masked_fill(~m, float("-inf"))
    elif variant == "alibi":
        s = s - SLOPES.double().view(1, H, 1, 1) * (qi - ki).abs()
    elif variant == "softcap":
        s = CAP * torch.tanh(s / CAP)
    return s.softmax(-1) @ v.double()


VARIANTS = ["causal", "sliding_window", "prefix_lm", "document", "alibi", "softcap"]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))


# a bounded fast slice (two block masks, two score mods, eager and compiled both covered); the rest of the 12
# combinations is marked slow
FAST = {("causal", False), ("document", True), ("alibi", True), ("softcap", False)}
CASES = [pytest.param(v, c, id=f"{v}-{'compiled' if c else 'eager'}",
                      marks=() if (v, c) in FAST else pytest.mark.slow) for v in VARIANTS for c in (False, True)]


@pytest.mark.parametrize("variant,compiled", CASES)
def test_flex_attention_variant(variant, compiled):
    g = torch.Generator().manual_seed(VARIANTS.index(variant))
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    go = torch.randn(B, H, S, D, generator=g)
    doc_d, slopes_d = DOC.to("neuron"), SLOPES.to("neuron")
    kwargs = {}
    if variant in _mask_mods(doc_d):
        kwargs["block_mask"] = create_block_mask(_mask_mods(doc_d)[variant], B, H, S, S, device="neuron",
                                                 BLOCK_SIZE=8)
    else:
        kwargs["score_mod"] = _score_mods(slopes_d)[variant]
        if compiled:
            # without a block mask the front end builds a full one inside the graph, with aten::sort, which the
            # device has no kernel for (the compile would fail naming it): build it outside, as on hardware
            kwargs["block_mask"] = create_block_mask(lambda b, h, q, k: q >= 0, B, H, S, S, device="neuron",
                                                     BLOCK_SIZE=8)

    def attn(q, k, v):
        return flex_attention(q, k, v, **kwargs)
    fn = torch.compile(attn, backend="neuron", fullgraph=True) if compiled else attn
    qd, kd, vd = (t.to("neuron").requires_grad_() for t in (q, k, v))
    out = fn(qd, kd, vd)
    assert out.device.type == "neuron"
    out.backward(go.to("neuron"))

    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    ref = _dense_reference(qr, kr, vr, variant)
    ref.backward(go.double())
    assert torch.allclose(out.detach().cpu().double(), ref.detach(), rtol=1e-5, atol=1e-5)
    for dev, r in ((qd, qr), (kd, kr), (vd, vr)):
        assert torch.allclose(dev.grad.cpu().double(), r.grad, rtol=1e-4, atol=1e-5)


def test_flex_attention_is_charged_as_attention():
    from trnsim import backend
    q, k, v = (torch.randn(B, H, S, D).to("neuron") for _ in range(3))
    with backend.profile_torch() as p:
        flex_attention(q, k, v, score_mod=_score_mods(SLOPES.to("neuron"))["softcap"])
    rows = [r for r in p.rows if r.op == "aten::flex_attention"]
    assert len(rows) == 1 and rows[0].duration_ns > 0 and rows[0].flops >= 4 * B * H * S * S * D
