"""The compiled scheduler (``sched_fast`` + ``sched_kernels``) gives the reference scheduler's timeline exactly:
every column and counter equal, on the library and team kernels, multi-core launches and barrier launches (which
keep the reference loop), kernels that exercise DMA back-filling, partial DMA engine use and the SBUF capacity gate.
Also: the fallback to the pure-Python scheduler when numba is missing or fails."""

import importlib.util
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import dma_share, sched_fast, schedule
from trnsim.machine.timeline import _FIELDS

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

BF16 = ml_dtypes.bfloat16
HERE = os.path.dirname(__file__)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_same(ref, got):
    """Column by column, naming the first row that differs."""
    assert len(ref) == len(got)
    assert ref.core_ids == got.core_ids
    for f in _FIELDS:
        a, b = getattr(ref, f), getattr(got, f)
        if a != b:
            i = next(k for k in range(len(a)) if a[k] != b[k])
            raise AssertionError(f"column {f!r} differs first at row {i}: reference {a[i]!r}, compiled {b[i]!r}")
    assert ref.counters.keys() == got.counters.keys()
    for key in ref.counters:
        assert ref.counters[key] == got.counters[key], f"counter {key} differs"
    assert ref == got


# ---------------------------------------------------------------------------------------------- kernels

def stream(x, n, load=None, store=None):
    """load, three engine instructions, store per tile (the benchmark's streaming kernel); each program of a
    launch stores into its own rows of the output.  ``load``/``store``: the trigger engines (DMA queues) named."""
    P, F = x.shape
    nprog = nl.num_programs(0)
    pid = nl.program_id(0)
    full = nl.ndarray((P * nprog, F), dtype=x.dtype, buffer=nl.shared_hbm)
    out = full[pid * P:(pid + 1) * P, :]
    for _ in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x, engine=load)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.activation(t, nl.exp, u)
        nisa.tensor_tensor(u, t, u, op=nl.add)
        nisa.dma_copy(out, u, engine=store)
    return full


def pressure(x, n):
    """Big SBUF tiles (the capacity gate holds new tiles back), transfers of a few partitions at varying
    partition offsets (each uses some of the DMA engines: the engines' timelines diverge and transfers back-fill
    gaps), column blocks of one HBM output (strided views whose extents overlap)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    half = F // 2
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        p0 = (i * 24) % (P - 16)
        nisa.dma_copy(t[p0:p0 + 16, 0:half], x[p0:p0 + 16, half:F])
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 1.5)
        nisa.activation(u, nl.exp, u)
        c = (i % 2) * half
        nisa.dma_copy(out[:, c:c + half], u[:, 0:half])
        nisa.dma_copy(out[8:40, :], u[8:40, :])
    return out


def _cases():
    ts = _load("_ts_for_fast", os.path.join(HERE, "test_scheduler.py"))
    cases = dict(ts._team_cases())
    from trnsim.kernels.library.matmul import tiled_matmul
    r = np.random.default_rng(3)
    b = lambda *s: r.standard_normal(s).astype(BF16)  # noqa: E731
    cases.update({
        "tiled_matmul_512": (tiled_matmul, (b(512, 512), b(512, 512)), (1,)),
        "stream": (stream, (np.zeros((128, 64), np.float32),), (1,), {"n": 300}),
        "pressure": (pressure, (np.zeros((128, 8192), np.float32),), (1,), {"n": 40}),
        "stream_2_cores": (stream, (np.zeros((128, 64), np.float32),), (2,), {"n": 50}),
        # loads and stores on two DMA queues: the engines' round robin (dma_share) over both loops' schedules
        "stream_2_queues": (stream, (np.zeros((128, 512), np.float32),), (1,),
                            {"n": 60, "load": nisa.engine.sync, "store": nisa.engine.scalar}),
        "stream_2_queues_2_cores": (stream, (np.zeros((128, 512), np.float32),), (2,),
                                    {"n": 20, "load": nisa.engine.sync, "store": nisa.engine.gpsimd}),
        # dependent instructions with 1 to 3 SBUF/PSUM operands (their latency counts each access request)
        "operand_chain": (ts.operand_chain, (b(128, 128), b(128, 512)), (1,)),
    })
    try:
        from trnsim.kernels.library.matmul_blocked import blocked_matmul
        cases["blocked_matmul"] = (blocked_matmul, (b(512, 256), b(512, 1024)), (1,))
    except ImportError:
        pass
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_scheduler_matches_the_reference(name):
    if not sched_fast.fast_available():
        pytest.skip("numba is not available: only the reference scheduler runs")
    fn, args, grid, *kw = CASES[name]
    res = run_kernel(fn, args, kw[0] if kw else {}, grid, "trn2", execute=False)
    assert len(res.instructions) > 0
    # the compiled loop does take these records (none has a barrier)
    assert all(sched_fast.use_fast(c, "numba") and sched_fast.encode(c) for c in res.cores)
    # the two-queue cases with the engines' round robin (opt-in, dma_share) on: both loops take its moves
    prev = dma_share.set_enabled("2_queues" in name)
    try:
        ref = schedule(res.cores, impl="python")
        got = schedule(res.cores, impl="numba")
    finally:
        dma_share.set_enabled(prev)
    assert ref.total_ns > 0
    assert_same(ref, got)


def test_barrier_launch_keeps_the_reference_loop_and_matches():
    prog = _load("_tp_for_fast", os.path.join(HERE, "test_programs.py"))
    x = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    res = run_kernel(prog.exchange.fn, (x, True), {}, (2,), "trn2", execute=False)
    assert any(r.opcode == "core_barrier" for r in res.instructions)
    assert all(sched_fast.schedule_core_fast(c, 1.0) is None for c in res.cores)     # barrier: reference
    assert_same(schedule(res.cores, impl="python"), schedule(res.cores, impl="numba"))


def test_auto_uses_the_compiled_loop_for_large_records(monkeypatch):
    if not sched_fast.fast_available():
        pytest.skip("numba is not available")
    res = run_kernel(stream, (np.zeros((128, 64), np.float32),), {"n": 10}, (1,), "trn2", execute=False)
    core = res.cores[0]
    monkeypatch.setattr(sched_fast, "FAST_MIN", 10)
    assert sched_fast.use_fast(core, "auto")
    assert not sched_fast.use_fast(core, "python")
    monkeypatch.setenv("TRNSIM_SCHEDULER", "python")
    assert not sched_fast.use_fast(core)
    monkeypatch.setenv("TRNSIM_SCHEDULER", "fast")
    with pytest.raises(ValueError, match="TRNSIM_SCHEDULER='fast'"):
        schedule(res.cores)


def test_fallback_when_numba_is_missing(monkeypatch):
    res = run_kernel(stream, (np.zeros((128, 64), np.float32),), {"n": 20}, (1,), "trn2", execute=False)
    ref = schedule(res.cores, impl="python")
    monkeypatch.setitem(sched_fast._STATE, "kernels", None)
    monkeypatch.setitem(sched_fast._STATE, "failed", None)
    monkeypatch.setenv("TRNSIM_NO_NUMBA", "1")
    assert not sched_fast.fast_available()
    assert not sched_fast.use_fast(res.cores[0], "numba")
    assert_same(ref, schedule(res.cores, impl="numba"))
    # numba not importable at all: a warning, then the reference loop
    monkeypatch.delenv("TRNSIM_NO_NUMBA")
    monkeypatch.setitem(sched_fast._STATE, "failed", None)
    monkeypatch.setitem(sys.modules, "trnsim.machine.sched_kernels", None)    # import raises ImportError
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.delattr(sys.modules["trnsim.machine"], "sched_kernels", raising=False)
    with pytest.warns(RuntimeWarning, match="compiled scheduler is unavailable"):
        assert not sched_fast.fast_available()
    assert_same(ref, schedule(res.cores, impl="numba"))


def test_fallback_when_the_compiled_loop_fails(monkeypatch):
    res = run_kernel(stream, (np.zeros((128, 64), np.float32),), {"n": 20}, (1,), "trn2", execute=False)
    ref = schedule(res.cores, impl="python")

    class Broken:
        class schedule_arrays:          # noqa: N801 (stands for the compiled function)
            signatures = ()

            def __new__(cls, *a):
                raise TypeError("no matching definition (a numba typing error)")

    monkeypatch.setitem(sched_fast._STATE, "kernels", Broken)
    monkeypatch.setitem(sched_fast._STATE, "failed", None)
    with pytest.warns(RuntimeWarning, match="compiled scheduler failed"):
        got = schedule(res.cores, impl="numba")
    assert_same(ref, got)
    assert sched_fast._STATE["kernels"] is None and "numba typing error" in sched_fast._STATE["failed"]


def test_records_without_columns_give_the_same_timeline(monkeypatch):
    """A core whose column copy does not cover its record (built another way) is encoded from the InstrRecords."""
    if not sched_fast.fast_available():
        pytest.skip("numba is not available")
    from trnsim.machine.record_cols import RecordColumns
    fn, args, grid, *kw = CASES["pressure"]
    res = run_kernel(fn, args, kw[0] if kw else {}, grid, "trn2", execute=False)
    ref = schedule(res.cores, impl="python")
    core = res.cores[0]
    from_cols, _, cols_a = sched_fast.encode(core)
    monkeypatch.setattr(core, "columns", RecordColumns())
    from_recs, _, cols_b = sched_fast.encode(core)
    for key, val in from_cols.items():
        assert np.array_equal(val, from_recs[key]), key
    assert cols_a == cols_b
    assert_same(ref, schedule(res.cores, impl="numba"))
