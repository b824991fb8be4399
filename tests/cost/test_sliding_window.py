"""Sliding-window layers in the estimator: which layers a config windows, their layer kind, their run (the windowed
attention kernel in place of the causal one, nothing else changed) and the pipeline stage they make up."""

import dataclasses

import pytest

from trnsim.backend import costs
from trnsim.cost import estimator as E
from trnsim.cost.models import ModelSpec, load_model, spec_from_config
from trnsim.cost.step import layer_cost
from trnsim.targets import get_target


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


BASE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
            intermediate_size=512, vocab_size=2048)
TINY_W = ModelSpec(name="tiny-window", hidden=256, layers=4, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048,
                   sliding_window=128, windowed=(0, 1))


def test_gpt_oss_alternates_windowed_and_full_layers():
    spec = load_model("gpt-oss-120b")
    assert spec.sliding_window == 128 and spec.windowed == tuple(range(0, 36, 2))
    assert spec.layer_kinds() == [("moe/window", 18), ("moe", 18)]
    assert spec.stages(4)[:2] == [{"moe/window": 5, "moe": 4}, {"moe": 5, "moe/window": 4}]
    assert spec.params == pytest.approx(117e9, rel=0.02)       # the window changes no parameter


def test_configs_window_the_layers_transformers_windows():
    # Mistral: a window on every layer; Qwen2/3: none unless use_sliding_window, then from max_window_layers
    assert spec_from_config(dict(BASE, sliding_window=4096)).windowed == (0, 1, 2, 3)
    assert spec_from_config(dict(BASE, sliding_window=4096, use_sliding_window=False)).sliding_window == 0
    s = spec_from_config(dict(BASE, sliding_window=64, use_sliding_window=True, max_window_layers=2))
    assert (s.sliding_window, s.windowed) == (64, (2, 3))
    s = spec_from_config(dict(BASE, sliding_window=64, layer_types=["full_attention", "sliding_attention"] * 2))
    assert s.windowed == (1, 3) and s.layer_kinds() == [("dense", 2), ("dense/window", 2)]
    assert spec_from_config(dict(BASE, sliding_window=None)).layer_kinds() == [("dense", 4)]
    with pytest.raises(ValueError, match="layer_types has 2 entries for 4 layers"):
        spec_from_config(dict(BASE, sliding_window=64, layer_types=["sliding_attention"] * 2))


def test_transformers_configs_are_read_as_transformers_reads_them():
    transformers = pytest.importorskip("transformers")
    g = spec_from_config(transformers.GptOssConfig(num_hidden_layers=4))
    assert (g.sliding_window, g.windowed) == (128, (0, 2))
    q = spec_from_config(transformers.Qwen3Config(num_hidden_layers=4))
    assert q.sliding_window == 0 and q.layer_kinds() == [("dense", 4)]


def test_a_windowed_layer_differs_by_its_attention_kernel_only():
    """The windowed layer's run is the causal layer's run with the attention forward and backward charged the
    windowed kernel (``costs.attention_cost(window=)``) instead of the causal one."""
    seq = 1024
    full = layer_cost(TINY_W, "dense", micro_batch=1, seq=seq, target="trn2")
    win = layer_cost(TINY_W, "dense/window", micro_batch=1, seq=seq, target="trn2")
    tg = get_target("trn2")
    heads = TINY_W.heads
    c = costs.attention_cost(tg, heads, seq, seq, TINY_W.head_dim, "bfloat16", causal=True)
    w = costs.attention_cost(tg, heads, seq, seq, TINY_W.head_dim, "bfloat16", causal=True, window=128)
    assert w[0] < c[0]
    assert full.fwd_ns - win.fwd_ns == pytest.approx(c[0] - w[0], rel=1e-9)
    assert full.bwd_ns - win.bwd_ns == pytest.approx(costs.ATTN_BWD_RATIO * (c[0] - w[0]), rel=1e-9)


def test_the_pipeline_stage_is_the_slowest_run_of_consecutive_layers():
    """Layers 0 and 1 windowed: with two stages the second (two full layers) is the slowest, so a stage's
    compute is two full layers', not one of each."""
    seq = 1024
    e = E.estimate(TINY_W, "trn2.48xlarge", tp=1, pp=2, seq=seq, global_batch=64)
    nowin = E.estimate(dataclasses.replace(TINY_W, sliding_window=0, windowed=()), "trn2.48xlarge", tp=1, pp=2,
                       seq=seq, global_batch=64)
    # the slowest stage holds the two full layers in both models: the same compute
    assert e.breakdown["compute: tensor engine"] == pytest.approx(nowin.breakdown["compute: tensor engine"],
                                                                  rel=1e-12)
    one = E.estimate(TINY_W, "trn2.48xlarge", tp=1, pp=1, seq=seq, global_batch=64)
    one_nowin = E.estimate(dataclasses.replace(TINY_W, sliding_window=0, windowed=()), "trn2.48xlarge", tp=1,
                           pp=1, seq=seq, global_batch=64)
    assert one.step_time_s < one_nowin.step_time_s         # one stage: the windowed layers count
