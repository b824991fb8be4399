"""Round robin among the queues of a DMA engine (NeuronCore-v2/v3; docs/hardware.md "DMA in detail", dma-overview):
``trnsim.machine.dma_share``'s processor sharing against hand-computed ends, and the scheduler's fixed point
(both loops give the same timeline; trn3 keeps the gap filling; one queue stays in order; the engines' busy time
is unchanged)."""

import warnings

import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import dma_share, sched_fast, schedule
from trnsim.targets import get_target

trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

E = nisa.engine


@pytest.fixture(autouse=True)
def round_robin_on():
    """The round robin is opt-in (``TRNSIM_DMA_ROUND_ROBIN``): on for this file."""
    prev = dma_share.set_enabled(True)
    yield
    dma_share.set_enabled(prev)


def test_off_by_default_the_gap_filling_stays():
    dma_share.set_enabled(False)
    x = np.zeros((128, 2048), np.float32)
    tl = _timeline(_two_loads(nisa.engine.sync, nisa.engine.scalar), x, x)
    a, b = _dma(tl)[:2]
    assert a.end == pytest.approx(a.data_start + a.work)      # the first moves alone, the second fills after it
    assert b.data_start == pytest.approx(a.end) and b.end == pytest.approx(b.data_start + b.work)


def _sim(arrive, work, cls, root=None, prev_end=None, groups=None):
    m = len(arrive)
    groups = groups or [np.arange(m)]
    return dma_share.simulate(arrive, prev_end or [0.0] * m, work, cls, groups, root or [-1] * m)


# -- the processor-sharing model ------------------------------------------------------------------------------
def test_two_queues_ready_together_end_together_at_twice_the_time():
    _, ds, end = _sim([5.0, 5.0], [10.0, 10.0], [1, 2])
    assert ds.tolist() == [5.0, 5.0] and end.tolist() == pytest.approx([25.0, 25.0])


def test_one_queue_stays_in_program_order():
    # a named queue: the second waits for the first even though it arrived first
    _, ds, end = _sim([3.0, 0.0], [10.0, 4.0], [1, 1])
    assert ds.tolist() == [3.0, 13.0] and end.tolist() == pytest.approx([13.0, 17.0])
    # no named queue (class 0): served among themselves as before, the earliest in program order first and a
    # later one in the time left (it moves while the first has not arrived)
    _, ds, end = _sim([3.0, 0.0], [10.0, 4.0], [0, 0])
    assert ds.tolist() == [3.0, 0.0] and end.tolist() == pytest.approx([13.0, 14.0])


def test_a_later_transfer_of_another_queue_slows_the_first():
    # A alone from 0 to 4 (6 of 10 left), then A and B at half the rate each: B's 3 take 6 (to 10), A's last 3
    # alone to 13; the engine is busy 13 = 10 + 3 in all, as with one transfer after the other
    _, ds, end = _sim([0.0, 4.0], [10.0, 3.0], [1, 2])
    assert ds.tolist() == [0.0, 4.0] and end.tolist() == pytest.approx([13.0, 10.0])
    # three classes at once: a third each
    _, _, end = _sim([0.0, 0.0, 0.0], [6.0, 6.0, 6.0], [0, 1, 5])
    assert end.tolist() == pytest.approx([18.0, 18.0, 18.0])


def test_the_no_queue_class_takes_one_share():
    # two transfers of no named queue and one of queue 1: the queue gets half, the two others the other half
    # between them (the first of them first): queue 1 ends at 20 with the first; the second alone after
    _, _, end = _sim([0.0, 0.0, 0.0], [10.0, 10.0, 10.0], [0, 0, 1])
    assert end.tolist() == pytest.approx([20.0, 30.0, 20.0])


def test_engines_serving_other_transfers_are_separate():
    # A on both groups of engines, B only on the second: A's part on the first moves alone (ends at 10), on the
    # second it shares with B (ends at 20): A ends at 20
    _, ds, end = _sim([0.0, 0.0], [10.0, 10.0], [1, 2], groups=[np.array([0]), np.array([0, 1])])
    assert ds.tolist() == [0.0, 0.0] and end.tolist() == pytest.approx([20.0, 20.0])


def test_a_slowed_transfer_delays_what_waits_for_it_in_the_same_pass():
    # C (queue 3) arrived 2 ns after A's end in the last schedule (A its root); A is now slowed by B to 20, so C
    # arrives at 22 and moves alone
    arr, _, end = _sim([0.0, 0.0, 12.0], [10.0, 10.0, 5.0], [1, 2, 3], root=[-1, -1, 0], prev_end=[10.0, 0, 0])
    assert arr[2] == pytest.approx(22.0) and end.tolist() == pytest.approx([20.0, 20.0, 27.0])


# -- the scheduler ------------------------------------------------------------------------------------------------
def _two_loads(e0, e1, rows=128):
    def k(a, b):
        x = nl.ndarray((rows, 2048), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((rows, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(x, a[0:rows, :], engine=e0)
        nisa.dma_copy(y, b[0:rows, :], engine=e1)
        return None
    return k


def _timeline(kernel, *arrays, target="trn2", **kw):
    """The reference schedule, checked identical to the compiled one when numba is there."""
    res = run_kernel(kernel, arrays, kw, (1,), target, execute=False)
    tl = schedule(res.cores, impl="python")
    if sched_fast.fast_available():
        assert schedule(res.cores, impl="numba") == tl
    return tl


def _dma(tl):
    return [r for r in tl.rows() if r.engine == "dma"]


X = np.zeros((128, 2048), np.float32)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_two_queues_on_the_same_engines_end_together(target):
    a, b = _dma(_timeline(_two_loads(E.sync, E.scalar), X, X, target=target))
    tg = get_target(target)
    assert a.work == b.work > 0
    # both ready at the fixed cost, both on all 16 engines: start + 2 x the engine time, together
    assert a.data_start == b.data_start == tg.dma_fixed_ns
    assert a.end == pytest.approx(tg.dma_fixed_ns + 2 * a.work) and b.end == pytest.approx(a.end)


def test_one_queue_is_served_in_order_and_trn3_keeps_the_gap_filling():
    for target, e1 in (("trn2", E.sync), ("trn2", None), ("trn3", E.scalar)):
        a, b = _dma(_timeline(_two_loads(E.sync if e1 is not None else None, e1), X, X, target=target))
        f = get_target(target).dma_fixed_ns
        assert a.end == pytest.approx(f + a.work), (target, e1)
        assert b.data_start == pytest.approx(a.end) and b.end == pytest.approx(f + 2 * a.work)


def test_other_engines_are_not_shared():
    # 64 partitions each, on engines 0-7 and 8-15: nothing shared, both move at their own rate
    def k(a, b):
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(x[0:64, :], a[0:64, :], engine=E.sync)
        nisa.dma_copy(x[64:128, :], b[64:128, :], engine=E.scalar)
        return None
    a, b = _dma(_timeline(k, X, X))
    assert (a.queue, a.nqueues, b.queue, b.nqueues) == (0, 8, 8, 8)
    assert a.end == b.end == pytest.approx(a.data_start + a.work)


def test_the_dma_busy_time_is_that_of_the_gap_filling():
    rr = _timeline(_two_loads(E.sync, E.scalar), X, X)
    gf = _timeline(_two_loads(None, None), X, X)
    assert [r.end for r in _dma(rr)] != [r.end for r in _dma(gf)]          # individual ends differ
    assert rr.busy_ns()[(0, "dma")] == pytest.approx(gf.busy_ns()[(0, "dma")])
    assert rr.dma_utilisation == pytest.approx(gf.dma_utilisation)
    assert rr.total_ns == pytest.approx(gf.total_ns)


def stream2(x, n, load, store):
    """n tiles: load (queue of ``load``), one Vector instruction, store (queue of ``store``)."""
    C = x.shape[1]
    out = nl.ndarray((128 * n, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128, :], engine=load)
        u = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out[i * 128:(i + 1) * 128, :], u, engine=store)
    return out


def _own_share(tl):
    """A one-core timeline's DMA rows and the columns ``dma_share`` reads."""
    cols = {f: getattr(tl, f) for f in ("start", "data_start", "end", "done", "work", "queue", "nqueues",
                                        "engine", "bind", "deps", "dge")}
    rows = np.array([i for i, e in enumerate(tl.engine) if e == "dma"])
    return rows, cols


@pytest.mark.parametrize("target, n", [("trn1", 24), ("trn2", 48)])
def test_a_two_queue_stream_is_its_own_round_robin(target, n):
    x = np.zeros((128 * n, 512), np.float32)
    res = run_kernel(stream2, (x, n, E.sync, E.scalar), {}, (1,), target, execute=False)
    rows, cls = dma_share.queue_classes(res.cores[0])
    recs = res.cores[0].instructions
    assert cls.tolist() == [1 + recs[r].dge[1] for r in rows.tolist()] and len(set(cls.tolist())) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # it reached its fixed point
        tl = schedule(res.cores, impl="python")
    if sched_fast.fast_available():
        assert schedule(res.cores, impl="numba") == tl
    r2, cols = _own_share(tl)
    assert r2.tolist() == rows.tolist()
    tg = get_target(target)
    # replaying the engines' rule on the schedule's own arrivals, with no propagation, gives its data starts
    # and ends: the timeline is the round robin of its transfers
    arr = dma_share.arrivals(cols, rows, tg.dma_fixed_ns)
    _, ds, end = dma_share.simulate(arr, [0.0] * len(rows), [cols["work"][r] for r in rows], cls,
                                    [np.arange(len(rows))], [-1] * len(rows))
    assert ds.tolist() == pytest.approx([tl.data_start[r] for r in rows], rel=1e-9, abs=1e-6)
    assert end.tolist() == pytest.approx([tl.end[r] for r in rows], rel=1e-9, abs=1e-6)
    # and it differs from the gap filling: stores moving while later loads move share the engines with them
    gf = schedule(run_kernel(stream2, (x, n, None, None), {}, (1,), target, execute=False).cores)
    assert [tl.end[r] for r in rows] != [gf.end[r] for r in rows]


def test_no_fixed_point_falls_back_to_the_gap_filling(monkeypatch):
    n = 24
    x = np.zeros((128 * n, 512), np.float32)
    res = run_kernel(stream2, (x, n, E.sync, E.scalar), {}, (1,), "trn2", execute=False)
    monkeypatch.setattr(dma_share, "MAX_ROUNDS", 0)          # it needs one more schedule
    with pytest.warns(RuntimeWarning, match="did not reach a fixed point in 0 rounds"):
        tl = schedule(res.cores, impl="python")
    monkeypatch.setattr(dma_share, "applies", lambda tg: False)
    assert schedule(res.cores, impl="python") == tl


def stream_big(x, n, load, store):
    """Each program loads and stores its own [128, F] blocks on the queues of ``load`` and ``store``."""
    P, F = x.shape
    pid = nl.program_id(0)
    out = nl.ndarray((P * nl.num_programs(0), F), dtype=x.dtype, buffer=nl.shared_hbm)
    for _ in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x, engine=load)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out[pid * P:(pid + 1) * P, :], u, engine=store)
    return out


def test_with_the_chip_hbm_shared_too():
    # eight cores streaming on trn2 ask more than the chip's 2,900 GB/s (hbm_share) and each core's loads and
    # stores are on two queues (round robin): both passes reach their fixed point together
    x = np.zeros((128, 4096), np.float32)
    tg = get_target("trn2")
    res = run_kernel(stream_big, (x, 6, E.sync, E.scalar), {}, (8,), "trn2", execute=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tl = schedule(res.cores, impl="python")
    if sched_fast.fast_available():
        from tests.machine.test_sched_fast import assert_same
        assert_same(tl, schedule(res.cores, impl="numba"))
    cap = tg.hbm_peak_bytes_per_s * 1e-9
    hbm = sum(tl.hbm_bytes)
    assert tl.total_ns >= hbm / cap + tg.dma_fixed_ns          # the chip moves no more than its peak
    one = schedule(run_kernel(stream_big, (x, 6, E.sync, E.scalar), {}, (1,), "trn2", execute=False).cores)
    # the HBM sharing stretched transfers' engine time (on one core nothing is stretched)
    w1 = max(w for w, e in zip(one.work, one.engine) if e == "dma")
    assert max(w for w, e in zip(tl.work, tl.engine) if e == "dma") > w1 * (1 + 1e-6)
    # each core's transfers are the round robin of their own arrivals and (HBM-stretched) engine times
    n = len(tl.engine)
    for c in range(8):
        rows = np.array([i for i in range(n) if tl.core[i] == c and tl.engine[i] == "dma"])
        _, cls = dma_share.queue_classes(res.cores[c])
        cols = {"start": tl.start, "dge": tl.dge}
        arr = dma_share.arrivals(cols, rows, tg.dma_fixed_ns)
        _, ds, end = dma_share.simulate(arr, [0.0] * len(rows), [tl.work[r] for r in rows], cls,
                                        [np.arange(len(rows))], [-1] * len(rows))
        assert end.tolist() == pytest.approx([tl.end[r] for r in rows], rel=1e-9, abs=1e-6)
