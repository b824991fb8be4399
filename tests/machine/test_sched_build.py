"""Which build of the scheduler's one loop runs (``sched_fast.choose``, ``sched_jit``): a short run under ``auto``
runs the loop's plain functions without importing numba, a process past ``PY_ROWS`` rows (or an explicit
``numba``) loads the compiled build once, and the compiled build is made of the same functions with compiled helpers.
The timelines of both builds are compared in test_sched_fast.py."""

import os
import subprocess
import sys
import types

import numpy as np
import pytest

from trnsim.kernels.jit import run_kernel
from trnsim.machine import sched_events, sched_fast, sched_jit, sched_rules, sched_state, schedule
from suite_files import load_file

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
_TSF = load_file("_tsf_for_build", os.path.join(HERE, "test_sched_fast.py"))

_SHORT_RUN = """
import sys
import numpy as np
import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule
import importlib.util
spec = importlib.util.spec_from_file_location('tsf', sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
res = run_kernel(m.pressure, (np.zeros((128, 8192), np.float32),), {'n': 6}, (1,), 'trn2', execute=False)
tl = schedule(res.cores)
tl.counters
print('numba' in sys.modules)
print(repr((tl.start, tl.end, tl.done, tl.data_start, tl.bind, sorted(tl.counters.items()))))
"""


def _env(**kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT] + sys.path), **kw)
    env.pop("TRNSIM_SCHEDULER", None)
    env.pop("TRNSIM_NO_NUMBA", None)
    return env


def test_a_short_run_does_not_import_numba_and_gives_the_compiled_timeline():
    out = subprocess.run([sys.executable, "-c", _SHORT_RUN, os.path.join(HERE, "test_sched_fast.py")],
                         capture_output=True, text=True, env=_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "False"
    res = run_kernel(_TSF.pressure, (np.zeros((128, 8192), np.float32),), {"n": 6}, (1,), "trn2", execute=False)
    tl = schedule(res.cores, impl="numba")
    assert lines[-1] == repr((tl.start, tl.end, tl.done, tl.data_start, tl.bind, sorted(tl.counters.items())))


def test_auto_runs_uncompiled_within_the_budget_then_compiled(monkeypatch):
    monkeypatch.delenv("TRNSIM_SCHEDULER", raising=False)
    monkeypatch.delenv("TRNSIM_NO_NUMBA", raising=False)
    monkeypatch.setitem(sched_fast._STATE, "kernels", None)      # as in a process that has not loaded it
    monkeypatch.setitem(sched_fast._STATE, "py_rows", 0)
    monkeypatch.setattr(sched_fast, "PY_ROWS", 100)
    monkeypatch.setattr(sched_fast, "cache_warm", lambda: True)      # numba's cache holds the loop
    assert sched_fast.choose(None, 60) == "python"
    assert sched_fast.choose("auto", 40) == "python"               # 100 rows so far: within the budget
    assert sched_fast._STATE["py_rows"] == 100
    assert sched_fast.choose(None, 1) == ("numba" if sched_fast.fast_available() else "python")
    assert sched_fast.choose("numba", 1) == "numba"                  # explicit: compiled whatever the budget
    assert sched_fast.choose("python", 10 ** 9) == "python"
    monkeypatch.setitem(sched_fast._STATE, "py_rows", 0)
    assert sched_fast.choose("numba", 5) == "numba"
    assert sched_fast._STATE["py_rows"] == 0                          # explicit builds do not spend the budget
    monkeypatch.setenv("TRNSIM_SCHEDULER", "numba")
    assert sched_fast.choose(None, 5) == "numba"


def test_expect_many_takes_the_compiled_loop_at_the_next_schedule(monkeypatch):
    """``expect_many`` (said by a cost estimate's layer runs) spends the uncompiled budget: under ``auto`` the next
    schedule takes the compiled loop, however few rows it has; an explicit build is still obeyed."""
    monkeypatch.delenv("TRNSIM_SCHEDULER", raising=False)
    monkeypatch.delenv("TRNSIM_NO_NUMBA", raising=False)
    monkeypatch.setattr(sched_fast, "compiled", lambda: False)        # as in a process that has not loaded it yet
    monkeypatch.setattr(sched_fast, "fast_available", lambda: True)
    monkeypatch.setattr(sched_fast, "cache_warm", lambda: True)
    monkeypatch.setitem(sched_fast._STATE, "py_rows", 0)
    assert sched_fast.choose(None, 10) == "python"
    sched_fast.expect_many()
    assert sched_fast.choose(None, 1) == "numba"
    assert sched_fast.choose("python", 1) == "python"
    assert sched_fast._STATE["py_rows"] == sched_fast.PY_ROWS


def test_auto_runs_uncompiled_until_its_rows_would_repay_a_cold_compile(monkeypatch):
    """With numba's cache cold (a fresh install: compiling the loop costs about 90 s), ``auto`` runs uncompiled,
    ``expect_many`` or not, until the process's uncompiled rows pass ``COLD_ROWS``; an explicit ``numba`` compiles."""
    monkeypatch.delenv("TRNSIM_SCHEDULER", raising=False)
    monkeypatch.delenv("TRNSIM_NO_NUMBA", raising=False)
    monkeypatch.setattr(sched_fast, "compiled", lambda: False)
    monkeypatch.setattr(sched_fast, "fast_available", lambda: True)
    monkeypatch.setattr(sched_fast, "cache_warm", lambda: False)
    monkeypatch.setattr(sched_fast, "PY_ROWS", 100)
    monkeypatch.setattr(sched_fast, "COLD_ROWS", 1000)
    monkeypatch.setitem(sched_fast._STATE, "py_rows", 0)
    assert sched_fast.choose(None, 600) == "python" and sched_fast.last_choice() == "python"
    sched_fast.expect_many()
    assert sched_fast.choose(None, 400) == "python"                  # 1,000 rows: within the cold budget
    assert sched_fast.choose("numba", 1) == "numba" and sched_fast.last_choice() == "numba"
    assert sched_fast.choose(None, 1) == "numba"                     # past it: the compile now pays
    assert sched_fast._STATE["py_rows"] == 1000


def test_ran_uncompiled_cold_says_when_warmup_would_have_helped(monkeypatch):
    """``ran_uncompiled_cold``: past ``PY_ROWS`` uncompiled rows with the cache found cold and the loop not loaded
    since; not on a warm cache, not within the budget, not once the loop is loaded."""
    monkeypatch.setattr(sched_fast, "compiled", lambda: False)
    monkeypatch.setitem(sched_fast._STATE, "warm", False)
    monkeypatch.setitem(sched_fast._STATE, "py_rows", sched_fast.PY_ROWS + 1)
    assert sched_fast.ran_uncompiled_cold()
    monkeypatch.setitem(sched_fast._STATE, "py_rows", sched_fast.PY_ROWS)
    assert not sched_fast.ran_uncompiled_cold()
    monkeypatch.setitem(sched_fast._STATE, "py_rows", sched_fast.PY_ROWS + 1)
    monkeypatch.setitem(sched_fast._STATE, "warm", True)
    assert not sched_fast.ran_uncompiled_cold()
    monkeypatch.setitem(sched_fast._STATE, "warm", None)                 # never asked
    assert not sched_fast.ran_uncompiled_cold()
    monkeypatch.setitem(sched_fast._STATE, "warm", False)
    monkeypatch.setattr(sched_fast, "compiled", lambda: True)
    assert not sched_fast.ran_uncompiled_cold()


def test_estimate_names_warmup_after_running_uncompiled_cold(monkeypatch, capsys):
    """``trnsim estimate`` ends with a note naming ``trnsim warmup`` when its process ran the scheduler uncompiled
    for a cold numba cache, and without it otherwise (its own output unchanged)."""
    from trnsim.cost.cli import main
    args = ["--model", "no-such-model", "--instance", "trn2.48xlarge"]
    monkeypatch.setattr(sched_fast, "ran_uncompiled_cold", lambda: True)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "'trnsim warmup' compiles it once" in err
    monkeypatch.setattr(sched_fast, "ran_uncompiled_cold", lambda: False)
    assert main(args) == 2
    assert "trnsim warmup" not in capsys.readouterr().err


_TINY = """
import numpy as np
def tiny(a):
    s = 0.0
    for x in a:
        s += x * {k}
    return s
"""

_HOLDS = """
import importlib.util, sys
import numba, numpy as np
from trnsim.machine import sched_jit
spec = importlib.util.spec_from_file_location('tinymod', sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
before = sched_jit.cache_holds(m.tiny)
if sys.argv[2] == 'compile':
    numba.njit(cache=True)(m.tiny)(np.ones(3))
print(before, sched_jit.cache_holds(m.tiny))
"""


def test_cache_holds_asks_numbas_cache_for_the_source_as_it_is(tmp_path):
    """``sched_jit.cache_holds``: False before numba has compiled a function into its cache, True after (in a new
    process too), False again once the function's source changes."""
    if not sched_fast.fast_available():
        pytest.skip("numba cannot be imported")
    src = tmp_path / "tinymod.py"
    src.write_text(_TINY.format(k=2))
    env = _env(NUMBA_CACHE_DIR=str(tmp_path / "nbcache"))

    def run(what):
        out = subprocess.run([sys.executable, "-c", _HOLDS, str(src), what], capture_output=True, text=True,
                             env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()

    assert run("compile") == ["False", "True"]
    assert run("look") == ["True", "True"]
    src.write_text(_TINY.format(k=25))             # an edited function (another size and stamp): a stale cache
    assert run("look") == ["False", "False"]


def test_warmup_command_leaves_the_loop_in_numbas_cache(capsys):
    """``trnsim warmup`` builds (or loads) the compiled loop; numba's cache then holds both large functions.  In this
    process, so a worker that compiles the loop for other tests pays for it once."""
    if not sched_fast.fast_available():
        pytest.skip("numba cannot be imported")
    from trnsim.cli import main
    assert main(["warmup"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trnsim warmup: ") and "done in" in out
    assert sched_fast.compiled()
    assert sched_jit.cache_holds(sched_state.new_state) and sched_jit.cache_holds(sched_events.run)


def test_auto_uses_the_compiled_loop_once_it_is_loaded(monkeypatch):
    if not sched_fast.fast_available():
        pytest.skip("numba cannot be imported")
    monkeypatch.delenv("TRNSIM_SCHEDULER", raising=False)
    monkeypatch.delenv("TRNSIM_NO_NUMBA", raising=False)
    res = run_kernel(_TSF.stream, (np.zeros((128, 64), np.float32),), {"n": 2}, (1,), "trn2", execute=False)
    schedule(res.cores, impl="numba")
    assert sched_fast.compiled()
    monkeypatch.setitem(sched_fast._STATE, "py_rows", 0)
    assert sched_fast.choose(None, 1) == "numba"


def test_the_modules_keep_plain_functions_and_the_compiled_build_calls_compiled_helpers():
    if not sched_fast.fast_available():
        pytest.skip("numba cannot be imported")
    # the modules' names: plain Python functions (what the uncompiled build runs)
    for fn in (sched_events.run, sched_state.new_state, sched_state._order_pass, sched_rules.dep_scan):
        assert isinstance(fn, types.FunctionType)
    run = sched_jit.jitted(sched_events.run)
    assert run is sched_fast._kernels().run
    assert run.py_func.__code__ is sched_events.run.__code__
    assert run.py_func.__qualname__ == "run" and run.py_func.__module__ == sched_events.__name__
    g = run.py_func.__globals__
    assert g is not sched_events.__dict__
    assert g["dge_place"] is sched_jit.jitted(sched_rules.dge_place)
    assert g["borrow"] is sched_jit.borrow
    ns = sched_jit.jitted(sched_state.new_state).py_func.__globals__
    assert ns["_order_pass"] is sched_jit.jitted(sched_state._order_pass)
    assert sched_events.__dict__["dge_place"] is sched_rules.dge_place
    with pytest.raises(KeyError, match="not marked with njit"):
        sched_jit.jitted(len)


def _many_hwdge(src, n):
    """``n`` round trips of a tile through HBM by hwdge transfers on two queues, each waiting for the one before
    (so each leaves its own busy interval on a DGE block), more than the 64 intervals the loop started with."""
    import nki.isa as nisa
    import nki.language as nl
    acc = nl.ndarray((128, 64), dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(acc, src)
    for i in range(n):
        h = nl.ndarray((128, 64), dtype=src.dtype, buffer=nl.private_hbm)
        eng = nisa.engine.scalar if i % 2 else nisa.engine.sync
        nisa.dma_copy(h, acc, engine=eng, dge_mode=nisa.dge_mode.hwdge)
        t = nl.ndarray((128, 64), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, h, engine=eng, dge_mode=nisa.dge_mode.hwdge)
        nisa.tensor_tensor(acc, acc, t, op=nl.add)
    return None


def test_more_hwdge_intervals_than_the_first_size_give_identical_timelines():
    """The DGE blocks' interval arrays are sized for every hwdge transfer (``new_state``; ``run`` assigns no array
    in its loop): a record with hundreds of them schedules the same compiled and uncompiled."""
    import trnsim
    trnsim.install_nki()
    res = run_kernel(_many_hwdge, (np.zeros((128, 64), np.float32), 150), {}, (1,), "trn2", execute=False)
    tl = schedule(res.cores, impl="python")
    spans = tl.dge
    assert sum(1 for s in spans if s[1] == 2) == 300
    # the spans leave gaps: more busy intervals than the arrays' old first size
    blocks = {}
    for _, _, unit, s, e in sorted(spans, key=lambda s: s[3]):
        iv = blocks.setdefault(unit, [])
        if iv and s <= iv[-1][1] + 1e-9:
            iv[-1][1] = max(iv[-1][1], e)
        else:
            iv.append([s, e])
    assert max(len(v) for v in blocks.values()) > 64
    if sched_fast.fast_available():
        assert schedule(res.cores, impl="numba") == tl
