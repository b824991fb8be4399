"""The Timeline's columns are made lists on their first read (``timeline._Column``) from the blocks appended
since: dict blocks and the scheduler's array blocks (``sched_fast.CoreColumns``) give the same lists, row indices
(``deps``, ``bind``, ``dge``) rebased to the timeline's, whether a column is read before, between or after the
appends; counters given as a function are computed on their first read."""

import numpy as np

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule
from trnsim.machine.timeline import _COLUMNS, _FIELDS, Timeline
from trnsim.targets import get_target

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def _rows(n, t0):
    return dict(core=[0] * n, id=list(range(n)), engine=["vector"] * n, queue=[-1] * n, nqueues=[0] * n,
                opcode=["op"] * n, start=[t0 + k for k in range(n)], data_start=[t0 + k for k in range(n)],
                end=[t0 + k + 1.0 for k in range(n)], done=[t0 + k + 2.0 for k in range(n)], flops=[0] * n,
                nbytes=[0] * n, hbm_bytes=[0] * n, src=[None] * n, dst=[None] * n, loc=[None] * n,
                deps=[(k - 1,) if k else () for k in range(n)], bind=[k - 1 for k in range(n)],
                dge=[(1, 2, 0, t0, t0 + 1.0)])


def test_columns_read_before_between_and_after_appends():
    tg = get_target("trn2")
    a, b = Timeline(tg), Timeline(tg)
    a.extend(_rows(3, 0.0))
    assert a.start == [0.0, 1.0, 2.0]           # read between the appends: extended by the next one
    a.extend(_rows(2, 10.0))
    b.extend(_rows(3, 0.0))
    b.extend(_rows(2, 10.0))                    # read only after both
    assert len(a) == len(b) == 5
    assert b.deps == [(), (0,), (1,), (), (3,)] and b.bind == [-1, 0, 1, -1, 3]
    assert b.dge == [(1, 2, 0, 0.0, 1.0), (4, 2, 0, 10.0, 11.0)]
    assert b.work == [1.0] * 5                  # left out: end - data_start
    assert a == b
    assert [getattr(a, f) for f in _COLUMNS] == [getattr(b, f) for f in _COLUMNS]


def test_counters_are_made_on_first_read():
    tl = Timeline(get_target("trn2"))
    calls = []
    tl.add_counters({(0, "x"): [(0.0, 1)]})
    tl.add_counters(lambda: calls.append(1) or {(0, "y"): [(0.0, 2)]})
    assert calls == []
    assert tl.counters == {(0, "x"): [(0.0, 1)], (0, "y"): [(0.0, 2)]}
    assert calls == [1]
    tl.counters                                  # noqa: B018 (made once)
    assert calls == [1]


def stream2(x, n):
    P, F = x.shape
    pid = nl.program_id(0)
    full = nl.ndarray((P * nl.num_programs(0), F), dtype=x.dtype, buffer=nl.shared_hbm)
    out = full[pid * P:(pid + 1) * P, :]
    for _ in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x, dge_mode=nisa.dge_mode.hwdge)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out, u, dge_mode=nisa.dge_mode.swdge)
    return full


def test_scheduler_blocks_equal_the_same_rows_given_as_lists():
    """A three-core launch: the scheduled Timeline (array blocks) equals one built from its own columns as lists,
    one block per core, with each core's indices local to it (as ``extend`` takes them)."""
    res = run_kernel(stream2, (np.zeros((128, 64), np.float32), 20), {}, (3,), "trn2", execute=False)
    tl = schedule(res.cores)
    ref = schedule(res.cores)
    cols = {f: getattr(ref, f) for f in _COLUMNS}
    assert cols["dge"] and any(d for d in cols["deps"])
    eager = Timeline(ref.target, ref.core_ids, ref.queues_per_core)
    lo = 0
    for c in ref.core_ids:
        hi = lo + sum(1 for k in cols["core"] if k == c)
        part = {f: cols[f][lo:hi] for f in _FIELDS}
        part["deps"] = [tuple(d - lo for d in ds) for ds in part["deps"]]
        part["bind"] = [b - lo if b >= 0 else -1 for b in part["bind"]]
        part["dge"] = [(r - lo,) + tuple(x) for r, *x in cols["dge"] if lo <= r < hi]
        eager.extend(part)
        lo = hi
    eager.add_counters(ref.counters)
    assert eager == tl
    assert tl.total_ns == eager.total_ns and tl.summary() == eager.summary()
