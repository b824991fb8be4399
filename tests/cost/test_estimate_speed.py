"""The speed paths of a cold estimate change no number (issue 30): the per-process memo of shape-only kernel
launches (``costs._sim``) gives the costs a run without it gives, and a compiled pointwise kernel of many column
chunks, extrapolated from 4 and 8 chunks, matches its whole simulation."""

import dataclasses

import numpy as np
import pytest
import torch

from trnsim.backend import costs
from trnsim.backend.compile import costing
from trnsim.cost import step
from trnsim.cost.models import ModelSpec

SPEC = ModelSpec(name="tiny-sims", hidden=384, layers=2, heads=6, kv_heads=2, head_dim=64, ffn=1024, vocab=4096)


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


def _fresh():
    step._MEMO.clear()
    step._SEEN.clear()
    costs.clear_memo()
    costing.clear_memo()


def _layer_and_head(compiled):
    kw = dict(tp=2, micro_batch=2, seq=256, dtype=torch.bfloat16, target="trn2", compiled=compiled, sp=True)
    return step.layer_cost(SPEC, "dense", **kw), step.head_cost(SPEC, **kw)


@pytest.fixture
def launches(monkeypatch):
    """The number of shape-only launches simulated (memo hits not counted)."""
    n = []
    orig = costs._simulate
    monkeypatch.setattr(costs, "_simulate", lambda *a, **k: n.append(1) or orig(*a, **k))
    return n


def _no_memo(monkeypatch):
    monkeypatch.setattr(costs, "_sim_key", lambda *a: None)       # every launch simulated, none remembered


def _assert_equal(a, b):
    """Equal, up to the rounding of the device clock's absolute time in a layer's differences."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x == (pytest.approx(y, rel=1e-12) if isinstance(y, float) else y), f.name


def test_attention_costs_share_their_group_launches_and_equal_a_run_without_the_memo(launches, monkeypatch):
    from trnsim.targets import TRN2

    def run():
        # 8, 12 and 16 heads in groups of 3: each extrapolated from the same one- and two-group launches
        return [costs.attention_cost(TRN2, h, 512, 512, 64, "bfloat16") for h in (8, 12, 16)]
    _fresh()
    with_memo, n_memo = run(), len(launches)
    _fresh()
    _no_memo(monkeypatch)
    without = run()
    _fresh()
    assert (n_memo, len(launches) - n_memo) == (2, 6)
    assert with_memo == without


@pytest.mark.parametrize("compiled", [False, True])
def test_a_layer_and_head_cost_the_same_with_and_without_the_launch_memo(compiled, monkeypatch):
    _fresh()
    with_memo = _layer_and_head(compiled)
    _fresh()
    _no_memo(monkeypatch)
    without = _layer_and_head(compiled)
    _fresh()
    for a, b in zip(with_memo, without):
        _assert_equal(a, b)


def test_a_launch_with_an_object_argument_is_not_memoised():
    class Opaque:
        pass
    from trnsim.targets import TRN2
    assert costs._sim_key(lambda x: x, (Opaque(),), {}, TRN2) is None
    assert costs._sim_key(lambda x: x, (), {"opt": Opaque()}, TRN2) is None
    assert costs._sim_key(lambda x: x, (), {"steps": ("vec", "act"), "n": 3}, TRN2) is not None


@pytest.mark.parametrize("C, full, small, steps, dtype, n_out", [
    (40 * 2048 + 300, ("float32",) * 4, (), ("vs", "vec", "act", "vec"), "float32", 3),   # a partial last chunk
    (24 * 2048, ("bfloat16",) * 2, ("bfloat16",), ("act", "vec", "vec"), "bfloat16", 1),  # a broadcast input
])
def test_a_long_pointwise_kernel_extrapolated_matches_its_whole_simulation(C, full, small, steps, dtype, n_out):
    from trnsim.backend.shape_only import device_target
    from trnsim.kernels.library import fused
    _fresh()
    kw = dict(dtype=dtype, n_small=len(small), steps=steps, n_out=n_out)
    with device_target("trn2") as tg:
        assert C > costing._PW_WHOLE_CHUNKS * fused.FREE_TILE        # the extrapolated path is the one tested
        ext = costing._pointwise(("test-pw", C, full, small, steps), 128, C, full, small, kw)
        args = [costing._inp((128, C), d) for d in full] + [costing._inp((128, fused.FREE_TILE), d) for d in small]
        whole = costs._simulate(fused.pointwise, args, dict(kw, shape=(128, C)), tg)
    assert ext[1] == pytest.approx(whole[1], rel=1e-12)     # flops and bytes are linear in the chunks: exact
    assert ext[2] == pytest.approx(whole[2], rel=1e-12)
    assert ext[0] == pytest.approx(whole[0], rel=0.005)


def test_the_launch_memo_and_the_cost_cache_file_follow_the_dma_round_robin_switch():
    # a switch that changes simulated time must not be answered from results made under its other setting
    from trnsim import config
    from trnsim.backend import cost_cache
    from trnsim.kernels.library import elementwise
    from trnsim.targets import get_target
    tg = get_target("trn2")
    args = [np.empty((128, 2048), np.float32)] * 2
    kw = dict(op="add")
    k_on = costs._sim_key(elementwise.binary, args, kw, tg)
    with config.override(dma_round_robin=False):
        k_off = costs._sim_key(elementwise.binary, args, kw, tg)
        f_off = cost_cache.path()
    assert k_on != k_off and cost_cache.path() != f_off
