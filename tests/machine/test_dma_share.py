"""Round robin among the queues of a DMA engine (NeuronCore-v2/v3; docs/hardware.md "DMA in detail", dma-overview),
modelled in simulated time by ``trnsim.machine.sched_events``: each schedule's transfers are the processor sharing
of their own arrivals (a reference fluid model below, checked against hand-computed ends), both builds give the same
timeline, trn3, one queue and the round robin off serve the earliest transfer in program order first (the same
reference model without the sharing), a launch with barriers has the round robin too, the engines' busy time is
unchanged, and a long stream on two queues is scheduled once (no rescheduling, no warning)."""

import heapq
import warnings

import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import dma_share, sched_fast, schedule
from trnsim.targets import get_target
from tests.machine.test_sched_fast import assert_same

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


def test_on_by_default_and_off_keeps_the_gap_filling(monkeypatch):
    from trnsim import config
    monkeypatch.delenv("TRNSIM_DMA_ROUND_ROBIN", raising=False)
    config.reset("dma_round_robin")
    assert dma_share.enabled()
    dma_share.set_enabled(False)
    x = np.zeros((128, 2048), np.float32)
    tl = _timeline(_two_loads(nisa.engine.sync, nisa.engine.scalar), x, x)
    a, b = _dma(tl)[:2]
    assert a.end == pytest.approx(a.data_start + a.work)      # the first moves alone, the second fills after it
    assert b.data_start == pytest.approx(a.end) and b.end == pytest.approx(b.data_start + b.work)


def _ps(arrive, work, cls, groups, rr=True):
    """Reference model: processor sharing of a core's DMA engines among the classes with a transfer arrived, event
    by event (``dma_share``'s rule, written independently of ``sched_events``).  Per transfer in program order:
    ``arrive``, ``work`` (engine time) and ``cls`` (0: no named queue); ``groups``: the transfers served by each
    group of DMA engines serving the same transfers.  ``rr`` False: no round robin (NeuronCore-v4, or the switch
    off): a group serves only the earliest in program order of the transfers ready on it (the gap filling of a
    loop in program order).  Returns ``(data start, end)`` per transfer."""
    m = len(arrive)
    ds = [float("inf")] * m
    end = [float("nan")] * m
    left = [0] * m
    where = [[] for _ in range(m)]
    ncls = max(cls) + 1 if m else 1
    gs = []
    for g, members in enumerate(groups):
        members = [int(x) for x in members]
        fifo = {}
        for li, i in enumerate(members):
            left[i] += 1
            where[i].append((g, li))
            if cls[i]:
                fifo.setdefault(cls[i], []).append(li)
        gs.append((members, sorted(fifo.items()), [0] * ncls, [], [False] * len(members),
                   [float(work[i]) for i in members], [None] * len(members)))
    ev = sorted((float(a), i) for i, a in enumerate(arrive))
    ndone = 0
    t = ev[0][0] if ev else 0.0
    k_ev = 0
    while ndone < m:
        while k_ev < m and ev[k_ev][0] <= t:
            i = ev[k_ev][1]
            k_ev += 1
            for g, li in where[i]:
                gs[g][4][li] = True
                if cls[i] == 0:
                    heapq.heappush(gs[g][3], li)
        best = float("inf")
        active = []
        for g, (members, fifo, head, pool, arrived, rem, first) in enumerate(gs):
            serv = [pool[0]] if pool else []
            for c, q in fifo:
                if head[c] < len(q) and arrived[q[head[c]]]:
                    serv.append(q[head[c]])
            if serv and not rr:
                serv = [min(serv)]
            if serv:
                jmin = min(range(len(serv)), key=lambda j: rem[serv[j]])
                active.append((g, serv, jmin))
                best = min(best, rem[serv[jmin]] * len(serv))
        if not active:
            t = ev[k_ev][0]
            continue
        dt_arr = ev[k_ev][0] - t if k_ev < m else float("inf")
        dt = min(best, dt_arr)
        for g, serv, _ in active:
            rem, first = gs[g][5], gs[g][6]
            for li in serv:
                if first[li] is None:
                    first[li] = t
                rem[li] -= dt / len(serv)
        t += dt
        for g, serv, jmin in active:
            members, fifo, head, pool, arrived, rem, first = gs[g]
            if rem[serv[jmin]] * len(serv) <= 1e-9 * max(1.0, work[members[serv[jmin]]]):
                rem[serv[jmin]] = 0.0
            for li in serv:
                i = members[li]
                if rem[li] > 1e-9 * max(1.0, work[i]):
                    continue
                rem[li] = 0.0
                if cls[i] == 0:
                    heapq.heappop(pool)
                else:
                    head[cls[i]] += 1
                ds[i] = min(ds[i], first[li])
                left[i] -= 1
                if left[i] == 0:
                    end[i] = t
                    ndone += 1
    return np.array(ds), np.array(end)


def _sim(arrive, work, cls, groups=None):
    return _ps(arrive, work, cls, groups or [np.arange(len(arrive))])


def _own_round_robin(tl, core_id, cls, fixed, rr=True):
    """The round robin (``rr``; else the program-order priority) of a timeline's own arrivals (each transfer's
    descriptors ready plus the fixed cost) and engine times, on the groups of DMA engines its transfers use:
    ``(rows, data starts, ends)``."""
    n = len(tl.engine)
    rows = [i for i in range(n) if tl.core[i] == core_id and tl.engine[i] == "dma"]
    ge = {r: e for (c, r), (_, _, _, e) in _dge_by_row(tl).items() if c == core_id}
    arr = [(ge[r] if r in ge else tl.start[r]) + fixed for r in rows]
    q0 = np.array([tl.queue[r] for r in rows])
    nuse = np.array([tl.nqueues[r] for r in rows])
    groups = {}
    for q in range(16):
        sel = np.flatnonzero((q - q0) % 16 < nuse)
        if len(sel):
            groups.setdefault(sel.tobytes(), sel)
    ds, end = _ps(arr, [tl.work[r] for r in rows], list(cls), list(groups.values()), rr=rr)
    return rows, ds, end


def _dge_by_row(tl):
    """(core, row) -> (mode, unit, start, end) of the rows with descriptor generation."""
    out = {}
    base = {}
    for i, c in enumerate(tl.core):
        base.setdefault(c, i)
    for r, m, u, s0, e0 in tl.dge:
        out[(tl.core[r], r)] = (m, u, s0, e0)
    return out


# -- the processor-sharing model ------------------------------------------------------------------------------
def test_two_queues_ready_together_end_together_at_twice_the_time():
    ds, end = _sim([5.0, 5.0], [10.0, 10.0], [1, 2])
    assert ds.tolist() == [5.0, 5.0] and end.tolist() == pytest.approx([25.0, 25.0])


def test_one_queue_stays_in_program_order():
    # a named queue: the second waits for the first even though it arrived first
    ds, end = _sim([3.0, 0.0], [10.0, 4.0], [1, 1])
    assert ds.tolist() == [3.0, 13.0] and end.tolist() == pytest.approx([13.0, 17.0])
    # no named queue (class 0): served among themselves as before, the earliest in program order first and a
    # later one in the time left (it moves while the first has not arrived)
    ds, end = _sim([3.0, 0.0], [10.0, 4.0], [0, 0])
    assert ds.tolist() == [3.0, 0.0] and end.tolist() == pytest.approx([13.0, 14.0])


def test_a_later_transfer_of_another_queue_slows_the_first():
    # A alone from 0 to 4 (6 of 10 left), then A and B at half the rate each: B's 3 take 6 (to 10), A's last 3
    # alone to 13; the engine is busy 13 = 10 + 3 in all, as with one transfer after the other
    ds, end = _sim([0.0, 4.0], [10.0, 3.0], [1, 2])
    assert ds.tolist() == [0.0, 4.0] and end.tolist() == pytest.approx([13.0, 10.0])
    # three classes at once: a third each
    _, end = _sim([0.0, 0.0, 0.0], [6.0, 6.0, 6.0], [0, 1, 5])
    assert end.tolist() == pytest.approx([18.0, 18.0, 18.0])


def test_the_no_queue_class_takes_one_share():
    # two transfers of no named queue and one of queue 1: the queue gets half, the two others the other half
    # between them (the first of them first): queue 1 ends at 20 with the first; the second alone after
    _, end = _sim([0.0, 0.0, 0.0], [10.0, 10.0, 10.0], [0, 0, 1])
    assert end.tolist() == pytest.approx([20.0, 30.0, 20.0])


def test_engines_serving_other_transfers_are_separate():
    # A on both groups of engines, B only on the second: A's part on the first moves alone (ends at 10), on the
    # second it shares with B (ends at 20): A ends at 20
    ds, end = _sim([0.0, 0.0], [10.0, 10.0], [1, 2], groups=[np.array([0]), np.array([0, 1])])
    assert ds.tolist() == [0.0, 0.0] and end.tolist() == pytest.approx([20.0, 20.0])


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


@pytest.mark.parametrize("target, n", [("trn1", 24), ("trn2", 48)])
def test_a_two_queue_stream_is_its_own_round_robin(target, n):
    x = np.zeros((128 * n, 512), np.float32)
    res = run_kernel(stream2, (x, n, E.sync, E.scalar), {}, (1,), target, execute=False)
    rows, cls = dma_share.queue_classes(res.cores[0])
    recs = res.cores[0].instructions
    assert cls.tolist() == [1 + recs[r].dge[1] for r in rows.tolist()] and len(set(cls.tolist())) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tl = schedule(res.cores, impl="python")
    if sched_fast.fast_available():
        assert schedule(res.cores, impl="numba") == tl
    # the round robin of the schedule's own arrivals and engine times gives its data starts and ends
    r2, ds, end = _own_round_robin(tl, 0, cls, get_target(target).dma_fixed_ns)
    assert r2 == rows.tolist()
    assert ds.tolist() == pytest.approx([tl.data_start[r] for r in rows], rel=1e-9, abs=1e-6)
    assert end.tolist() == pytest.approx([tl.end[r] for r in rows], rel=1e-9, abs=1e-6)
    # and it differs from the gap filling: stores moving while later loads move share the engines with them
    gf = schedule(run_kernel(stream2, (x, n, None, None), {}, (1,), target, execute=False).cores)
    assert [tl.end[r] for r in rows] != [gf.end[r] for r in rows]


def stream_one_output(x, n, load, store):
    """``n`` tiles: load a fresh tile, one Vector instruction into another, store it into the one output (the
    stores wait for each other through it), on the queues of ``load`` and ``store``."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for _ in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x, engine=load)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out, u, engine=store)
    return out


@pytest.mark.parametrize("n", [300, 2000])
def test_a_long_stream_on_two_queues_is_scheduled_once(n):
    # the stream the rescheduling rounds found no fixed point for (3,996 of 4,000 transfers still moving after
    # twelve schedules): scheduled in simulated-time order, each instruction placed once, no warning
    x = np.zeros((128, 512), np.float32)
    res = run_kernel(stream_one_output, (x, n, E.sync, E.scalar), {}, (1,), "trn2", execute=False)
    rows, cls = dma_share.queue_classes(res.cores[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tl = schedule(res.cores)
    if n <= 300:                                             # (the uncompiled loop on the short one)
        assert_same(schedule(res.cores, impl="python"), tl)
    _, ds, end = _own_round_robin(tl, 0, cls, get_target("trn2").dma_fixed_ns)
    assert ds.tolist() == pytest.approx([tl.data_start[r] for r in rows], rel=1e-9, abs=1e-6)
    assert end.tolist() == pytest.approx([tl.end[r] for r in rows], rel=1e-9, abs=1e-6)
    # what waits for a transfer starts after it ends: each store after its tile's compute, each compute after
    # its load, under the shared engines' ends
    for r in range(len(tl.engine)):
        for d in tl.deps[r]:
            assert tl.start[r] >= tl.done[d] - 1e-6
    # the engines never idle while a transfer has arrived (work conserving), so the DMA busy time is at least
    # the engine time of the loads or of the stores alone
    assert tl.busy_ns()[(0, "dma")] >= sum(tl.work[r] for r in rows[::2]) - 1e-6


def queues_then_barrier(x):
    """Two loads on two queues (they share the engines under round robin), a store, then a barrier of the cores."""
    pid = nl.program_id(0)
    n = nl.num_programs(0)
    P, F = x.shape
    full = nl.ndarray((P * n, F), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(a, x, engine=E.sync)
    nisa.dma_copy(b, x, engine=E.scalar)
    nisa.tensor_tensor(a, a, b, op=nl.add)
    nisa.dma_copy(full[pid * P:(pid + 1) * P, :], a, engine=E.sync)
    nisa.core_barrier(full, cores=list(range(n)))
    return full


def test_a_launch_with_barriers_has_the_round_robin_too():
    # the loop stops at a barrier and goes on from there (sched_events): the loads before it share their engines
    x = np.zeros((128, 2048), np.float32)
    res = run_kernel(queues_then_barrier, (x,), {}, (2,), "trn2", execute=False)
    tl = schedule(res.cores, impl="python")
    assert_same(tl, schedule(res.cores, impl="numba"))
    tg = get_target("trn2")
    for c in range(2):
        rows, cls = dma_share.queue_classes(res.cores[c])
        a, b = [tl.row(k) for k in range(len(tl)) if tl.core[k] == c and tl.engine[k] == "dma"][:2]
        assert a.end == pytest.approx(b.end) and a.end == pytest.approx(a.data_start + 2 * a.work)
        r2, ds, end = _own_round_robin(tl, c, cls, tg.dma_fixed_ns)
        assert end.tolist() == pytest.approx([tl.end[r] for r in r2], rel=1e-9, abs=1e-6)
    dma_share.set_enabled(False)                 # the same launch without the round robin: one after the other
    off = schedule(res.cores)
    a, b = _dma(off)[:2]
    assert b.data_start == pytest.approx(a.end)


@pytest.mark.parametrize("target, rr", [("trn3", True), ("trn2", False)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_the_round_robin_the_earliest_in_program_order_is_served(target, rr, seed):
    # NeuronCore-v4 (trn3), or the round robin off: each DMA engine serves the earliest transfer in program order
    # of those ready on it (a named queue's head only), the gap filling of a loop in program order; the reference
    # model gives each transfer's data start and end from the timeline's own arrivals and engine times
    from tests.machine.test_sched_fast import random_queues
    dma_share.set_enabled(rr)
    x = np.zeros((128, 512), np.float32)
    res = run_kernel(random_queues, (x, seed, 160), {}, (1,), target, execute=False)
    rows, cls = dma_share.queue_classes(res.cores[0])
    tl = schedule(res.cores)
    r2, ds, end = _own_round_robin(tl, 0, cls, get_target(target).dma_fixed_ns, rr=False)
    assert r2 == rows.tolist()
    assert ds.tolist() == pytest.approx([tl.data_start[r] for r in rows], rel=1e-9, abs=1e-6)
    assert end.tolist() == pytest.approx([tl.end[r] for r in rows], rel=1e-9, abs=1e-6)


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
    for c in range(8):
        _, cls = dma_share.queue_classes(res.cores[c])
        rows, ds, end = _own_round_robin(tl, c, cls, tg.dma_fixed_ns)
        assert end.tolist() == pytest.approx([tl.end[r] for r in rows], rel=1e-9, abs=1e-6)
