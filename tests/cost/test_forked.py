"""The compiled search's helper process (``trnsim.cost.forked``, issue 30): the runner-up compiled in a forked helper
gives the same estimates as one process, its layer costs come back through the layer-cost cache (the parent runs
none of them), a helper that fails is ignored, and the helper is only forked where it can work."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from trnsim.backend import host_threads
from trnsim.cost import forked, layer_cache, step

# a search in a fresh process (a helper is only forked before any layer has run: PyTorch refuses a backward pass
# in a process forked after its parent ran one); prints what the parent saw as JSON
SCRIPT = textwrap.dedent("""
    import json, sys
    from trnsim.cost import forked, step
    from trnsim.cost.models import ModelSpec
    from trnsim.cost.search import search
    mode = sys.argv[1]
    seen = {"collected": None, "runs_after_collect": 0}
    runs = [0]
    orig_run = step._run
    def counting_run(*a, **k):
        runs[0] += 1
        return orig_run(*a, **k)
    step._run = counting_run
    orig_collect = forked.Helper.collect
    def collect(self):
        seen["collected"] = orig_collect(self)
        runs[0] = 0
        return seen["collected"]
    forked.Helper.collect = collect
    if mode == "fail":
        orig_start = forked.start
        def failing(work):
            def fail(jobs):
                raise RuntimeError("a helper that fails")
            return orig_start(fail)
        forked.start = failing
    tiny = ModelSpec(name="tiny-forked", hidden=256, layers=2, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)
    # (at sequence 1024 the two fastest eagerly differ in their micro-batch: DP32 TP1 PP1 mb2, then mb1; at 256
    # in their pipeline only, DP32 TP1 PP1 mb2, then DP16 TP1 PP2 mb2: the same layers)
    seq = 256 if mode == "same" else 1024
    res, _, _ = search(tiny, "trn1.32xlarge", counts=(1,), micro_batches=(1, 2), seq=seq, jobs=1, compiled=True,
                       compile_top=2, fork=(mode != "one"))
    seen["runs_after_collect"] = runs[0]
    seen["estimates"] = [e.to_json() for e in res]
    print(json.dumps(seen))
""")


def _search(mode, tmp_path):
    env = dict(os.environ, TRNSIM_COST_CACHE="1", TRNSIM_CACHE_DIR=str(tmp_path / mode),
               TRNSIM_ESTIMATE_FORK="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_helper_compiles_the_runner_up_with_the_same_figures(tmp_path):
    one = _search("one", tmp_path)
    two = _search("fork", tmp_path)
    assert one["collected"] is None                 # no helper asked for
    assert two["collected"] is True                 # the helper's layer costs came back ...
    assert two["runs_after_collect"] == 0           # ... so the parent ran none of the runner-up's layers
    assert [e["parallelism"]["micro_batch"] for e in two["estimates"]] == [2, 1]     # two layer shapes
    assert two["estimates"] == one["estimates"]     # the same figures, to the bit


def test_a_helper_that_fails_is_ignored(tmp_path):
    one = _search("one", tmp_path)
    failed = _search("fail", tmp_path)
    assert failed["collected"] is False
    assert failed["runs_after_collect"] > 0         # the parent ran the runner-up itself
    assert failed["estimates"] == one["estimates"]


def test_a_helper_is_forked_only_where_it_can_work(monkeypatch, tmp_path):
    monkeypatch.setattr(step, "_RAN", [False])
    monkeypatch.setenv("TRNSIM_COST_CACHE", "1")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRNSIM_ESTIMATE_FORK", "1")
    assert forked.wanted()
    monkeypatch.setenv("TRNSIM_ESTIMATE_FORK", "0")
    assert not forked.wanted()
    monkeypatch.setenv("TRNSIM_ESTIMATE_FORK", "auto")
    monkeypatch.setattr(host_threads, "usable_cores", lambda: 1)
    assert not forked.wanted()                      # one CPU: the helper would only add its CPU time
    monkeypatch.setattr(host_threads, "usable_cores", lambda: 2)
    assert forked.wanted()
    monkeypatch.setenv("TRNSIM_COST_CACHE", "0")    # its results come back through the layer-cost cache
    assert not forked.wanted()
    monkeypatch.setenv("TRNSIM_COST_CACHE", "1")
    monkeypatch.setattr(step, "_RAN", [True])       # a layer (a backward pass) has run in this process
    assert not forked.wanted()


def test_merge_takes_only_the_caches_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNSIM_COST_CACHE", "1")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(layer_cache, "_state", {"loaded": False, "entries": {}, "new": 0, "path": None,
                                                "fp": None})
    key = ("layer", "a key")
    cost = step.LayerCost(1.0, 2.0, 1.5, 1.0, 0.5, 0.1, 3, 4096, ("aten::x",), 2, 40)
    other = {}
    layer_cache.store(key, cost)                    # as another process would hold it
    other.update(layer_cache.entries())
    layer_cache._state.update(entries={}, new=0)
    assert layer_cache.lookup(key) is None
    with pytest.raises(ValueError, match="neither a layer cost nor seconds"):
        layer_cache.merge({repr(key): {"fwd_ns": 1.0}, repr(("x",)): 2.0})
    assert layer_cache.lookup(key) is None and layer_cache.lookup_seconds(("x",)) is None     # nothing taken
    layer_cache.merge(dict(other, **{repr(("optimizer", 7)): 0.25}))
    assert layer_cache.lookup(key) == cost
    assert layer_cache.lookup_seconds(("optimizer", 7)) == 0.25


def test_no_job_for_a_runner_up_with_the_first_ones_layers(tmp_path):
    """Finalists that differ only in data or pipeline parallelism run the same layers: the helper gets no job (it
    would compile them a second time) and is ended."""
    same = _search("same", tmp_path)
    assert same["collected"] is None
    assert [e["parallelism"]["pp"] for e in same["estimates"]] == [1, 2]
