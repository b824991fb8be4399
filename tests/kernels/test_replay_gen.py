"""The issue cache's generated replay (trnsim/machine/replay_gen.py: straight-line code per cached layout) against
the generic replay it stands for (``NeuronCore.replay`` step by step) and against running without the cache:
the same records (every field with its type), columns, live ranges, capacity report, timelines of both
schedulers and output values, shape-only and functional, on the scheduler test kernels and on kernels whose
layouts change with the loop index (offsets, HBM offsets left out of the layout, aliases, blocks, PSUM)."""

import os

import numpy as np
import pytest

import trnsim
from trnsim.kernels import context, isa_api, issue_cache
from trnsim.kernels.jit import run_kernel
from trnsim.kernels.tensor import NkiTensor
from trnsim.machine import replay_gen, schedule
from trnsim.machine.record_cols import InstrRecord
from trnsim.memory.dtypes import dtype_of

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from suite_files import load_file

HERE = os.path.dirname(__file__)
_FIELDS = InstrRecord.__slots__


_SF = load_file("_sf_for_replay_gen", os.path.join(HERE, "..", "machine", "test_sched_fast.py"))


@pytest.fixture(autouse=True)
def fresh_layouts(monkeypatch):
    """Each test starts as a new process does: no call site's function (``isa_api._LOCS``) and no layout kept by
    an earlier launch (``issue_cache``'s store), so what it counts of the replay machinery is its own launches'."""
    monkeypatch.setattr(isa_api, "_LOCS", {})
    issue_cache.clear_store()
    yield
    issue_cache.clear_store()


# ------------------------------------------------------------------------------------------------ kernels

def varying(x, n):
    """Layouts that change with the index: slices at moving offsets, a branch on the index choosing another
    instruction and another layout, HBM rows at moving offsets (left out of dma_copy's layout), an operand
    used twice, a destination that is also a source."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        r = (i * 16) % P
        nisa.dma_copy(t[0:16, :], x[r:r + 16, :])
        nisa.dma_copy(t[16:P, :], x[16:P, :])
        if i % 3 == 0:
            nisa.tensor_scalar(t, t, nl.multiply, float(i + 1))
        elif i % 3 == 1:
            nisa.activation(t[:, 0:F // 2], nl.exp, t[:, 0:F // 2])
        else:
            nisa.tensor_tensor(t, t, t, op=nl.add)
        nisa.tensor_tensor(acc, acc, t, op=nl.add)
    nisa.dma_copy(out, acc)
    return out


def psum_and_blocks(a, b):
    """Matmuls accumulating in PSUM, copies out through a block tensor (a block at a time, each block with its
    own live range)."""
    K, M = a.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    core = context.current().core
    nblk = 4
    blk = NkiTensor.whole(core.allocate((M, nblk, N), dtype_of("float32"), "sbuf", "blocks", block=N,
                                        block_shape=(nblk,)), "blocks")
    for j in range(nblk):
        acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        for k in range(K // 128):
            at = nl.ndarray((128, M), dtype=a.dtype, buffer=nl.sbuf)
            bt = nl.ndarray((128, N), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(at, a[k * 128:(k + 1) * 128, :])
            nisa.dma_copy(bt, b[k * 128:(k + 1) * 128, :])
            nisa.nc_matmul(acc, at, bt)
        nisa.tensor_copy(blk[:, j, :], acc)
    nisa.tensor_tensor(blk[:, 0, :], blk[:, 0, :], blk[:, 3, :], op=nl.add)
    nisa.dma_copy(out, blk[:, 0, :])
    return out


def _cases():
    r = np.random.default_rng(3)
    cases = {name: c for name, c in _SF.CASES.items()}
    cases["varying"] = (varying, (r.standard_normal((128, 32)).astype(np.float32),), (1,), {"n": 30})
    cases["psum_and_blocks"] = (psum_and_blocks, (r.standard_normal((256, 64)).astype(np.float32),
                                                  r.standard_normal((256, 128)).astype(np.float32)), (1,))
    return cases


CASES = _cases()
_LOOPING = ("stream", "tiled_matmul_512", "pressure", "varying", "psum_and_blocks")


# ------------------------------------------------------------------------------------------------ runs

def _generic_only(steps, slow):
    """A replay function that always takes the generic path (NeuronCore.replay step by step)."""
    def run(core, loc, leaves):
        return slow(core, loc, leaves)
    return run


def _run(name, execute, mode, monkeypatch):
    """``mode``: "generated" (straight-line code from a layout's first replay on), "default" (after
    ``GEN_AFTER`` replays, as kernels run), "generic" (every cached layout replayed step by step), "off" (no
    cache).  Returns the result and how many generated replay functions were made."""
    fn, args, grid, *kw = CASES[name]
    made = []

    def counting(steps, slow):
        f = _generic_only(steps, slow) if mode == "generic" else replay_gen.compile_program(steps, slow)
        made.append(f)
        return f

    with monkeypatch.context() as mp:
        mp.setattr(issue_cache, "compile_program", counting)
        if mode != "default":
            mp.setattr(issue_cache, "GEN_AFTER", 1)
        prev = issue_cache.set_enabled(mode != "off")
        try:
            res = run_kernel(fn, args, kw[0] if kw else {}, grid, "trn2", execute=execute)
        finally:
            issue_cache.set_enabled(prev)
    return res, len(made)


def _canon(core):
    ids = {}
    for b in core.columns.b:
        ids.setdefault(b, len(ids))
    return ids


def _typed(v):
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_typed(x) for x in v))
    return (type(v).__name__, v)


def _state(res):
    """Everything a run leaves: per core its records (every field, with types), columns, live ranges and capacity
    report (buffer ids numbered by first use), then both schedulers' timelines and the outputs' bytes."""
    out = []
    for c in res.cores:
        ids = _canon(c)
        recs = []
        for r in c.instructions:
            row = []
            for f in _FIELDS:
                v = getattr(r, f)
                if f in ("writes", "reads"):
                    v = tuple((ids[b], lo, hi, vv) for b, lo, hi, vv in v)
                row.append(_typed(v))
            recs.append(tuple(row))
        cols = c.columns
        # (every column as read: rows still pending are made columns first, record_cols.RecordColumns.flush)
        names = [f.lstrip("_") for f in cols.__slots__ if f != "pend"]
        colv = {f: _typed(getattr(cols, f)) for f in names if f not in ("b", "bar", "barrier")}
        colv["b"] = [ids[b] for b in cols.b]
        colv["bar"] = sorted(cols.bar.items())
        occ = c.occupancy
        occ.materialize()
        ranges = sorted(((ids[k[0]], k[1]), _typed(v)) for k, v in occ.ranges.items())
        out.append((recs, colv, ranges, occ.seq, repr(occ.report), len(c._views)))
    tls = []
    for impl in ("python", "numba"):
        tl = schedule(res.cores, impl=impl)
        tls.append(([getattr(tl, f) for f in ("start", "end", "engine", "opcode", "deps", "queue", "done")],
                    tl.total_ns))
    outs = None
    if res.outputs is not None:
        o = res.outputs
        outs = [np.ascontiguousarray(a).tobytes() for a in (o if isinstance(o, (tuple, list)) else [o])]
    return out, tls, outs


@pytest.mark.parametrize("execute", [False, True], ids=["shape", "values"])
@pytest.mark.parametrize("name", list(CASES))
def test_generated_replay_equals_generic_replay_and_no_cache(name, execute, monkeypatch):
    gen, n_gen = _run(name, execute, "generated", monkeypatch)
    default, _ = _run(name, execute, "default", monkeypatch)
    generic, _ = _run(name, execute, "generic", monkeypatch)
    off, n_off = _run(name, execute, "off", monkeypatch)
    assert n_off == 0
    if name in _LOOPING:        # kernels that replay layouts (others may issue every layout once)
        assert n_gen > 0
    s_gen = _state(gen)
    assert s_gen == _state(generic)
    assert s_gen == _state(default)
    assert s_gen == _state(off)
    assert len(s_gen[0][0][0]) > 0


def test_the_generated_code_is_used_and_has_no_loop(monkeypatch):
    """In a one-program launch a layout replayed more than ``GEN_AFTER`` times gets its generated function, which
    never hands over to the generic replay, and whose source is straight-line code (the per-operand branching
    done when it was made)."""
    sources, generic_calls = [], []

    def spying(steps, slow):
        def counted_slow(core, loc, leaves):
            generic_calls.append(1)
            return slow(core, loc, leaves)
        f = replay_gen.compile_program(steps, counted_slow)
        sources.append(f.source)
        return f

    monkeypatch.setattr(issue_cache, "compile_program", spying)
    fn, args, grid, kw = CASES["varying"]
    run_kernel(fn, args, dict(kw, n=2 * issue_cache.GEN_AFTER), grid, "trn2", execute=True)
    assert sources and not generic_calls
    assert all(" for " not in s and " while " not in s for s in sources)
    # an HBM operand of dma_copy at a moving offset: its pattern made at replay time, the tile's is a constant
    assert any("_views.setdefault" in s for s in sources)


def test_multi_program_launches_take_the_generic_path(monkeypatch):
    calls = []

    def spying(steps, slow):
        def counted_slow(core, loc, leaves):
            calls.append(core.programs is not None)
            return slow(core, loc, leaves)
        return replay_gen.compile_program(steps, counted_slow)

    monkeypatch.setattr(issue_cache, "compile_program", spying)
    monkeypatch.setattr(issue_cache, "GEN_AFTER", 1)
    fn, args, grid, kw = CASES["stream_2_cores"]
    res = run_kernel(fn, args, kw, grid, "trn2", execute=False)
    assert calls and all(calls) and len(res.cores) == 2


def test_a_short_kernel_makes_no_code(monkeypatch):
    """Layouts replayed fewer than ``GEN_AFTER`` times are replayed step by step (no code made: making it would
    cost more than it saves).  A longer run makes code: a layout's straight-line replay, or a call site's function
    with the layout's replay written in (``program_lines``, the same generator)."""
    made = []
    monkeypatch.setattr(issue_cache, "compile_program",
                        lambda steps, slow: made.append(1) or replay_gen.compile_program(steps, slow))
    monkeypatch.setattr(issue_cache, "program_lines",
                        lambda *a, **k: made.append(2) or replay_gen.program_lines(*a, **k))
    fn, args, grid, kw = CASES["varying"]
    kw = dict(kw, n=issue_cache.GEN_AFTER - 2)
    run_kernel(fn, args, kw, grid, "trn2", execute=False)
    assert not made
    run_kernel(fn, args, dict(kw, n=3 * issue_cache.GEN_AFTER), grid, "trn2", execute=False)
    assert made
