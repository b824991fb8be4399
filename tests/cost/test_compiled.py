"""Compiled against eager (issue 30): a compiled layer is never slower than the same layer run op by op, what
compilation buys is named (fused kernels, one launch per graph), a reduction keeps the eager device's kernel
choice, and a layer is compiled once and reused (the layer-cost cache)."""

import dataclasses

import pytest
import torch

from trnsim.cost import layer_cache, step
from trnsim.cost.models import ModelSpec

# GQA (8 query heads on 4 kv heads): its backward sums over the repeated heads, the reduction issue 30 found
TINY = ModelSpec(name="tiny-gqa", hidden=256, layers=2, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)
SEQ = 256


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


@pytest.mark.parametrize("tp,sp", [(1, False), (2, True)])
def test_a_compiled_layer_is_never_slower_than_eager(tp, sp):
    eager = step.layer_cost(TINY, "dense", tp=tp, seq=SEQ, target="trn2", sp=sp)
    comp = step.layer_cost(TINY, "dense", tp=tp, seq=SEQ, target="trn2", compiled=True, sp=sp)
    assert comp.graphs >= 2
    assert comp.fwd_ns <= eager.fwd_ns and comp.bwd_ns <= eager.bwd_ns
    # what it buys: fewer launches (one per graph instead of one per op)
    assert comp.launches < eager.launches and comp.launch_ns < eager.launch_ns


def test_a_graphs_reduction_keeps_the_eager_kernel_choice():
    """A sum over a short outer dimension (the GQA head repeat's backward) is a few elementwise adds on the eager
    device; the compiled graph charges the same kernel, not a row reduction of 2-element rows."""
    from trnsim.backend.compile import costing
    from trnsim.backend.compile.fusion import Fusion
    from trnsim.backend.device_state import STATE
    from trnsim.backend.shape_only import device_target
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return x.sum(dim=2, keepdim=True)

    x = torch.empty(1, 1, 2, 4096, 128, dtype=torch.bfloat16, device="meta")
    gm = make_fx(f)(x)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            n.meta["val"] = x
    with device_target("trn2"):
        fz = Fusion(gm)
        groups = [g for g in fz.groups if g.kind == "reduce"]
        assert len(groups) == 1
        ns = costing.group_cost(fz, groups[0])[0]
        eager = costing.eager_kernel_cost(groups[0].anchor)[0]
        from trnsim.backend import costs
        adds = costs.elementwise_cost(STATE.target, 4096 * 128, "bfloat16", "binary", "add")[0]
    assert ns == eager == pytest.approx(adds)


def test_fused_pointwise_kernel_has_no_conversion_copies():
    """One elementwise step fused alone costs what the eager device's kernel for it costs: the step reads the
    loaded tile and writes the output's dtype (no fp32 copy in, no copy out)."""
    from trnsim.backend import costs
    from trnsim.kernels.library import fused
    from trnsim.targets import get_target
    tg = get_target("trn2")
    n = 128 * 8192
    R, C = costs._rows_cols(n)
    x = [costs._inp((R, C), "bfloat16") for _ in range(2)]
    one = costs._sim(fused.pointwise, x, dict(shape=(R, C), dtype="bfloat16", steps=("vec",)), tg)[0]
    eager = costs.elementwise_cost(tg, n, "bfloat16", "binary", "add")[0]
    assert one == pytest.approx(eager, rel=0.02)


def test_layer_cost_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_COST_CACHE", "1")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(layer_cache, "_state", {"loaded": False, "entries": {}, "new": 0, "path": None,
                                                "fp": None})
    key = ("layer", TINY, "dense", 1, 1, 1, SEQ, torch.bfloat16, "trn2", "bf16", True, False)
    cost = step.LayerCost(1.0, 2.0, 1.5, 1.0, 0.5, 0.1, 3, 4096, ("aten::x",), 2, 40)
    assert layer_cache.lookup(key) is None
    layer_cache.store(key, cost)
    layer_cache.flush()
    assert layer_cache.path().startswith(str(tmp_path))
    # a new process: nothing in memory, the file read back
    layer_cache._state.update(loaded=False, entries={}, new=0, path=None)
    assert layer_cache.lookup(key) == cost
    assert layer_cache.lookup(dataclasses.replace(TINY, hidden=512)) is None
    # a damaged file is ignored with a warning, never trusted
    with open(layer_cache.path(), "w") as f:
        f.write('{"x": [1, 2]}')
    layer_cache._state.update(loaded=False, entries={}, new=0, path=None)
    with pytest.warns(RuntimeWarning, match="unreadable layer-cost cache"):
        assert layer_cache.lookup(key) is None
    # off with the op-cost cache's switch
    monkeypatch.setenv("TRNSIM_COST_CACHE", "0")
    layer_cache.store(key, cost)
    assert layer_cache.lookup(key) is None


def test_a_memoised_layer_is_not_run_again(monkeypatch):
    step.layer_cost(TINY, "dense", tp=1, seq=SEQ, target="trn2", compiled=True)
    calls = []
    monkeypatch.setattr(step, "_run", lambda *a, **k: calls.append(a))
    step.layer_cost(TINY, "dense", tp=1, seq=SEQ, target="trn2", compiled=True)
    assert calls == []


def test_a_compiled_search_says_what_it_compiled_and_what_it_left_out():
    """``search(compile_top=2)``: the two fastest configurations eagerly are compiled, each the estimate of its own
    configuration compiled; the note names both (eager and compiled step times) and the first one left out."""
    from trnsim.cost import estimator as E
    from trnsim.cost.search import search
    kw = dict(counts=(1,), micro_batches=(1, 2), seq=SEQ, jobs=1)
    eager, _, _ = search(TINY, "trn1.32xlarge", **kw)
    res, front, _ = search(TINY, "trn1.32xlarge", compiled=True, compile_top=2, **kw)
    ranked = sorted(eager, key=lambda e: e.step_time_s)
    assert len(ranked) > 2 and [c.parallelism for c in res] == [e.parallelism for e in ranked[:2]]
    note = res[0].notes[-1]
    assert all(c.notes[-1] == note for c in res)
    for e, c in zip(ranked, res):
        p = e.parallelism
        alone = E.estimate(TINY, "trn1.32xlarge", 1, dp=p.dp, tp=p.tp, pp=p.pp, ep=p.ep, micro_batch=p.micro_batch,
                           seq=SEQ, global_batch=e.global_batch, checkpointing=p.checkpointing, compiled=True)
        assert c.compiled and c.step_time_s == alone.step_time_s
        assert f"{p.label()} (eager {e.step_time_s:.3f} s, compiled {c.step_time_s:.3f} s)" in note
    assert note.startswith(f"compiled search: all {len(ranked)} configurations that fit estimated eagerly")
    assert (f"the other {len(ranked) - 2} not compiled: eagerly {ranked[2].step_time_s:.3f} s "
            f"({ranked[2].parallelism.label()}) or slower") in note
