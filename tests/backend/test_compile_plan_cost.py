"""Planning a compiled graph prices the eager kernels of its ops (``costing.eager_kernel_cost``) on plain meta
tensors made with the compile's fake-tensor mode set aside (issue 28: under the mode each one was a fake tensor made
through its dispatch, a third of a small graph's planning).  The plan, with every kernel's simulated time, is the
one the fake-tensor arguments gave."""

import contextlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from trnsim.backend import charging, costs
from trnsim.backend.compile import cache as compile_cache
from trnsim.backend.compile import costing


pytestmark = pytest.mark.usefixtures("fresh_compile")


def _f(x, w, b, idx):
    h = torch.relu(x @ w + b)                      # matmul with an epilogue
    s = h.sum(dim=0)                               # a reduction
    g = torch.index_select(h, 1, idx)              # an opaque op
    return (h * 2.0 - 1.0).abs(), s, g.exp()       # pointwise groups


def _inputs():
    g = torch.Generator().manual_seed(5)
    return (torch.randn(96, 64, generator=g), torch.randn(64, 80, generator=g), torch.randn(80, generator=g),
            torch.tensor([3, 1, 4, 1, 5, 9, 2, 6]))


def _compile_plans(graphs, monkeypatch, tag, tmp_path):
    """The plans of ``_f``'s graphs compiled in a fresh process state: no compile cache, no cost memo."""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / tag))
    compile_cache.CACHE.clear_memory()
    monkeypatch.setattr(costing, "_MEMO", {})
    monkeypatch.setattr(costs, "_MEMO", {})
    monkeypatch.setattr(costs, "_SIMS", {})
    torch._dynamo.reset()
    n = len(graphs)
    outs = torch.compile(_f, backend="neuron", fullgraph=True)(*(t.to("neuron") for t in _inputs()))
    return [g.plan for g in graphs[n:]], [o.cpu() for o in outs]


def test_plan_equals_the_one_priced_on_fake_tensors(graphs, monkeypatch, tmp_path):
    new, out_new = _compile_plans(graphs, monkeypatch, "meta", tmp_path)
    # the previous path: the eager kernels priced on fake tensors made under the compile's mode
    monkeypatch.setattr(costing, "unset_fake_temporarily", contextlib.nullcontext)
    old, out_old = _compile_plans(graphs, monkeypatch, "fake", tmp_path)
    assert len(new) == len(old) == 1
    kinds = {k["kind"] for k in new[0]["kernels"]}
    assert {"matmul", "reduce", "opaque", "pointwise"} <= kinds, kinds      # every costing path was taken
    assert new[0]["kernels"] == old[0]["kernels"]           # each kernel's simulated ns, flops and bytes
    assert {k: v for k, v in new[0].items() if k != "graph"} == {k: v for k, v in old[0].items() if k != "graph"}
    for a, b in zip(out_new, out_old):
        assert torch.equal(a, b)
    ref = _f(*_inputs())
    for a, r in zip(out_new, ref):
        torch.testing.assert_close(a.double(), r.double(), rtol=1e-5, atol=1e-5)


def test_eager_kernels_are_priced_on_plain_meta_tensors(graphs, monkeypatch, tmp_path):
    seen = []
    op_time = charging.op_time

    def spy(name, cat, args, out):
        seen.extend(a for a in (*args, out) if isinstance(a, torch.Tensor))
        return op_time(name, cat, args, out)
    monkeypatch.setattr(charging, "op_time", spy)
    _compile_plans(graphs, monkeypatch, "spy", tmp_path)
    assert seen, "no eager kernel was priced"
    assert all(t.device.type == "meta" and not isinstance(t, FakeTensor) for t in seen), \
        {(type(t).__name__, t.device.type) for t in seen}
