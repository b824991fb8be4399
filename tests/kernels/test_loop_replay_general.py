"""Loop-body replay of the kernels most code writes (trnsim/kernels/loop_rewrite.py, loop_replay.py): kernels defined
inside a function (closures, as tests and kernel factories write them), loop bodies calling helper functions, and
branches on the loop index.  For each, a shape-only run with the replay on leaves exactly what it leaves with the
replay off (records, columns, live ranges, tables, capacity report, both schedulers' timelines: the state
``test_loop_replay._run`` compares), and a counter says the loop was replayed; kernels the replay must not take run
normally with the same state.  Every error a kernel gets without the replay it gets with it: the same exception
type, message and kernel source line."""

import os
import traceback

import numpy as np
import pytest

import trnsim
from trnsim.kernels import loop_replay, loop_rewrite
from trnsim.kernels.jit import run_kernel

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from suite_files import load_file

HERE = os.path.dirname(__file__)


_LR = load_file("_lr_for_general", os.path.join(HERE, "test_loop_replay.py"))
X = np.zeros((128, 64), np.float32)
N = 48


# ------------------------------------------------------------------------------------------------ factories

def make_stream(scale):
    """A kernel factory: the kernel reads ``scale`` and the modules from its enclosing function (free variables)."""
    isa, lang = nisa, nl

    def kernel(x, n):
        P, F = x.shape
        out = lang.ndarray((P, F), dtype=x.dtype, buffer=lang.shared_hbm)
        for i in range(n):
            t = lang.ndarray((P, F), dtype=x.dtype, buffer=lang.sbuf)
            isa.dma_copy(t, x)
            u = lang.ndarray((P, F), dtype=x.dtype, buffer=lang.sbuf)
            isa.tensor_scalar(u, t, lang.multiply, scale)
            isa.dma_copy(out, u)
        return out
    return kernel


def make_rows(rows):
    """A closure whose integer free variable moves the HBM rows each iteration reads and writes."""
    def kernel(x, n):
        F = x.shape[1]
        out = nl.ndarray((rows * n, F), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(n):
            t = nl.ndarray((rows, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x[i * rows:i * rows + rows, :])
            nisa.activation(t, nl.exp, t)
            nisa.dma_copy(out[i * rows:(i + 1) * rows, :], t)
        return out
    return kernel


# ------------------------------------------------------------------------------------------------ helpers

def _load_rows(t, x, i, rows):
    """A helper doing integer arithmetic on parameters the call passes (one of them the index)."""
    nisa.dma_copy(t, x[i * rows:(i + 1) * rows, :])


def _scaled(x, P, F, scale=2.0):
    """A helper making a tile and returning it (a default parameter)."""
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(u, t, nl.multiply, scale)
    return u


def _store(out, u):
    nisa.dma_copy(out, u)


def _scaled_store(x, out, P, F):
    """A helper calling helpers."""
    u = _scaled(x, P, F)
    _store(out, u)


def helpers(x, n):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        u = _scaled(x, P, F, scale=3.0)
        _store(out, u)
        _scaled_store(x, out, P, F)
    return out


def helper_rows(x, n):
    P, F = 128, x.shape[1]
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        _load_rows(t, x, i, P)
        _store(out, t)
    return out


def make_helper_closure(scale):
    """A kernel and its helper both defined in a factory (the helper is a free variable of the kernel)."""
    def scaled(t, u):
        nisa.tensor_scalar(u, t, nl.multiply, scale)

    def kernel(x, n):
        P, F = x.shape
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(n):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x)
            u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            scaled(t, u)
            nisa.dma_copy(out, u)
        return out
    return kernel


# ------------------------------------------------------------------------------------------------ branches

def branch_period4(x, n):
    """if/elif/else on ``i % 4``: the branches repeat every 4 iterations (the allocator's states, which repeat
    every 2 iterations, repeat with it; a tile made in one branch only would make them repeat every 8, longer
    than the replay looks for, ``loop_replay.PMAX``, and the loop would run normally)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        if i % 4 == 0:
            nisa.activation(t, nl.exp, t)
        elif i % 4 == 1 or i % 4 == 3:
            nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        else:
            nisa.tensor_tensor(t, t, t, op=nl.add)
            nisa.dma_copy(out, t)
        nisa.dma_copy(out, t)
    return out


def branch_period6(x, n):
    """Two tiles per iteration (the allocator's states repeat every 3 iterations) and a branch on ``i % 2``:
    replayed with period 6."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        if i % 2 == 0:
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        else:
            nisa.activation(u, nl.copy, t, scale=2.0)
        nisa.tensor_tensor(u, t, u, op=nl.add)
        nisa.dma_copy(out, u)
    return out


def branch_truthy(x, n):
    """``if i:`` (an int as the test: false at the first iteration only) and ``if i % 2:``."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        if i:
            nisa.activation(t, nl.exp, t)
        if i % 2:
            nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(out, t)
    return out


def branch_switch(x, n, at):
    """A branch whose outcome changes once, in the middle of the loop (``i < at``), and one taken only by the last
    iteration: the iterations around the change and the last one run normally."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        if i < at:
            nisa.activation(t, nl.exp, t)
        else:
            nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        if i == n - 1 and not at < 0:
            nisa.activation(t, nl.exp, t)
        nisa.dma_copy(out, t)
    return out


def make_branch_closure(every):
    """A closure with a branch on a free variable of the factory."""
    def kernel(x, n):
        P, F = x.shape
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(n):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x)
            if i % every == 0:
                nisa.activation(t, nl.exp, t)
            nisa.dma_copy(out, t)
        return out
    return kernel


# ------------------------------------------------------------------------------------------------ run normally

_KEEP = []


def _keeping(t, x):
    """A helper with a Python side effect (a list of the module's grows): never skipped."""
    nisa.dma_copy(t, x)
    _KEEP.append(1)


def _branching(t, x, i):
    if i % 2:
        nisa.dma_copy(t, x)


def helper_side_effect(x, n):
    P, F = x.shape
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        _keeping(t, x)
    return x


def helper_with_branch(x, n):
    P, F = x.shape
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        _branching(t, x, i)
        nisa.dma_copy(t, x)
    return x


def branch_on_state(x, n):
    """A test reading a body name (``t``): not a test of the index."""
    P, F = x.shape
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        if t is None:
            nisa.dma_copy(t, x)
    return x


def branch_carries(x, n):
    """A name assigned in one branch only and read after it: state carried between iterations."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    for i in range(n):
        if i % 4 == 0:
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
    return x


def make_counter():
    """A closure changing its enclosing function's name (``nonlocal``): not a loop the pass takes."""
    count = 0

    def kernel(x, n):
        nonlocal count
        P, F = x.shape
        for i in range(n):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x)
            count += 1
        return x
    return kernel


CLOSURE_A = make_stream(2.0)
CLOSURE_B = make_stream(0.5)       # the same code with other cells: its own scale reaches the record

REPLAYED = {
    "closure": (CLOSURE_A, (X,), {"n": N}),
    "closure_other_cells": (CLOSURE_B, (X,), {"n": N}),
    "closure_rows": (make_rows(128), (np.zeros((128 * N, 64), np.float32),), {"n": N}),
    "helpers": (helpers, (X,), {"n": N}),
    "helper_rows": (helper_rows, (np.zeros((128 * N, 64), np.float32),), {"n": N}),
    "helper_in_closure": (make_helper_closure(4.0), (X,), {"n": N}),
    "branch_period4": (branch_period4, (X,), {"n": N}),
    "branch_period6": (branch_period6, (X,), {"n": N}),
    "branch_truthy": (branch_truthy, (X,), {"n": N}),
    "branch_switch": (branch_switch, (X,), {"n": 90, "at": 50}),
    "branch_closure": (make_branch_closure(2), (X,), {"n": N}),
}
PERIOD = {"branch_period4": 4, "branch_period6": 6}
NORMAL = {
    "helper_side_effect": (helper_side_effect, (X,), {"n": N}),
    "helper_with_branch": (helper_with_branch, (X,), {"n": N}),
    "branch_on_state": (branch_on_state, (X,), {"n": N}),
    "branch_carries": (branch_carries, (X,), {"n": N}),
    "nonlocal_counter": (make_counter(), (X,), {"n": N}),
}


@pytest.mark.parametrize("name", list(REPLAYED))
def test_replayed_state_equals_a_plain_run(name, monkeypatch):
    off, on = _LR._both(REPLAYED[name], monkeypatch)
    assert off[2] == 0
    assert on[2] >= 1, f"the loop was not replayed ({loop_replay.STATS['why']})"
    assert on[1] == off[1] is None
    assert on[0][0] == off[0][0]          # records, columns, live ranges, report, patterns, timelines
    assert on[0][1] == off[0][1]          # tile, partition, buffer tables, ranges
    assert len(off[0][0][0][0][0]) > 60
    if name in PERIOD:
        assert loop_replay.STATS["period"] == PERIOD[name]


def test_a_branch_switch_limits_the_bulk_blocks(monkeypatch):
    """The switch at iteration 50 of 90 stops the bulk append before it: the iterations from there on run
    normally (so fewer are appended in bulk than the loop has after the observed ones)."""
    before = loop_replay.STATS["bulk_iterations"]
    _LR._run(branch_switch, (X,), {"n": 90, "at": 50}, True, monkeypatch)
    bulk = loop_replay.STATS["bulk_iterations"] - before
    assert 0 < bulk < 50
    before = loop_replay.STATS["bulk_iterations"]
    _LR._run(branch_switch, (X,), {"n": 90, "at": 200}, True, monkeypatch)
    assert loop_replay.STATS["bulk_iterations"] - before > 60


def test_closure_cells_are_the_callers():
    """The same closure code made twice with other cells: each rewritten function reads its own cells."""
    loop_fn = lambda lid, it: it  # noqa: E731
    a = loop_rewrite.rewritten(CLOSURE_A, loop_fn)
    b = loop_rewrite.rewritten(CLOSURE_B, loop_fn)
    assert a is not None and b is not None and a.__code__ is b.__code__
    cells = lambda f: {n: c.cell_contents for n, c in zip(f.__code__.co_freevars, f.__closure__)  # noqa: E731
                       if n != "__trnsim_loop__"}
    assert cells(a) == cells(CLOSURE_A) and cells(b) == cells(CLOSURE_B)
    assert cells(a)["scale"] == 2.0 and cells(b)["scale"] == 0.5


@pytest.mark.parametrize("name", list(NORMAL))
def test_other_kernels_run_normally_with_the_same_state(name, monkeypatch):
    off, on = _LR._both(NORMAL[name], monkeypatch)
    assert on[2] == 0, "a loop that must run normally was replayed"
    assert on[1] == off[1]
    assert on[0] == off[0]


# ------------------------------------------------------------------------------------------------ errors

def _bad_helper(t, x):
    nisa.tensor_tensor(t, x, x, op=nl.add)      # an HBM operand: refused


def error_in_branch(x, n, at):
    """A valid loop until iteration ``at``, where a branch issues an instruction the rules refuse."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        if i == at:
            _bad_helper(t, x)
        nisa.dma_copy(out, t)
    return out


def error_past_rows(x, n):
    """A helper's slice leaves the input at iteration 40."""
    P, F = 128, x.shape[1]
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        _load_rows(t, x, i, P)
    return x


def make_overflow(width):
    """A closure whose two tiles per iteration, ``width`` floats per partition each, are live at once: with 30720
    (120 KiB) more than SBUF holds, refused at the end of the launch by the capacity check."""
    def kernel(x, n):
        P = x.shape[0]
        for i in range(n):
            a = nl.ndarray((P, width), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(a, x)
            b = nl.ndarray((P, width), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(b, x)
            nisa.tensor_tensor(a, a, b, op=nl.add)
        return x
    return kernel


ERRORS = {
    "error_in_branch": (error_in_branch, (X,), {"n": 120, "at": 100}),
    "error_in_branch_late": (error_in_branch, (X,), {"n": 120, "at": 119}),
    "error_past_rows": (error_past_rows, (np.zeros((128 * 40, 64), np.float32),), {"n": 60}),
    "error_in_closure_helper": (make_helper_closure("not a number"), (X,), {"n": N}),
}


def _error(fn, args, kw, on, monkeypatch):
    """(type, message, the innermost kernel-file line of the traceback) of the error the launch raises."""
    monkeypatch.setattr(loop_replay, "MIN_ITERATIONS", 16)
    prev = loop_replay.set_enabled(on)
    try:
        with pytest.raises(Exception) as e:
            run_kernel(fn, args, kw, (1,), "trn2", execute=False)
    finally:
        loop_replay.set_enabled(prev)
    here = [f.lineno for f in traceback.extract_tb(e.value.__traceback__) if f.filename == __file__]
    return type(e.value), str(e.value), here[-1] if here else None


@pytest.mark.parametrize("name", list(ERRORS))
def test_the_same_error_with_and_without_replay(name, monkeypatch):
    fn, args, kw = ERRORS[name]
    off = _error(fn, args, kw, False, monkeypatch)
    before = loop_replay.STATS["replayed"]
    on = _error(fn, args, kw, True, monkeypatch)
    assert on == off
    assert off[2] is not None
    if name.startswith("error_in_branch"):
        # the loop was replayed up to the branch (the error comes from an iteration run normally after it)
        assert loop_replay.STATS["replayed"] > before


def test_a_capacity_refusal_is_the_same(monkeypatch):
    """A closure's SBUF overflow: replayed, and refused with the same message (tiles, sizes, lines)."""
    off, on = _LR._both((make_overflow(30720), (np.zeros((128, 30720), np.float32),), {"n": N}), monkeypatch)
    assert on[2] == 1 and off[2] == 0
    assert off[1] is not None and "SBUF" in off[1]
    assert on[1] == off[1]


# the slow path (issue cache and loop replay off) against the fast one (both on): a rule broken late in a loop
# that is replayed up to it, through a helper under a branch, raises the same error at the same line

def _bad_partitions(u, t):
    nisa.tensor_scalar(u[0:64, :], t, nl.multiply, 2.0)


def _bad_engine(u, t):
    nisa.tensor_scalar(u, t, nl.multiply, 2.0, engine=nisa.engine.tensor)


def _bad_operator(u, t):
    nisa.tensor_scalar(u, t, "no_such_op", 2.0)


def _bad_immediate(u, t):
    nisa.tensor_scalar(u, t, nl.multiply, "2.0")


def make_late_error(bad):
    def kernel(x, n, at):
        P, F = x.shape
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(n):
            u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
            if i == at:
                bad(u, t)
            nisa.dma_copy(out, u)
        return out
    return kernel


@pytest.mark.parametrize("bad", [_bad_partitions, _bad_engine, _bad_operator, _bad_immediate])
def test_a_late_error_is_the_same_on_the_slow_and_fast_paths(bad, monkeypatch):
    from trnsim.kernels import issue_cache
    from trnsim.isa.errors import NkiValidationError
    kernel = make_late_error(bad)
    got = []
    for fast in (False, True):
        monkeypatch.setattr(loop_replay, "MIN_ITERATIONS", 16)
        prev = (issue_cache.set_enabled(fast), loop_replay.set_enabled(fast))
        before = loop_replay.STATS["replayed"]
        try:
            with pytest.raises(NkiValidationError) as e:
                run_kernel(kernel, (X,), {"n": 200, "at": 150}, (1,), "trn2", execute=False)
        finally:
            issue_cache.set_enabled(prev[0])
            loop_replay.set_enabled(prev[1])
        got.append((str(e.value), e.value.instruction, e.value.operand, e.value.location))
        assert (loop_replay.STATS["replayed"] > before) == fast
    assert got[0] == got[1]
    assert got[0][3] == (__file__, bad.__code__.co_firstlineno + 1)       # the helper's line


def test_records_name_each_call_site():
    """The line a record names is its call's own: two calls on one line, a helper called from two lines (its
    line for both), the same with the issue cache off (the caller's line read without the memo)."""
    from trnsim.kernels import issue_cache

    def two(t, u):
        nisa.tensor_scalar(u, t, nl.multiply, 2.0); nisa.activation(t, nl.exp, u)  # noqa: E702

    def kernel(x):
        P, F = x.shape
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        two(t, u)
        two(t, u)
        nisa.tensor_scalar(u, t, nl.multiply, 3.0)
        return x
    locs = []
    for on in (False, True):
        prev = issue_cache.set_enabled(on)
        try:
            res = run_kernel(kernel, (X,), {}, (1,), "trn2", execute=False)
        finally:
            issue_cache.set_enabled(prev)
        locs.append([r.loc for r in res.cores[0].instructions])
    base = kernel.__code__.co_firstlineno
    line2 = two.__code__.co_firstlineno + 1
    assert locs[0] == locs[1] == [(__file__, base + 3)] + [(__file__, line2)] * 4 + [(__file__, base + 7)]
