"""The estimator's claims, each against the model it says it implements."""

import json
import math

import pytest
import torch

from trnsim.cost import estimator as E
from trnsim.cost.models import ModelSpec, load_model
from trnsim.cost.step import head_cost, layer_cost

@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


TINY = ModelSpec(name="tiny", hidden=256, layers=4, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)
TINY_MOE = ModelSpec(name="tiny-moe", hidden=256, layers=2, heads=8, kv_heads=8, head_dim=32, ffn=512,
                     vocab=2048, experts=8, top_k=2, moe_ffn=128)
SEQ = 256


def est(**kw):
    kw.setdefault("seq", SEQ)
    return E.estimate(TINY, "trn2.48xlarge", **kw)


def test_builtin_parameter_counts_match_the_published_sizes():
    # published totals: Llama 3 8B / 70B, Qwen3-32B (32.8B), gpt-oss-120b (117B), DeepSeek-V3 (671B, 37B active)
    for name, total in (("llama3-8b", 8.03e9), ("llama3-70b", 70.6e9), ("qwen3-32b", 32.8e9),
                        ("gpt-oss-120b", 117e9), ("deepseek-v3", 671e9)):
        assert load_model(name).params == pytest.approx(total, rel=0.02), name
    assert load_model("deepseek-v3").active_params == pytest.approx(37.5e9, rel=0.03)


def test_estimates_are_deterministic():
    a, b = est(tp=4, global_batch=64), est(tp=4, global_batch=64)
    assert a.to_json() == b.to_json()


def test_breakdown_adds_up_and_compute_comes_from_the_layer_runs():
    e = est(tp=4, global_batch=64)
    assert sum(e.breakdown.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    par = e.parallelism
    mbs = e.global_batch // (par.dp * par.micro_batch)
    c = layer_cost(TINY, "dense", tp=4, micro_batch=1, seq=SEQ, target="trn2", sp=True)   # sequence parallel
    h = head_cost(TINY, tp=4, micro_batch=1, seq=SEQ, target="trn2", sp=True)
    per_mb = (TINY.layers * (c.fwd_ns + c.bwd_ns) + h.fwd_ns + h.bwd_ns) / 2 * 1e-9    # LNC=2: two cores
    compute = sum(v for k, v in e.breakdown.items() if k.startswith("compute") or k in ("launch overhead",
                                                                                        "fallbacks"))
    assert compute == pytest.approx(mbs * per_mb, rel=1e-6)


def test_doubling_dp_halves_compute_per_rank_and_adds_the_gradient_all_reduce():
    one = E.estimate(TINY, "trn2.48xlarge", 1, tp=4, fsdp=False, seq=SEQ, global_batch=256)
    two = E.estimate(TINY, "trn2.48xlarge", 2, tp=4, fsdp=False, seq=SEQ, global_batch=256)
    assert two.parallelism.dp == 2 * one.parallelism.dp
    c1 = one.breakdown["compute: tensor engine"]
    c2 = two.breakdown["compute: tensor engine"]
    assert c2 == pytest.approx(c1 / 2, rel=1e-9)
    # the gradient all-reduce over the data-parallel group: exposed only beyond the backward it overlaps
    assert "dp gradient all_reduce" in two.collectives
    assert two.tokens_per_s > one.tokens_per_s


def test_tensor_parallelism_moves_time_from_compute_to_collectives():
    t1 = est(tp=1, global_batch=64)
    t8 = est(tp=8, global_batch=64, sequence_parallel=False)
    comp = lambda e: e.breakdown["compute: tensor engine"]       # noqa: E731
    assert "comm: tp all_reduce" not in t1.breakdown
    assert t8.breakdown["comm: tp all_reduce"] > 0
    sp8 = est(tp=8, global_batch=64)                             # sequence parallel (the default)
    assert sp8.breakdown["comm: tp all_gather/reduce_scatter (sequence parallel)"] > 0
    assert sp8.breakdown["compute: vector/scalar/dma"] < t8.breakdown["compute: vector/scalar/dma"]
    # per rank, 8-way TP does 1/8 of the matmul work of each micro-batch, but 8x more micro-batches per rank
    assert comp(t8) < comp(t1) * 8


def test_pipeline_bubble_follows_1f1b():
    e = est(tp=1, pp=4, global_batch=64)
    par = e.parallelism
    m = e.global_batch // (par.dp * par.micro_batch)
    # (stages - 1) idle stage steps against the m stage steps of compute
    compute = sum(v for k, v in e.breakdown.items() if k.startswith("compute") or k == "launch overhead")
    assert e.breakdown["pipeline bubble"] == pytest.approx(compute * (4 - 1) / m, rel=1e-9)
    # and every micro-batch step, bubble included, sends activations forward and gradients back
    assert e.breakdown["comm: pp send/recv"] > 0


def test_out_of_memory_is_reported_with_the_numbers():
    big = load_model("llama3-70b")
    e = E.estimate(big, "trn2.48xlarge", 1, tp=1, pp=1, fsdp=False, seq=512, global_batch=64)
    assert not e.fits
    note = e.notes[-1]
    assert "does not fit: needs" in note and "GiB per rank, has 24.0 GiB" in note
    assert e.hbm_per_rank_bytes > e.hbm_capacity_bytes
    # 70.6B parameters in bf16 alone exceed one rank's 24 GiB
    assert e.memory["weights (bf16)"] == pytest.approx(2 * big.params, rel=0.01)


def test_mfu_matches_the_hand_calculation():
    e = est(tp=4, global_batch=64)
    tokens = e.global_batch * e.seq
    peak = 64 * 2 * 128 * 128 * 2 * 2.4e9          # 64 ranks of LNC=2 x 79 TFLOPS per physical core
    flops = 6 * (TINY.active_params - TINY.vocab * TINY.hidden) * tokens + \
        12 * TINY.layers * TINY.heads * TINY.head_dim * SEQ * tokens
    assert e.mfu == pytest.approx(flops / (e.step_time_s * peak), rel=1e-9)


def test_mixture_of_experts_with_expert_parallelism_pays_all_to_all():
    e = E.estimate(TINY_MOE, "trn2.48xlarge", 1, tp=1, ep=8, seq=SEQ, global_batch=64)
    assert e.breakdown["comm: ep all_to_all"] > 0
    assert e.memory["weights (bf16)"] < E.estimate(TINY_MOE, "trn2.48xlarge", 1, tp=1, ep=1, seq=SEQ,
                                                   global_batch=64).memory["weights (bf16)"]


def test_unknown_price_still_gets_time_and_a_note(tmp_path):
    e = est(tp=4, global_batch=64)
    assert e.usd_per_hour is None and "no price known for trn2.48xlarge" in e.price_note
    prices = tmp_path / "p.json"
    prices.write_text(json.dumps({"rows": [{"instance": "trn2.48xlarge", "usd_per_hour": 40.0,
                                            "source": "test", "retrieved": "today"}]}))
    p = E.estimate(TINY, "trn2.48xlarge", tp=4, seq=SEQ, global_batch=64, prices=str(prices))
    assert p.usd_per_step == pytest.approx(40.0 * p.step_time_s / 3600)
    assert p.usd_per_billion_tokens == pytest.approx(40.0 * 1e9 / p.tokens_per_s / 3600)


def test_bad_parallelism_is_refused_clearly():
    with pytest.raises(ValueError, match="dp x tp x pp x cp = 24, but 1 x trn2.48xlarge has 64 ranks"):
        est(dp=3, tp=8)
    with pytest.raises(ValueError, match="ep=2: needs a mixture-of-experts model"):
        est(tp=4, ep=2)


def test_estimate_agrees_with_a_whole_step_of_the_model_on_the_shape_only_device():
    """The estimator composes per-layer runs; a whole forward+backward of the same small model (all layers and
    the head in one graph) run on the shape-only device must take the same simulated time."""
    from trnsim.backend.device_state import STATE
    from trnsim.backend.shape_only import device_target, materialize_shape_only, shape_only_tensor
    from trnsim.cost.layers import DecoderLayer, LMHead

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(DecoderLayer(TINY) for _ in range(TINY.layers))
            self.head = LMHead(TINY, 1)

        def forward(self, x, cos, labels):
            for layer in self.layers:
                x = layer(x, cos, cos)
            return self.head(x, labels)

    with torch.device("meta"):
        m = Model().to(torch.bfloat16)
    materialize_shape_only(m)
    with device_target("trn2"):
        x = shape_only_tensor((1, SEQ, TINY.hidden), torch.bfloat16, requires_grad=True)
        cos = shape_only_tensor((SEQ, TINY.head_dim), torch.bfloat16)
        labels = shape_only_tensor((1, SEQ), torch.int64)
        t0 = STATE.now_ns
        m(x, cos, labels).backward()
        whole = STATE.now_ns - t0
    c = layer_cost(TINY, "dense", tp=1, micro_batch=1, seq=SEQ, target="trn2")
    h = head_cost(TINY, tp=1, micro_batch=1, seq=SEQ, target="trn2")
    composed = TINY.layers * (c.fwd_ns + c.bwd_ns) + h.fwd_ns + h.bwd_ns
    # the per-layer runs end with a .float().sum() loss the whole model does not have: a few small ops
    assert composed == pytest.approx(whole, rel=0.05)
    assert math.isfinite(whole) and whole > 0
