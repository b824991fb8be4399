"""The persistent op-cost cache: a second process reuses the first one's simulations; a corrupt file is ignored
with a warning; the key changes with the cost model's fingerprint."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import time
from trnsim.backend import costs
from trnsim.targets import TRN2
t = time.process_time()
ns = costs.matmul_cost(TRN2, 1024, 1024, 2048, "bfloat16")[0]
print(ns, time.process_time() - t)
"""


def _run(tmp_path):
    env = dict(os.environ, TRNSIM_CACHE_DIR=str(tmp_path), TRNSIM_COST_CACHE="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ns, cpu = r.stdout.split()
    return float(ns), float(cpu), r.stderr


def test_second_process_reuses_the_first_ones_costs(tmp_path):
    ns1, cpu1, _ = _run(tmp_path)
    files = [f for f in os.listdir(tmp_path) if f.startswith("op-costs-")]
    assert len(files) == 1
    doc = json.loads((tmp_path / files[0]).read_text())
    assert any("mm" in k for k in doc) and all(len(v) == 3 for v in doc.values())
    ns2, cpu2, _ = _run(tmp_path)
    assert ns2 == ns1                               # the same cost, read back
    assert cpu2 < cpu1                              # without simulating the kernel again


def test_corrupt_cache_is_ignored_with_a_warning_and_rewritten(tmp_path):
    ns1, _, _ = _run(tmp_path)
    (f,) = [tmp_path / f for f in os.listdir(tmp_path) if f.startswith("op-costs-")]
    f.write_text("{not json")
    ns2, _, err = _run(tmp_path)
    assert ns2 == ns1 and "ignoring the unreadable op-cost cache" in err
    json.loads(f.read_text())                       # valid again


def test_disabled_in_this_test_session():
    from trnsim.backend import cost_cache
    assert not cost_cache.enabled()


@pytest.mark.parametrize("module", [("backend", "costs.py"), ("backend", "compile", "costing.py")])
def test_fingerprint_changes_with_the_rules_that_combine_simulations(monkeypatch, module):
    """Both modules whose extrapolation rules turn simulations into stored costs are part of the fingerprint: an
    edit of either starts a fresh cache file."""
    import builtins
    import io
    import os

    from trnsim.backend import cost_cache
    monkeypatch.setitem(cost_cache._state, "fp", None)
    base = cost_cache._fingerprint()
    real = builtins.open
    suffix = os.path.join(*module)

    def edited(path, mode="r", *a, **k):
        if str(path).endswith(suffix) and "b" in mode:
            with real(path, mode) as f:
                return io.BytesIO(f.read() + b"\n# an edit\n")
        return real(path, mode, *a, **k)
    monkeypatch.setattr(builtins, "open", edited)
    monkeypatch.setitem(cost_cache._state, "fp", None)
    assert cost_cache._fingerprint() != base
