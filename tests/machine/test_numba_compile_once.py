"""numba compiles each cached function once per test session (tests/conftest.py): concurrent test processes
(pytest-xdist workers) that reach the same function while the disk cache is cold wait for one compile and load
its result instead of each compiling (issue 28: a fresh clone's CI paid the scheduler's compile in every worker)."""

import os
import subprocess
import sys
import textwrap

import pytest

numba = pytest.importorskip("numba")

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_WORKER = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("suite_conftest", sys.argv[1])
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)           # installs the compile lock, as pytest does for the suite
    sys.path.insert(0, sys.argv[2])
    import kern
    print("ready", flush=True)                  # about to compile (the test holds the lock until both are)
    assert kern.f(20) == 210
    st = kern.f.stats
    print(sum(st.cache_hits.values()), sum(st.cache_misses.values()))
""")

_KERNEL = textwrap.dedent("""
    from numba import njit

    @njit(cache=True)
    def f(n):
        s = 0
        for i in range(n + 1):
            s += i
        return s
""")


def test_the_compile_lock_is_installed():
    from numba.core import dispatcher
    assert getattr(dispatcher.Dispatcher.compile, "_trnsim_locked", False)


def test_concurrent_processes_compile_a_cached_function_once(tmp_path):
    """Two processes reach the compile of one function with a cold cache while the lock is held: once it is
    released, one compiles (a cache miss) and the other waits and loads the cached result (a cache hit).
    Without the lock both compile (two misses)."""
    from filelock import FileLock
    from numba.core import dispatcher

    lock_path = dispatcher.Dispatcher.compile._trnsim_lock_path      # the suite's lock (tests/conftest.py)
    (tmp_path / "kern.py").write_text(_KERNEL)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-c", _WORKER, os.path.join(TESTS, "conftest.py"), str(tmp_path)]
    with FileLock(lock_path):
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.communicate(timeout=300)[1][-3000:]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    hits_misses = sorted(tuple(int(x) for x in out.split()) for out, _ in outs)
    assert hits_misses == [(0, 1), (1, 0)]
