"""Reuse across estimates (issue 30): a compiled estimate whose layers and optimizer step are in the layer-cost
cache runs nothing on the device and gives the same estimate as the fresh compile that filled the cache."""

import math

import pytest

from trnsim.backend import cost_cache
from trnsim.cost import estimator, layer_cache, step
from trnsim.cost.models import ModelSpec
from trnsim.targets import get_target

TINY = ModelSpec(name="tiny-reuse", hidden=256, layers=2, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)


def _fresh_process_state(monkeypatch):
    """What a new process starts with: no memo in memory, the cache files read back from disk."""
    monkeypatch.setattr(layer_cache, "_state", {"loaded": False, "entries": {}, "new": 0, "path": None, "fp": None})
    monkeypatch.setattr(step, "_MEMO", {})
    monkeypatch.setattr(step, "_SEEN", set())
    monkeypatch.setattr(estimator, "_OPT", {})


@pytest.fixture
def caches_on(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_COST_CACHE", "1")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "compile"))
    monkeypatch.setattr(cost_cache, "_state", {"loaded": False, "entries": {}, "new": 0, "path": None, "fp": None})
    _fresh_process_state(monkeypatch)
    return tmp_path


def test_a_cached_compiled_estimate_equals_the_fresh_compile_and_runs_nothing(caches_on, monkeypatch):
    from trnsim import backend
    backend.register()
    kw = dict(tp=2, micro_batch=1, seq=256, global_batch=64, compiled=True)
    fresh = estimator.estimate(TINY, "trn2.48xlarge", 1, **kw)
    layer_cache.flush()
    _fresh_process_state(monkeypatch)

    def no_device_run(*a, **k):
        raise AssertionError("a cached estimate ran a layer or an optimizer step on the device")
    monkeypatch.setattr(step, "_run", no_device_run)
    from trnsim.backend import shape_only
    monkeypatch.setattr(shape_only, "device_target", no_device_run)
    again = estimator.estimate(TINY, "trn2.48xlarge", 1, **kw)
    assert again.to_json() == fresh.to_json()
    assert fresh.breakdown["optimizer"] > 0


def test_optimizer_seconds_round_trip_and_refusal(caches_on):
    key = ("optimizer", 1000, "trn1", "adamw", "compiled")
    assert layer_cache.lookup_seconds(key) is None
    layer_cache.store_seconds(key, 1.25e-3)
    layer_cache.flush()
    layer_cache._state.update(loaded=False, entries={}, new=0, path=None)
    assert layer_cache.lookup_seconds(key) == 1.25e-3
    assert layer_cache.lookup(key) is None            # not a LayerCost
    for bad in (math.nan, -1.0, math.inf):
        with pytest.raises(ValueError, match="not a finite non-negative number"):
            layer_cache.store_seconds(key, bad)


def test_a_cached_optimizer_step_is_the_one_simulated(caches_on, monkeypatch):
    tg = get_target("trn1")
    first = estimator.optimizer_s(300_000, tg, "lamb", compiled=True)
    layer_cache.flush()
    _fresh_process_state(monkeypatch)
    from trnsim.backend import shape_only

    def no_device_run(*a, **k):
        raise AssertionError("ran the optimizer step again")
    monkeypatch.setattr(shape_only, "device_target", no_device_run)
    assert estimator.optimizer_s(300_000, tg, "lamb", compiled=True) == first
