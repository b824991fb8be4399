"""The issue cache (trnsim/kernels/issue_cache.py): a shape-only run with the cache gives exactly the record and the
timeline of a run without it, and every new operand layout is still validated (same errors for bad input)."""

import os

import numpy as np
import pytest

import trnsim
from trnsim.isa.errors import NkiValidationError
from trnsim.kernels import issue_cache
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule
from trnsim.machine.record_cols import InstrRecord

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from suite_files import load_file

HERE = os.path.dirname(__file__)
_FIELDS = InstrRecord.__slots__        # every field of a record


_SF = load_file("_sf_for_issue_cache", os.path.join(HERE, "..", "machine", "test_sched_fast.py"))
CASES = _SF.CASES


@pytest.fixture
def cache_on():
    prev = issue_cache.set_enabled(True)
    yield
    issue_cache.set_enabled(prev)


def _run(fn, args, kw, grid, cached):
    prev = issue_cache.set_enabled(cached)
    try:
        return run_kernel(fn, args, kw, grid, "trn2", execute=False)
    finally:
        issue_cache.set_enabled(prev)


def _canon(core):
    """Buffer ids numbered by first use (ids come from a process-wide counter)."""
    ids = {}
    for b in core.columns.b:
        ids.setdefault(b, len(ids))
    return ids


def _ops(ops, ids):
    return tuple((ids[b], lo, hi, v) for b, lo, hi, v in ops)


def _records(res):
    out = []
    for c in res.cores:
        ids = _canon(c)
        out.append([tuple(_ops(getattr(r, f), ids) if f in ("writes", "reads") else getattr(r, f) for f in _FIELDS)
                    for r in c.instructions])
    return out


def _columns(res):
    out = []
    for c in res.cores:
        cols = c.columns
        ids = _canon(c)
        # (every column as read: rows still pending are made columns first, record_cols.RecordColumns.flush)
        names = [f.lstrip("_") for f in cols.__slots__ if f != "pend"]
        d = {f: list(getattr(cols, f)) if f != "barrier" else cols.barrier for f in names}
        d["b"] = [ids[b] for b in d["b"]]
        out.append(d)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_cached_issue_gives_the_same_record_and_timeline(name):
    fn, args, grid, *kw = CASES[name]
    kw = kw[0] if kw else {}
    off = _run(fn, args, kw, grid, False)
    on = _run(fn, args, kw, grid, True)
    assert len(on.instructions) > 0
    assert all(len(c.issue_cache) == 0 for c in off.cores)      # the cache was off
    assert _records(on) == _records(off)
    assert _columns(on) == _columns(off)
    # views are interned per core: the same pattern is the same object in both runs' records
    for c_on, c_off in zip(on.cores, off.cores):
        assert len(c_on._views) == len(c_off._views)
    _SF.assert_same(schedule(off.cores, impl="python"), schedule(on.cores, impl="python"))


def test_a_loop_issues_from_the_cache(cache_on):
    fn, args, grid, kw = CASES["stream"]
    res = run_kernel(fn, args, kw, grid, "trn2", execute=False)
    core = res.cores[0]
    n = len(core.instructions)
    assert n == 5 * kw["n"]
    # one layout per distinct call: dma_copy in, tensor_scalar, activation, tensor_tensor, dma_copy out
    assert len(core.issue_cache) == 5
    assert all(prog and all(p[0] in (0, 1) for p in prog) for prog in core.issue_cache.values())
    # a functional run replays the same layouts with their numerics (the instructions' compute parts)
    full = run_kernel(fn, args, kw, grid, "trn2", execute=True)
    progs = list(full.cores[0].issue_cache.values())
    assert len(progs) == 5 and all(prog and prog[0][0] == 2 for prog in progs)


def _tiles(x, n, bad_at, bad):
    """``n`` valid tensor_scalar calls on the same layout, then at iteration ``bad_at`` one bad call."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        if i == bad_at:
            if bad == "partitions":
                nisa.tensor_scalar(u[0:64, :], t, nl.multiply, 2.0)
            elif bad == "engine":
                nisa.tensor_scalar(u, t, nl.multiply, 2.0, engine=nisa.engine.tensor)
            elif bad == "operator":
                nisa.tensor_scalar(u, t, "no_such_op", 2.0)
            elif bad == "immediate":
                nisa.tensor_scalar(u, t, nl.multiply, "2.0")
            elif bad == "start":
                w = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(u[8:48, :], w[8:48, :], nl.multiply, 2.0)
            elif bad == "space":
                nisa.tensor_scalar(u, x, nl.multiply, 2.0)
        else:
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out, u)
    return out


@pytest.mark.parametrize("bad", ["partitions", "engine", "operator", "immediate", "start", "space"])
def test_a_new_layout_is_validated_and_fails_as_without_the_cache(bad):
    x = np.zeros((128, 64), np.float32)
    errs = []
    for cached in (False, True):
        with pytest.raises(NkiValidationError) as ei:
            _run(_tiles, (x,), {"n": 6, "bad_at": 4, "bad": bad}, (1,), cached)
        errs.append((str(ei.value), ei.value.instruction, ei.value.operand, ei.value.location))
    assert errs[0] == errs[1]
    assert errs[1][1] == "tensor_scalar" and errs[1][3] is not None


def test_hbm_offsets_share_a_layout_for_dma_only(cache_on):
    def k(x):
        P = 128
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(x.shape[0] // P):
            t = nl.ndarray((P, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x[i * P:(i + 1) * P, :])
            nisa.dma_copy(out[i * P:(i + 1) * P, :], t)
        return out

    x = np.zeros((1024, 64), np.float32)
    on = run_kernel(k, (x,), {}, (1,), "trn2", execute=False)
    assert len(on.cores[0].issue_cache) == 2      # every HBM offset: one layout per direction
    off = _run(k, (x,), {}, (1,), False)
    assert _records(on) == _records(off)
    # the records hold each transfer's own HBM range
    los = sorted({r.reads[0][1] for r in on.instructions if r.opcode == "dma_copy" and r.reads[0][1] > 0})
    assert los == [i * 128 * 64 for i in range(1, 8)]


def test_psum_bank_rule_is_checked_for_each_psum_placement():
    """A matmul output at a new PSUM offset is a new layout: one that crosses a bank is refused as before."""
    def k(a, b, bad):
        at = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(at, a)
        nisa.dma_copy(bt, b)
        ps = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
        for i in range(3):
            nisa.nc_matmul(ps[:, 0:512], at, bt)
        if bad:
            nisa.nc_matmul(ps[:, 256:768], at, bt)
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        return out

    a = np.zeros((128, 128), np.float32)
    b = np.zeros((128, 512), np.float32)
    errs = []
    for cached in (False, True):
        res = _run(k, (a, b, False), {}, (1,), cached)
        assert sum(r.opcode == "nc_matmul" for r in res.instructions) == 3
        with pytest.raises(NkiValidationError, match="bank") as ei:
            _run(k, (a, b, True), {}, (1,), cached)
        errs.append(str(ei.value))
    assert errs[0] == errs[1]


def test_instructions_that_keep_core_state_are_not_cached(cache_on):
    """The probe sees a function read state of the core beyond target/execute/precise/strict: no entry."""
    from trnsim.kernels import isa_api

    calls = []

    def stateful(core, loc, dst, src):
        calls.append(getattr(core, "act_reduce_regs", None))
        core.record("stateful", "vector", (dst,), (src,), 64.0, loc)

    wrapped = isa_api._wrap(stateful)

    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        for _ in range(4):
            wrapped(t, t)
        return x

    res = run_kernel(k, (np.zeros((128, 8), np.float32),), {}, (1,), "trn2", execute=False)
    assert len(calls) == 4                                  # ran every time
    assert sum(r.opcode == "stateful" for r in res.instructions) == 4
    entries = [v for key, v in res.cores[0].issue_cache.items() if key[0] is stateful]
    assert entries == [False]                               # known not to be replayable: runs whole


def test_unhashable_or_unknown_arguments_run_uncached(cache_on):
    from trnsim.kernels import isa_api
    calls = []

    def takes_obj(core, loc, dst, opt):
        calls.append(opt)
        core.record("takes_obj", "vector", (dst,), (), 64.0, loc)

    wrapped = isa_api._wrap(takes_obj)

    class Opt:          # an object of unknown type: its state is not part of any layout
        pass

    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        for o in ([1, 2], {"a": 1}, Opt(), np.ones(2)):
            wrapped(t, o)
            wrapped(t, o)
        return x

    res = run_kernel(k, (np.zeros((128, 8), np.float32),), {}, (1,), "trn2", execute=False)
    assert len(calls) == 7            # the list (a tuple of ints in the layout) is cached; the rest run each time
    assert sum(r.opcode == "takes_obj" for r in res.instructions) == 8


def _functional_cases():
    out = {}
    for name in ("tiled_matmul", "tensor_add", "softmax_rows", "rmsnorm", "layernorm", "causal_attention",
                 "lib_row_softmax", "lib_layer_norm", "lib_scalar_op", "stream", "scale_lnc"):
        if name in CASES:
            out[name] = CASES[name]
    return out


@pytest.mark.parametrize("name", list(_functional_cases()))
def test_functional_runs_with_the_cache_give_the_same_values_and_record(name):
    fn, args, grid, *kw = CASES[name]
    kw = kw[0] if kw else {}
    res = []
    for cached in (False, True):
        prev = issue_cache.set_enabled(cached)
        try:
            res.append(run_kernel(fn, args, kw, grid, "trn2", execute=True))
        finally:
            issue_cache.set_enabled(prev)
    off, on = res
    outs_off = off.outputs if isinstance(off.outputs, (list, tuple)) else [off.outputs]
    outs_on = on.outputs if isinstance(on.outputs, (list, tuple)) else [on.outputs]
    for a, b in zip(outs_off, outs_on):
        assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    assert _records(on) == _records(off)
    _SF.assert_same(schedule(off.cores, impl="python"), schedule(on.cores, impl="python"))


def test_strict_mode_still_refuses_a_never_written_read_on_a_replayed_layout(monkeypatch, cache_on):
    monkeypatch.setenv("TRNSIM_STRICT_UNINIT", "1")

    def k(x):
        P, F = x.shape
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(3):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            if i < 2:
                nisa.dma_copy(t, x)          # the third iteration reads t without writing it
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
            nisa.dma_copy(out, u)
        return out

    with pytest.raises(NkiValidationError, match="never written"):
        run_kernel(k, (np.ones((128, 8), np.float32),), {}, (1,), "trn2", execute=True)
