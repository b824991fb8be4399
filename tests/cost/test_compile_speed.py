"""What keeps a cold compiled estimate cheap (issue 30): shape-only kernel simulations convert no input arrays,
and a compiled graph's fused-kernel simulations are kept in the op-cost cache, so re-lowering the graphs after a
change to the compile backend (which re-keys the compile and layer-cost caches) simulates no kernel again and
gives the same layer cost."""

import dataclasses
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
import torch

from trnsim.backend import cost_cache, costs
from trnsim.backend.compile import cache as compile_cache
from trnsim.backend.compile import costing
from trnsim.cost import layer_cache, step
from trnsim.cost.models import ModelSpec
from trnsim.kernels.jit import run_kernel

TINY = ModelSpec(name="tiny-speed", hidden=256, layers=2, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)


def _kernel_that_reads_nothing(a):
    return None


def test_a_shape_only_launch_does_not_copy_its_narrow_float_inputs():
    # a 64 MiB bf16 input: converting it to its float32 storage type (what a value-computing run does) would take
    # 128 MiB more; a shape-only run keeps no values, so it must take next to nothing
    a = np.empty((4096, 8192), dtype=ml_dtypes.bfloat16)
    tracemalloc.start()
    try:
        run_kernel(_kernel_that_reads_nothing, (a,), {}, target="trn2", execute=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2 ** 20, f"a shape-only launch allocated {peak / 2 ** 20:.0f} MiB for a 64 MiB input"


@pytest.fixture
def caches_on(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_COST_CACHE", "1")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "compile-1"))
    _new_process(monkeypatch)
    return tmp_path


def _new_process(monkeypatch):
    """What a new process starts with: no memo in memory, the op-cost cache read back from disk."""
    monkeypatch.setattr(cost_cache, "_state", {"loaded": False, "entries": {}, "new": 0, "path": None, "fp": None})
    monkeypatch.setattr(layer_cache, "_state", {"loaded": False, "entries": {}, "new": 0, "path": None, "fp": None})
    monkeypatch.setattr(step, "_MEMO", {})
    monkeypatch.setattr(step, "_SEEN", set())
    monkeypatch.setattr(costing, "_MEMO", {})
    monkeypatch.setattr(costs, "_MEMO", {})
    compile_cache.CACHE.clear_memory()


def test_a_recompile_takes_its_fused_kernel_costs_from_the_op_cost_cache(caches_on, monkeypatch):
    from trnsim import backend
    backend.register()
    kw = dict(tp=1, micro_batch=2, seq=256, dtype=torch.bfloat16, target="trn2", compiled=True)
    fresh = step.layer_cost(TINY, "dense", **kw)
    cost_cache.flush()
    fused = [k for k in cost_cache._state["entries"] if k.startswith("('fused',")]
    assert fused, "no fused-kernel simulation reached the op-cost cache"

    # a later process after a change to the compile backend: the compile cache and the layer-cost cache are keyed
    # by its source (so both start empty), the op-cost cache is not
    _new_process(monkeypatch)
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(caches_on / "compile-2"))
    monkeypatch.setattr(layer_cache, "lookup", lambda key: None)

    def no_simulation(*a, **k):
        raise AssertionError("a kernel was simulated again although the op-cost cache holds it")
    monkeypatch.setattr(costs, "_sim", no_simulation)
    again = step.layer_cost(TINY, "dense", **kw)
    # the same costs (times are differences of the device clock, which the first run advanced: equal to rounding)
    for f in dataclasses.fields(fresh):
        a, b = getattr(again, f.name), getattr(fresh, f.name)
        assert a == (pytest.approx(b, rel=1e-12) if isinstance(b, float) else b), f.name
    assert again.graphs > 0          # it was compiled again (not read from a cache of whole layers)


def test_a_compiled_shape_only_layer_makes_no_real_tensors(monkeypatch):
    # the graph's factory ops (silu's backward: full_like, empty_permuted) and the tangents AOTAutograd restrides
    # into new device tensors made real CPU tensors of full size in a shape-only run; now every value is fake
    from torch._subclasses.fake_tensor import FakeTensor
    from trnsim import backend
    from trnsim.backend.compile import runtime
    backend.register()
    seen = []
    compute = runtime._compute

    def spy(fn, args, kwargs, mode, v, cast):
        out = compute(fn, args, kwargs, mode, v, cast)
        seen.append((str(fn), type(out)))
        return out
    monkeypatch.setattr(runtime, "_compute", spy)
    monkeypatch.setattr(runtime.CompiledGraph, "GENERATED", False)     # the reference path calls _compute by name
    # the steps run (a graph whose outputs could come from the trace runs them when the trace cannot be used:
    # tests/backend/test_compile_runtime_traced_outputs.py)
    monkeypatch.setattr(runtime.CompiledGraph, "TRACED_OUTPUTS", False)
    monkeypatch.setattr(step, "_MEMO", {})
    step.layer_cost(TINY, "dense", tp=1, micro_batch=2, seq=256, dtype=torch.bfloat16, target="trn2", compiled=True)
    assert any("full" in f or "empty" in f for f, _ in seen), "no factory op ran: the test would prove nothing"
    real = [f for f, t in seen if issubclass(t, torch.Tensor) and not issubclass(t, FakeTensor)]
    assert not real, f"real tensors made in a shape-only compiled run by {real}"
