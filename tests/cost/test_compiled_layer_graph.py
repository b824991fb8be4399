"""A compiled template layer of the estimator is one graph (issue 30): attention is traced into the layer's graph
as the one flash-attention node the compile backend keeps whole (``backend._KEEP_WHOLE``), not called between
graphs (a sequence-parallel layer is one graph too: tests/cost/test_seq_reshard.py).  The attention kernel inside a
compiled graph computes what a float64 reference computes."""

import math

import pytest
import torch

from trnsim.cost import layers, step
from trnsim.cost.models import ModelSpec
from trnsim.targets import get_target

GQA = ModelSpec(name="tiny-graph-gqa", hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32, ffn=512, vocab=2048)
MOE = ModelSpec(name="tiny-graph-moe", hidden=256, layers=2, heads=8, kv_heads=8, head_dim=32, ffn=512, vocab=2048,
                experts=8, top_k=2, moe_ffn=128, shared_experts=1)
MLA = ModelSpec(name="tiny-graph-mla", hidden=256, layers=2, heads=8, kv_heads=8, head_dim=32, ffn=512, vocab=2048,
                q_lora_rank=96, kv_lora_rank=64, qk_nope_dim=32, qk_rope_dim=16, v_head_dim=32)
SEQ = 256


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


def _compiled_layer(spec, kind, tp=1, sp=False):
    from torch._dynamo.utils import counters
    counters.clear()
    lc = step._run(*step._layer_job(spec, kind, tp, 1, 1, SEQ, torch.bfloat16, get_target("trn2"), "bf16", True,
                                    sp))
    return lc, counters["stats"]["unique_graphs"], dict(counters["graph_break"])


@pytest.mark.parametrize("spec,kind", [(GQA, "dense"), (MLA, "dense"), (MOE, "moe")],
                         ids=["gqa", "mla", "moe"])
def test_a_compiled_layer_is_one_graph(spec, kind, graphs):
    lc, unique, breaks = _compiled_layer(spec, kind)
    assert breaks == {} and unique == 1
    assert lc.graphs == 2                              # its forward and its backward
    fw = [g for g in graphs if g.name.startswith("forward")]
    bw = [g for g in graphs if g.name.startswith("backward")]
    assert len(fw) == len(bw) == 1
    # the attention kernel is inside them, whole
    assert [k["label"] for k in fw[0].plan["kernels"]].count("_scaled_dot_product_flash_attention_for_cpu") == 1
    assert [k["label"] for k in bw[0].plan["kernels"]].count(
        "_scaled_dot_product_flash_attention_for_cpu_backward") == 1


def _reference(attn, x, cos, sin):
    """The GQA block in float64 on the CPU, written out: projections, rotary, causal softmax(q k^T / sqrt(d)) v."""
    w = {n: p.detach().cpu().double() for n, p in attn.named_parameters()}
    b, s, _ = x.shape
    h, kv, d = attn.h, attn.kv, attn.d

    def rot(t):
        half = d // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin
    q = rot((x @ w["q.weight"].T).view(b, s, h, d).transpose(1, 2))
    k = rot((x @ w["k.weight"].T).view(b, s, kv, d).transpose(1, 2)).repeat_interleave(h // kv, dim=1)
    v = (x @ w["v.weight"].T).view(b, s, kv, d).transpose(1, 2).repeat_interleave(h // kv, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v
    return o.transpose(1, 2).reshape(b, s, h * d) @ w["o.weight"].T


def test_compiled_attention_numerics_against_float64(graphs, monkeypatch):
    monkeypatch.setenv("NEURON_CC_FLAGS", "--auto-cast none")   # fp32 matmuls as fp32
    torch._dynamo.reset()
    torch.manual_seed(0)
    spec = ModelSpec(name="tiny-num", hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=128)
    attn = layers.Attention(spec, 1)
    s = 24
    x = torch.randn(2, s, spec.hidden, dtype=torch.float64)
    ang = torch.arange(s, dtype=torch.float64)[:, None] * 0.1 * torch.arange(1, spec.head_dim + 1)[None, :]
    cos, sin = ang.cos(), ang.sin()
    g = torch.randn(2, s, spec.hidden, dtype=torch.float64)
    dev = attn.to("neuron")
    xd = x.float().to("neuron").requires_grad_(True)
    out = torch.compile(dev, backend="neuron")(xd, cos.float().to("neuron"), sin.float().to("neuron"))
    out.backward(g.float().to("neuron"))
    xr = x.clone().requires_grad_(True)
    ref = _reference(dev, xr, cos, sin)
    ref.backward(g)
    assert torch.allclose(out.detach().cpu().double(), ref, rtol=1e-4, atol=1e-5)
    assert torch.allclose(xd.grad.cpu().double(), xr.grad, rtol=1e-4, atol=1e-5)
    fw = [gr for gr in graphs if gr.name.startswith("forward")]
    assert len(fw) == 1 and any(k["label"] == "_scaled_dot_product_flash_attention_for_cpu"
                                for k in fw[0].plan["kernels"])
