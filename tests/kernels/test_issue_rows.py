"""The general issue path's bookkeeping (issue 29): an instruction's fields appended as one row and made columns
when first read (``record_cols.RecordColumns.pend``), a tile's live-range entry kept on its buffer
(``Buffer.live``), a call site's last key compared by identity (``issue_cache._site_function``).  None may change
a record, a live range, a table or a value: each run is compared with the same kernel without site functions
(``KEY_AFTER`` out of reach), without the issue cache, or with NumPy in float64."""

import itertools

import numpy as np
import pytest

import trnsim
from trnsim.kernels import isa_api, issue_cache, loop_replay
from trnsim.kernels.context import current
from trnsim.kernels.jit import run_kernel
from trnsim.machine.record_cols import ROW_FIELDS, RecordColumns
from trnsim.memory import space

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

KEY_AFTER = issue_cache.KEY_AFTER      # (the default, before any test sets it)


from test_issue_sites import _run  # noqa: E402  (the general path: every call issued; tests/kernels on sys.path)


def _state(res):
    """Every field of every record, the capacity tables and the buffer table (buffer ids counted from 1)."""
    core = res.cores[0]
    occ = core.occupancy
    occ.materialize()
    recs = [tuple(getattr(r, f) for f in type(r).__slots__) for r in core.instructions]
    return (recs, [(k, list(v)) for k, v in occ.ranges.items()], list(occ.tiles.items()), list(occ.parts.items()),
            dict(core.buffers), occ.seq)


def _both(fn, args, kw, monkeypatch, execute=False):
    """The state of ``fn`` run with site functions (the default) and with none, buffer ids counted from 1 in
    each; also whether any site got a function in the first."""
    out = []
    for after in (KEY_AFTER, 10 ** 9):
        monkeypatch.setattr(issue_cache, "KEY_AFTER", after)
        monkeypatch.setattr(space, "_ids", itertools.count(1))
        isa_api._LOCS.clear()
        issue_cache.clear_store()          # (both start alike: no site function, no layout kept by a launch before)
        res = _run(fn, args, kw, execute=execute)
        made = sum(callable(s[2]) for s in isa_api._LOCS.values())
        out.append((res, made))
    (on, made_on), (off, made_off) = out
    assert made_on >= 2 and made_off == 0
    return on, off


# -- rows made columns when read --------------------------------------------------------------------------

def test_pending_rows_become_the_columns_in_order_with_a_writer_appending_itself_between():
    c = RecordColumns()
    assert ROW_FIELDS == ("eng", "cost", "pre", "opcode", "flops", "nw", "nops", "dma")
    dma = (512, 128, 0, None)
    c.pend += [("vector", 10.0, 0.0, "a", 1, 1, 2, None), ("dma", 99.0, 0.0, "dma_copy", 0, 1, 1, dma)]
    c.loc += ["l0", "l1"]
    assert len(c) == 2 and len(c.pend) == 2
    c.eng.append("scalar")          # a writer appending to a column itself: after the rows pending before it
    assert c.pend == [] and c.eng == ["vector", "dma", "scalar"]
    for f, v in (("cost", 5.0), ("pre", 0.0), ("opcode", "b"), ("flops", 0), ("nw", 1), ("nops", 1)):
        getattr(c, f).append(v)
    c.loc.append("l2")
    c.pend.append(("dma", 7.0, 0.0, "dma_copy", 0, 1, 1, (64, 32, 8, (1, 0, 3.0))))
    c.pend.append(("tensor", 3.0, 2.0, "nc_matmul", 8, 1, 2, None))
    c.loc += ["l3", "l4"]
    assert c.eng == ["vector", "dma", "scalar", "dma", "tensor"]
    assert c.cost == [10.0, 99.0, 5.0, 7.0, 3.0] and c.pre == [0.0, 0.0, 0.0, 0.0, 2.0]
    assert c.opcode == ["a", "dma_copy", "b", "dma_copy", "nc_matmul"] and c.flops == [1, 0, 0, 0, 8]
    assert c.nw == [1, 1, 1, 1, 1] and c.nops == [2, 1, 1, 1, 2]
    assert c.dma == [1, 3] and c.nbytes == [512, 64] and c.rows == [128, 32] and c.part0 == [0, 8]
    assert c.dge == [None, (1, 0, 3.0)]
    assert len(c) == 5 and c.pend == []


def test_records_read_from_pending_rows_equal_records_read_after_the_rows_are_columns():
    from trnsim.machine.record_cols import Records
    dma = (512, 128, 0, (2, 1, 5.0))
    rows = [("vector", 10.0, 0.0, "a", 1, 1, 2, None), ("dma", 99.0, 0.0, "dma_copy", 0, 1, 1, dma),
            ("tensor", 3.0, 2.0, "nc_matmul", 8, 1, 2, None), ("dma", 7.0, 0.0, "dma_copy", 0, 1, 1, dma)]
    ops = [(1, 0, 8, "v1"), (2, 0, 8, "v2"), (3, 0, 4, "v3"), (4, 0, 4, "v4"), (5, 0, 2, "v5"), (6, 0, 2, "v6"),
           (7, 1, 3, "v7"), (8, 1, 3, "v8"), (9, 0, 1, "v9"), (10, 0, 1, "v10")]

    def fill(c, k):          # row k and its operands
        c.pend.append(rows[k % 4])
        c.loc.append(("f.py", k))
        for b, lo, hi, v in ops[:rows[k % 4][6]]:
            c.b.append(b + 10 * k)
            c.lo.append(lo)
            c.hi.append(hi)
            c.v.append(v)

    a, b = RecordColumns(), RecordColumns()
    ra = Records(a)
    for k in range(12):
        fill(a, k)
        fill(b, k)
        if k % 3 == 0:
            ra[-1]                  # read with rows pending (as a multi-program launch reads each record)
        if k % 5 == 4:
            a.flush()               # some rows made columns between the reads
    got = [tuple(getattr(r, f) for f in type(r).__slots__) for r in ra]
    want = [tuple(getattr(r, f) for f in type(r).__slots__) for r in Records(b)]
    assert got == want and len(got) == 12
    assert [r.dge for r in ra if r.engine == "dma"] == [dma[3]] * 6 and [r.nbytes for r in ra][:2] == [0, 512]


def _stream(x, n, peek_at=-1):
    """Load, three engine instructions, store per tile; at iteration ``peek_at`` the record's columns are read
    (the pending rows made columns in the middle of the run) and each tile's kept live-range entry is checked to
    be its core's."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.activation(t, nl.exp, u)
        nisa.tensor_tensor(u, t, u, op=nl.add)
        nisa.dma_copy(out, u)
        if i == peek_at:
            core = current().core
            _stream.peeked = (len(core.columns.eng), len(core.columns.pend),
                              [b.live is core.occupancy.ranges[(b.id, -1)] for b in (t.buf, u.buf)])
    return out


def test_records_read_in_the_middle_of_a_run_equal_those_read_at_the_end(monkeypatch):
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    on, off = _both(_stream, (x,), {"n": 120}, monkeypatch)
    monkeypatch.setattr(space, "_ids", itertools.count(1))
    peek = _run(_stream, (x,), {"n": 120, "peek_at": 80})
    n_eng, n_pend, live = _stream.peeked
    del _stream.peeked
    assert n_eng == 81 * 5 and n_pend == 0 and live == [True, True]
    assert len(peek.cores[0].columns.pend) > 0        # rows appended after the read are pending again
    assert _state(peek) == _state(on) == _state(off)
    prev = issue_cache.set_enabled(False)
    try:
        monkeypatch.setattr(space, "_ids", itertools.count(1))
        unc = _run(_stream, (x,), {"n": 120}, cached=False)
    finally:
        issue_cache.set_enabled(prev)
    assert _state(unc) == _state(on)


# -- a tile's live-range entry kept on it ----------------------------------------------------------------------

_KEPT = []


def _keep_tile(x):
    """Keeps a tile touched at a site with a function (so its entry is kept on it)."""
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    for _ in range(3 * KEY_AFTER):
        nisa.tensor_scalar(t, t, nl.multiply, 1.0)
    _KEPT.append(t)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, t)
    return out


def _use_kept(x, n):
    """Reads a tile made by an earlier launch (another core's SBUF) at sites with functions."""
    P, F = x.shape
    old = _KEPT[0]
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, old, nl.multiply, 2.0)
        nisa.tensor_tensor(u, old, u, op=nl.add)
        nisa.dma_copy(out, u)
    return out


def test_a_tile_of_another_core_is_recorded_in_this_cores_table_as_without_site_functions(monkeypatch):
    """A tile kept from an earlier launch has its entry in that launch's core (``Buffer.live``); touched by a
    later launch it gets an entry in the later core's table, as it does without site functions."""
    x = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    _KEPT.clear()
    try:
        first = _run(_keep_tile, (x,), {})
        old = _KEPT[0].buf
        first_entry = list(first.cores[0].occupancy.ranges[(old.id, -1)])
        assert old.live is first.cores[0].occupancy.ranges[(old.id, -1)]
        on, off = _both(_use_kept, (x,), {"n": 80}, monkeypatch)
        assert (old.id, -1) in on.cores[0].occupancy.ranges
        assert _state(on) == _state(off)
        assert list(first.cores[0].occupancy.ranges[(old.id, -1)]) == first_entry   # the first core's unchanged
    finally:
        _KEPT.clear()


# -- a site's last key compared by identity ---------------------------------------------------------------------

def _alias_flips(x, n):
    """Sites whose views keep their layout numbers (one spelling) while their aliasing changes from call to call,
    and a scalar equal from call to call but a new object each time."""
    P, F = x.shape
    out = nl.ndarray((n, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, float(i % 1 + 2))            # 2.0, a new float object each call
        nisa.tensor_tensor(u, t, t if i % 3 == 0 else u, op=nl.add)        # t + t, or t + u
        nisa.tensor_tensor(u if i % 2 else t, u, t, op=nl.subtract)        # the written operand flips
        nisa.dma_copy(out[i], u)
    return out


def _alias_flips_ref(x, n):
    x = x.astype(np.float64)
    out = np.empty((n,) + x.shape)
    for i in range(n):
        t = x.copy()
        u = t * 2.0
        u = t + (t if i % 3 == 0 else u)
        if i % 2:
            u = u - t
        else:
            t = u - t
        out[i] = u
    return out


def test_a_site_whose_aliasing_changes_finds_each_layout_as_without_site_functions(monkeypatch):
    x = np.random.default_rng(2).standard_normal((128, 64)).astype(np.float32)
    on, off = _both(_alias_flips, (x,), {"n": 120}, monkeypatch)
    assert _state(on) == _state(off)
    sites = [s for s in isa_api._LOCS.values() if s[4] is _alias_flips.__code__]
    on, off = _both(_alias_flips, (x,), {"n": 120}, monkeypatch, execute=True)
    assert _state(on) == _state(off)
    np.testing.assert_array_equal(np.asarray(on.outputs), np.asarray(off.outputs))
    np.testing.assert_allclose(np.asarray(on.outputs, np.float64), _alias_flips_ref(x, 120), rtol=1e-6)
    # the sites' functions kept a last key (a layout of the run's cache)
    monkeypatch.setattr(issue_cache, "KEY_AFTER", KEY_AFTER)
    isa_api._LOCS.clear()
    res = _run(_alias_flips, (x,), {"n": 120})
    sites = [s for s in isa_api._LOCS.values() if s[4] is _alias_flips.__code__ and callable(s[2])]
    assert len(sites) >= 4
    cache = res.cores[0].issue_cache
    for s in sites:
        g = s[2].__globals__
        assert g["M0"] is cache and any(v is g["MPROG"] for v in cache.values())


@pytest.mark.parametrize("runs", [3])
def test_a_kernel_run_again_finds_its_new_cores_layouts(runs, monkeypatch):
    """Each launch's core has its own cache: a site's last key from an earlier launch is not taken for the next
    (the records of every run equal those of a run without site functions)."""
    x = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    monkeypatch.setattr(issue_cache, "KEY_AFTER", 10 ** 9)
    monkeypatch.setattr(space, "_ids", itertools.count(1))
    isa_api._LOCS.clear()
    want = _state(_run(_alias_flips, (x,), {"n": 60}))
    monkeypatch.setattr(issue_cache, "KEY_AFTER", KEY_AFTER)
    isa_api._LOCS.clear()
    for _ in range(runs):
        monkeypatch.setattr(space, "_ids", itertools.count(1))
        assert _state(_run(_alias_flips, (x,), {"n": 60})) == want


# -- the scheduler reading the rows ------------------------------------------------------------------------------

def _kernels():
    import os

    from suite_files import load_file
    from trnsim.kernels.library import normalization
    from trnsim.kernels.library.matmul import tiled_matmul
    r = np.random.default_rng(4)
    f32 = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    prog = load_file("_tp_for_rows", os.path.join(os.path.dirname(__file__), "..", "machine", "test_programs.py"))
    import ml_dtypes
    bf = lambda *s: r.standard_normal(s).astype(ml_dtypes.bfloat16)  # noqa: E731
    return {
        "stream": (_stream, (f32(128, 64),), {"n": 60}, (1,)),
        "alias_flips": (_alias_flips, (f32(128, 64),), {"n": 60}, (1,)),
        "tiled_matmul": (tiled_matmul, (bf(256, 256), bf(256, 512)), {}, (1,)),
        "layer_norm": (normalization.layer_norm, (f32(1024, 256), f32(1024, 256), f32(1024, 256)), {}, (1,)),
        "barrier, two programs": (prog.exchange.fn, (f32(128, 16), True), {}, (2,)),
    }


@pytest.mark.parametrize("impl", ["numba", "python"])
@pytest.mark.parametrize("which", list(_kernels()))
def test_the_scheduler_reading_pending_rows_gives_the_timeline_of_the_columns(which, impl):
    """``sched_fast`` reads the rows still pending as arrays per distinct row (``_row_columns``); the same record
    made columns first (``RecordColumns.flush``) gives the identical timeline, with the cache on and off."""
    from trnsim.machine import schedule
    fn, args, kw, grid = _kernels()[which]
    for cached in (True, False):
        prev = issue_cache.set_enabled(cached)
        prev_rep = loop_replay.set_enabled(False)
        try:
            res = run_kernel(fn, args, kw, grid, "trn2", execute=False)
        finally:
            issue_cache.set_enabled(prev)
            loop_replay.set_enabled(prev_rep)
        assert all(len(c.columns.pend) == len(c.columns.loc) > 0 for c in res.cores)     # every row pending
        rows = schedule(res.cores, impl=impl)
        assert all(len(c.columns.pend) == len(c.columns.loc) for c in res.cores)         # (read, not flushed)
        for c in res.cores:
            c.columns.flush()
        cols = schedule(res.cores, impl=impl)
        assert rows == cols and rows.total_ns > 0
        assert [list(getattr(rows, f)) for f in ("engine", "opcode", "flops", "loc", "nbytes", "start", "end")] \
            == [list(getattr(cols, f)) for f in ("engine", "opcode", "flops", "loc", "nbytes", "start", "end")]
