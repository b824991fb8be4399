"""The scheduler's one loop (``sched_events.run`` after ``sched_state.new_state``, fed by ``sched_fast``) gives
identical timelines compiled (numba) and uncompiled (its ``py_func``): every column and counter equal, on the
library and team kernels, random kernels from ``trnsim.isa.fuzz``, random kernels on several DMA queues (with and
without the round robin, with barriers across cores), multi-core launches, barrier launches, kernels that exercise
DMA back-filling, partial DMA engine use and the SBUF capacity gate.  Also: one class of transfers gives the same
timeline with the round robin on and off, barriers complete at the last arrival on every participant and a core
stopped at one goes on from there, odd records (empty, barrier only, records without columns) and the loop without
numba."""

import importlib.util
import os
import random
import subprocess
import sys
import warnings

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
from suite_files import load_file

BF16 = ml_dtypes.bfloat16
HERE = os.path.dirname(__file__)


def assert_same(ref, got):
    """Column by column, naming the first row that differs."""
    assert len(ref) == len(got)
    assert ref.core_ids == got.core_ids
    for f in _FIELDS:
        a, b = getattr(ref, f), getattr(got, f)
        if a != b:
            i = next(k for k in range(len(a)) if a[k] != b[k])
            raise AssertionError(f"column {f!r} differs first at row {i}: first {a[i]!r}, second {b[i]!r}")
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
    ts = load_file("_ts_for_fast", os.path.join(HERE, "test_scheduler.py"))
    cases = dict(ts._team_cases())
    from trnsim.kernels.library.matmul import tiled_matmul
    r = np.random.default_rng(3)
    b = lambda *s: r.standard_normal(s).astype(BF16)  # noqa: E731
    cases.update({
        "tiled_matmul_512": (tiled_matmul, (b(512, 512), b(512, 512)), (1,)),
        "stream": (stream, (np.zeros((128, 64), np.float32),), (1,), {"n": 300}),
        "pressure": (pressure, (np.zeros((128, 8192), np.float32),), (1,), {"n": 40}),
        "stream_2_cores": (stream, (np.zeros((128, 64), np.float32),), (2,), {"n": 50}),
        # loads and stores on two DMA queues: the engines' round robin (sched_events, both builds)
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


def _both(cores):
    """The timeline compiled and uncompiled, checked identical; returns it."""
    ref = schedule(cores, impl="python")
    got = schedule(cores, impl="numba")
    assert_same(ref, got)
    return got


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_and_python_loops_agree(name):
    fn, args, grid, *kw = CASES[name]
    res = run_kernel(fn, args, kw[0] if kw else {}, grid, "trn2", execute=False)
    assert len(res.instructions) > 0
    # the two-queue cases with the engines' round robin (sched_events), the others without it
    prev = dma_share.set_enabled("2_queues" in name)
    try:
        tl = _both(res.cores)
    finally:
        dma_share.set_enabled(prev)
    assert tl.total_ns > 0


# one class of DMA transfers per engine: the round robin has nothing to share, so the loop gives the same timeline
# with it on and off (the earliest in program order first: the gap filling of a loop in program order; the DMA rows
# against a reference model of that rule in test_dma_share.py)
ONE_CLASS = [n for n in CASES if "queues" not in n]


@pytest.mark.parametrize("name", ONE_CLASS)
def test_one_class_gives_the_same_timeline_with_the_round_robin_on_and_off(name):
    fn, args, grid, *kw = CASES[name]
    res = run_kernel(fn, args, kw[0] if kw else {}, grid, "trn2", execute=False)
    assert all(dma_share.queue_classes(c) is None for c in res.cores)
    prev = dma_share.set_enabled(True)
    try:
        a = schedule(res.cores)
        dma_share.set_enabled(False)
        b = schedule(res.cores)
    finally:
        dma_share.set_enabled(prev)
    assert_same(a, b)


def _fuzz_core(seed, target, calls=1500):
    from trnsim.isa.fuzz import Fuzzer
    from trnsim.machine import NeuronCore
    core = NeuronCore(target, execute=False)
    fz = Fuzzer(random.Random(seed), lambda: core, calls_per_core=10 ** 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fz.run(calls)
    return core


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_random_kernels_give_identical_timelines_compiled_and_python(seed):
    core = _fuzz_core(seed, ("trn1", "trn2", "trn3")[seed % 3])
    assert len(core.instructions) > 100
    tl = _both([core])
    assert tl.total_ns > 0


def random_queues(x, seed, n, barrier_every=0):
    """``n`` random loads, Vector instructions and stores over tiles at random partition offsets and widths, each
    transfer on a random DMA queue (trigger engine named or not, each DGE mode): several classes per DMA engine, so
    the engines' round robin (``dma_share``) has transfers of different queues meeting on one engine.  Each program
    of a launch draws its own kernel and stores into its own rows; ``barrier_every``: a barrier of all programs
    every that many steps (on the program's output)."""
    P, F = x.shape
    pid = nl.program_id(0)
    nprog = nl.num_programs(0)
    rng = random.Random(seed + 1000 * pid)
    full = nl.ndarray((P * nprog, F), dtype=x.dtype, buffer=nl.shared_hbm)
    out = full[pid * P:(pid + 1) * P, :]
    E = nisa.engine
    triggers = (None, E.sync, E.scalar, E.gpsimd, E.vector, E.tensor)
    modes = (None, nisa.dge_mode.none, nisa.dge_mode.hwdge, nisa.dge_mode.swdge)
    tiles = []
    for i in range(n):
        if barrier_every and i % barrier_every == barrier_every - 1:
            nisa.core_barrier(out, cores=list(range(nprog)))
        k = rng.random()
        rows = rng.choice((8, 16, 32, 64, 128))
        p0 = rng.randrange(0, P - rows + 1, 8)
        f = rng.choice((16, 128, 512))
        kw = dict(engine=rng.choice(triggers), dge_mode=rng.choice(modes))
        if k < 0.45 or not tiles:
            t = nl.ndarray((P, f), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t[p0:p0 + rows, :], x[p0:p0 + rows, 0:f], **kw)
            tiles.append((t, f))
        elif k < 0.75:
            t, tf = rng.choice(tiles)
            u = nl.ndarray((P, tf), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
            tiles.append((u, tf))
        else:
            t, tf = rng.choice(tiles)
            nisa.dma_copy(out[p0:p0 + rows, 0:tf], t[p0:p0 + rows, :], **kw)
    return full


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("target", ["trn2", "trn3"])
@pytest.mark.parametrize("round_robin", [False, True])
def test_random_kernels_with_several_dma_queues(seed, target, round_robin):
    """Random kernels whose transfers are on several DMA queues: identical timelines compiled and uncompiled, with
    the engines' round robin (NeuronCore-v2/v3; trn3 serves the earliest in program order first) and without."""
    x = np.zeros((128, 512), np.float32)
    res = run_kernel(random_queues, (x, seed, 160), {}, (1,), target, execute=False)
    queues = {r.dge[1] if r.dge else -1 for r in res.cores[0].instructions if r.engine == "dma"}
    assert len(queues) >= 4                              # several named queues and the unnamed one
    prev = dma_share.set_enabled(round_robin)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            tl = _both(res.cores)
    finally:
        dma_share.set_enabled(prev)
    assert tl.total_ns > 0
    if round_robin:                                      # the round robin moved the transfers (not on trn3)
        dma_share.set_enabled(False)
        try:
            gap_filling = _both(res.cores)
        finally:
            dma_share.set_enabled(prev)
        moved = [r for r, e in enumerate(tl.engine) if e == "dma" and tl.end[r] != gap_filling.end[r]]
        assert bool(moved) == (target == "trn2")


@pytest.mark.parametrize("target", ["trn2", "trn3"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_kernels_with_barriers_and_several_dma_queues(seed, target):
    """Random kernels on three cores with a barrier every 20 steps and transfers on several DMA queues: identical
    timelines compiled and uncompiled; every barrier starts at the same time on every core."""
    x = np.zeros((128, 512), np.float32)
    res = run_kernel(random_queues, (x, seed, 120, 20), {}, (3,), target, execute=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tl = _both(res.cores)
    bars = {}
    for k in range(len(tl)):
        if tl.opcode[k] == "core_barrier":
            bars.setdefault(tl.core[k], []).append(tl.start[k])
    assert len(bars) == 3 and all(len(v) == 6 for v in bars.values())
    for r in range(6):
        assert len({bars[c][r] for c in bars}) == 1
    for r in range(len(tl)):                             # each row after what it waits for
        for d in tl.deps[r]:
            assert tl.start[r] >= tl.done[d] - 1e-6


def test_random_kernels_on_several_cores_of_a_chip():
    """Four fuzz-generated cores on one chip: their HBM transfers share the chip's peak (hbm_share rounds)."""
    from trnsim.machine import Chip, NeuronCore
    chip = Chip("trn2")
    cores = []
    for k in range(4):
        core = NeuronCore("trn2", execute=False, chip=chip, core_id=k)
        from trnsim.isa.fuzz import Fuzzer
        fz = Fuzzer(random.Random(100 + k), lambda: core, calls_per_core=10 ** 9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fz.run(800)
        cores.append(core)
    tl = _both(cores)
    assert sorted(tl.core_ids) == [0, 1, 2, 3]


def barriers(x, rounds):
    """Program p does p + 1 times as much work per round, then all meet at a barrier; ``rounds`` rounds."""
    pid = nl.program_id(0)
    n = nl.num_programs(0)
    P, F = x.shape
    full = nl.ndarray((P * n, F), dtype=x.dtype, buffer=nl.shared_hbm)
    out = full[pid * P:(pid + 1) * P, :]
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    for _ in range(rounds):
        for _ in range(3 * (pid + 1)):
            nisa.tensor_scalar(t, t, nl.multiply, 1.0)
        nisa.dma_copy(out, t)
        nisa.core_barrier(out, cores=list(range(n)))     # waits for this core's store of the round
    return full


@pytest.mark.parametrize("ncores", [2, 4])
def test_barriers_complete_at_the_last_arrival_on_every_core(ncores):
    x = np.zeros((128, 256), np.float32)
    res = run_kernel(barriers, (x, 5), {}, (ncores,), "trn2", execute=False)
    tl = _both(res.cores)
    bars = {}
    prev_end = {}
    for k in range(len(tl)):
        c = tl.core[k]
        if tl.opcode[k] == "core_barrier":
            bars.setdefault(c, []).append((k, prev_end.get(c, 0.0)))
        else:
            prev_end[c] = max(prev_end.get(c, 0.0), tl.end[k])
    assert len(bars) == ncores and all(len(v) == 5 for v in bars.values())
    for r in range(5):
        starts = [tl.start[bars[c][r][0]] for c in bars]
        arrivals = [bars[c][r][1] for c in bars]
        # one start on every participant, after every participant's work of the round
        assert max(starts) == min(starts)
        assert starts[0] >= max(arrivals)
    # the slowest program (most work per round) sets the pace of all, the least loaded included
    step = min(tl.end[k] - tl.start[k] for k in range(len(tl)) if tl.opcode[k] == "tensor_scalar")
    assert tl.start[bars[0][4][0]] >= 5 * 3 * ncores * step


def test_a_core_stopped_at_a_barrier_goes_on_from_there(monkeypatch):
    """The loop keeps its state at a barrier (sched_state): each run of a core goes on from where it stopped (the
    rows it placed stay placed), never again from row 0, and stops once per barrier, so a launch with many barriers
    costs one pass over each record."""
    x = np.zeros((128, 256), np.float32)
    res = run_kernel(barriers, (x, 6), {}, (3,), "trn2", execute=False)
    starts = {}
    orig = sched_fast.CoreRun.run

    def run(self):
        starts.setdefault(self.core.core_id, []).append(int(self.state[-2][12]))     # rows placed so far
        return orig(self)

    monkeypatch.setattr(sched_fast.CoreRun, "run", run)
    for impl in ("numba", "python"):
        starts.clear()
        tl = schedule(res.cores, impl=impl)
        for c, placed in starts.items():
            recs = res.cores[c].instructions
            bar_rows = [k for k, r in enumerate(recs) if r.opcode == "core_barrier"]
            assert len(placed) == 1 + len(bar_rows) and placed[0] == 0, (impl, c, placed)
            # at each barrier it stopped at, every row before it is placed (each waits for the previous barrier's
            # store or is on its way) and the ones after not all
            for k, row in enumerate(bar_rows):
                assert row <= placed[k + 1] < len(recs), (impl, c, placed)
    assert len(tl) == len(res.instructions)


def test_barrier_exchange_launch():
    prog = load_file("_tp_for_fast", os.path.join(HERE, "test_programs.py"))
    x = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    res = run_kernel(prog.exchange.fn, (x, True), {}, (2,), "trn2", execute=False)
    assert any(r.opcode == "core_barrier" for r in res.instructions)
    _both(res.cores)


def test_an_unknown_scheduler_choice_is_refused(monkeypatch):
    res = run_kernel(stream, (np.zeros((128, 64), np.float32),), {"n": 2}, (1,), "trn2", execute=False)
    monkeypatch.setenv("TRNSIM_SCHEDULER", "fast")
    with pytest.raises(ValueError, match="TRNSIM_SCHEDULER='fast'"):
        schedule(res.cores)
    monkeypatch.setenv("TRNSIM_SCHEDULER", "python")
    assert sched_fast.mode() == "python"
    monkeypatch.setenv("TRNSIM_SCHEDULER", "auto")
    assert sched_fast.mode() == "numba"


def test_empty_and_barrier_only_records():
    from trnsim.machine import NeuronCore
    empty = NeuronCore("trn2", execute=False)
    tl = _both([empty])
    assert len(tl) == 0 and tl.total_ns == 0
    lone = NeuronCore("trn2", execute=False)
    lone.barrier([0])                         # a record without a single operand
    lone.barrier([0])
    tl = _both([lone])
    assert tl.opcode == ["core_barrier"] * 2 and tl.start[1] >= tl.end[0]


def test_an_unknown_memory_kind_is_named():
    core = run_kernel(stream, (np.zeros((128, 64), np.float32),), {"n": 2}, (1,), "trn2", execute=False).cores[0]
    bid = next(iter(core.buffers))
    core.buffers[bid] = ("nvme",) + tuple(core.buffers[bid][1:])
    with pytest.raises(ValueError, match=f"buffer {bid} is in memory 'nvme'"):
        schedule([core])


def test_the_loop_runs_without_numba():
    """numba not importable: the same functions run as plain Python (sched_jit) and give the same timeline."""
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np, trnsim\n"
        "from trnsim.kernels.jit import run_kernel\n"
        "from trnsim.machine import sched_fast, schedule\n"
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('tsf', {os.path.join(HERE, 'test_sched_fast.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert not sched_fast.fast_available()\n"
        "res = run_kernel(m.pressure, (np.zeros((128, 8192), np.float32),), {'n': 6}, (1,), 'trn2', execute=False)\n"
        "tl = schedule(res.cores)\n"
        "print(repr((tl.start, tl.end, tl.done, tl.data_start)))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(HERE))] + sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = run_kernel(pressure, (np.zeros((128, 8192), np.float32),), {"n": 6}, (1,), "trn2", execute=False)
    tl = schedule(res.cores)
    assert out.stdout.strip().splitlines()[-1] == repr((tl.start, tl.end, tl.done, tl.data_start))


def test_records_without_columns_give_the_same_timeline(monkeypatch):
    """A core whose column copy does not cover its record (built another way) is encoded from the InstrRecords."""
    from trnsim.machine.record_cols import RecordColumns
    fn, args, grid, *kw = CASES["pressure"]
    res = run_kernel(fn, args, kw[0] if kw else {}, grid, "trn2", execute=False)
    ref = schedule(res.cores)
    core = res.cores[0]
    from_cols, _, cols_a = sched_fast.encode(core)
    monkeypatch.setattr(core, "columns", RecordColumns())
    from_recs, _, cols_b = sched_fast.encode(core)
    for key, val in from_cols.items():
        if isinstance(val, np.ndarray):
            assert np.array_equal(val, from_recs[key]), key
        else:
            assert val == from_recs[key], key
    # the record's own columns (lists, tuples or arrays: the Timeline makes them lists when it reads them)
    norm = lambda c: {k: None if v is None else list(v.tolist() if isinstance(v, np.ndarray) else v)  # noqa: E731
                      for k, v in c.items()}
    assert norm(cols_a) == norm(cols_b)
    assert_same(ref, _both(res.cores))
