"""Loop-body replay (trnsim/kernels/loop_replay.py, loop_rewrite.py): a shape-only run with the replay on leaves
exactly what it leaves with the replay off -- every record field with its type, every column, the live ranges,
tile and buffer tables, the capacity report (and a refusal's message), the interned patterns' count, both
schedulers' timelines -- on kernels the replay takes (and a counter says it did) and on kernels it must leave
alone (which run normally).  The check after a bulk append is exercised by breaking the prediction."""

import itertools
import os

import numpy as np
import pytest

import trnsim
from trnsim.kernels import context, loop_replay, loop_rewrite
from trnsim.kernels.jit import run_kernel
from trnsim.kernels.tensor import NkiTensor
from trnsim.machine.capacity import CapacityError
from trnsim.memory import space
from trnsim.memory.dtypes import dtype_of

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from suite_files import load_file

HERE = os.path.dirname(__file__)


_RG = load_file("_rg_for_loop_replay", os.path.join(HERE, "test_replay_gen.py"))


# ------------------------------------------------------------------------------------------------ kernels
# replayed

def stream(x, n):
    """The benchmark's streaming kernel: two tiles and five instructions per iteration."""
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
    return out


def moving_rows(x, n):
    """Input rows and output rows at moving HBM offsets (``x[i*P:(i+1)*P]``), a column slice at a fixed offset,
    a loop over ``nl.affine_range`` starting at 1 with a step."""
    P = 128
    F = x.shape[1]
    out = nl.ndarray((P * (n + 1), F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(1, n + 1, 1):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * P - P:i * P, :])
        nisa.activation(t[:, 0:F // 2], nl.exp, t[:, 0:F // 2])
        nisa.dma_copy(out[P * i:P * i + P, :], t)
    return out


def with_accumulator(x, n):
    """A tile made before the loop and read and written in every iteration (its live range grows), PSUM
    accumulation by matmuls, a copy out of PSUM."""
    P, F = x.shape
    acc = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    ps = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum)
    w = nl.ndarray((P, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(w, x[:, 0:P])
    for j in nl.sequential_range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.nc_matmul(ps, w, t)
        nisa.tensor_tensor(acc, acc, t, op=nl.add)
    s = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(s, ps)
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, acc)
    nisa.dma_copy(out, s)
    return out


def period_one(x, n):
    """The tile's name rebound to the input at the end of the body: the tile is freed within its iteration, so
    the allocator repeats every iteration (the stream kernel's repeats every two)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.static_range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.dma_copy(out, t)
        t = x
    return out


def nested_inner(x, n):
    """An outer loop with a loop inside (the outer runs normally, the inner is replayed at each outer step)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in range(3):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(u, x)
        for i in range(n):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(t, u, u, op=nl.multiply)
            nisa.dma_copy(out, t)
    return out


def overflow(x, n):
    """Two 120 KiB-per-partition tiles live at once in every iteration: more than SBUF holds (refused)."""
    P, F = x.shape
    for i in range(n):
        a = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(a, x)
        b = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(b, x)
        nisa.tensor_tensor(a, a, b, op=nl.add)
    return x


def narrow_tiles(x, n):
    """32-partition tiles (they may share bytes in different quadrants: the capacity sweep places them per
    quadrant, so the bulk-appended tiles are put in the tables for it) and a tile made after the loop."""
    F = x.shape[1]
    out = nl.ndarray((32, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((32, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[0:32, :])
        nisa.dma_copy(out, t)
    z = nl.ndarray((32, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(z, x[0:32, :])
    nisa.dma_copy(out, z)
    return out


def two_loops(x, n):
    """Two replayed loops with tiles made before, between and after them: the bulk-appended tiles keep their
    place among the others (the sweep's order).  (A PSUM tile made in the body is at a new address each
    iteration for longer than the replay's longest period, so such loops run normally.)"""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    w = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(w, x)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        o = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(o, w, t, op=nl.add)
        nisa.dma_copy(out, o)
    mid = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(mid, x)
    for j in range(n):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(u, mid, mid, op=nl.add)
        nisa.dma_copy(out, u)
    return out


def _helper(t, x):
    nisa.dma_copy(t, x)


# not replayed (each runs normally), except if_on_index, helper_call and nested_inner_ineligible: replayed since the
# rewriter follows branches on the index and helper calls

def if_on_index(x, n):
    """A branch on the index (period 2)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        if i % 2:
            nisa.activation(t, nl.exp, t)
        nisa.dma_copy(out, t)
    return out


def list_append(x, n):
    P, F = x.shape
    keep = []
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        keep.append(t)
    return x


def helper_call(x, n):
    P, F = x.shape
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        _helper(t, x)
    return x


def augmented(x, n):
    P, F = x.shape
    out = nl.ndarray((P * n, F), dtype=x.dtype, buffer=nl.shared_hbm)
    r = 0
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.dma_copy(out[r:r + P, :], t)
        r += P
    return out


def printing(x, n):
    P, F = x.shape
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        print(i, end="")
    return x


def moving_on_chip(x, n):
    """On-chip slices at moving offsets: a new layout (issue-cache entry) every iteration."""
    P, F = x.shape
    big = nl.ndarray((P, F * n), dtype=x.dtype, buffer=nl.sbuf)
    for i in range(n):
        nisa.dma_copy(big[:, i * F:(i + 1) * F], x)
    return x


def nested_inner_ineligible(x, n):
    """A branch on the outer index in the inner loop (taken at its first iterations, before any is skipped)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in range(2):
        for i in range(n):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x)
            if i == j:
                nisa.dma_copy(out, t)
    return out


def index_as_value(x, n):
    """The index passed as an instruction's scalar: a new layout every iteration."""
    P, F = x.shape
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.tensor_scalar(t, t, nl.multiply, i)
    return x


def block_tensor(x, n):
    """A block tensor made before the loop, one block written in every iteration (a block's live range is touched
    by Occupancy.touch, which the replay does not model): runs normally."""
    P, F = x.shape
    core = context.current().core
    blk = NkiTensor.whole(core.allocate((P, 4, F), dtype_of("float32"), "sbuf", "blocks", block=F,
                                        block_shape=(4,)), "blocks")
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.tensor_copy(blk[:, 1, :], t)
    return x


def short_loop(x, n):
    return stream(x, 5)


X = np.zeros((128, 64), np.float32)
REPLAYED = {
    "stream": (stream, (X,), {"n": 60}),
    "stream_odd": (stream, (X,), {"n": 61}),
    "moving_rows": (moving_rows, (np.zeros((128 * 40, 64), np.float32),), {"n": 40}),
    "with_accumulator": (with_accumulator, (np.zeros((128, 128), np.float32),), {"n": 50}),
    "period_one": (period_one, (X,), {"n": 45}),
    "nested_inner": (nested_inner, (X,), {"n": 30}),     # (the inner loop replayed at each of 3 outer steps)
    "overflow": (overflow, (np.zeros((128, 30720), np.float32),), {"n": 40}),
    "narrow_tiles": (narrow_tiles, (X,), {"n": 40}),
    "two_loops": (two_loops, (np.zeros((128, 128), np.float32),), {"n": 40}),
    # (branches on the index and helper calls: replayed since the rewriter follows them; more cases in
    # test_loop_replay_general.py)
    "if_on_index": (if_on_index, (X,), {"n": 40}),
    "helper_call": (helper_call, (X,), {"n": 70}),
    "nested_inner_branch": (nested_inner_ineligible, (X,), {"n": 40}),
}
REPLAYS = {"nested_inner": 3, "two_loops": 2, "nested_inner_branch": 2}
PERIOD = {"stream": 3, "period_one": 1}
NORMAL = {
    "list_append": (list_append, (X,), {"n": 40}),
    "augmented": (augmented, (X,), {"n": 40}),
    "printing": (printing, (X,), {"n": 40}),
    "moving_on_chip": (moving_on_chip, (X,), {"n": 40}),
    "index_as_value": (index_as_value, (X,), {"n": 40}),
    "block_tensor": (block_tensor, (X,), {"n": 40}),
    "short_loop": (short_loop, (X,), {"n": 0}),
}


def _run(fn, args, kw, on, monkeypatch, execute=False):
    """(state, error message or None, loops replayed) of one launch, buffer ids counted from 1."""
    monkeypatch.setattr(space, "_ids", itertools.count(1))
    monkeypatch.setattr(loop_replay, "MIN_ITERATIONS", 16)     # (the test loops are short)
    prev = loop_replay.set_enabled(on)
    before = loop_replay.STATS["replayed"]
    err = None
    res = None
    try:
        res = run_kernel(fn, args, kw, (1,), "trn2", execute=execute)
    except CapacityError as e:
        err = str(e)
        core = None
    finally:
        loop_replay.set_enabled(prev)
    replayed = loop_replay.STATS["replayed"] - before
    if res is None:
        return None, err, replayed
    core = res.cores[0]
    occ = core.occupancy
    occ.materialize()          # tiles appended in bulk: put in the tables where one-by-one issue puts them
    # (the allocators' free lists, live and peak bytes are not compared: tiles of the first iterations are held
    # in reference cycles until the cycle collector runs, so they depend on when it runs, with or without replay)
    # (as ordered lists: the capacity sweep breaks ties in the order the tiles were made)
    tables = (list(occ.tiles.items()), list(occ.parts.items()), dict(occ.blocks), list(occ.fences),
              dict(core.buffers), [(k, list(v)) for k, v in occ.ranges.items()], occ.report, core.interned_patterns,
              # the issue cache's layouts and their replay steps, in the order met (not how many replays went
              # through each layout's own ``run``: a call site's function replays the layout it was made with
              # itself, and sites outlive a launch, so that count depends on the runs before)
              [(k, tuple(p) if p else p) for k, p in core.issue_cache.items()])
    return (_RG._state(res), tables), err, replayed


def _both(case, monkeypatch):
    fn, args, kw = case
    # a first run: the issue cache learns the tensor classes at their first call (issue_cache._TENSORS), which
    # keys that first call apart from later ones; both compared runs then start alike
    _run(fn, args, kw, False, monkeypatch)
    off = _run(fn, args, kw, False, monkeypatch)
    on = _run(fn, args, kw, True, monkeypatch)
    return off, on


@pytest.mark.parametrize("name", list(REPLAYED))
def test_replayed_loops_leave_the_same_state(name, monkeypatch):
    off, on = _both(REPLAYED[name], monkeypatch)
    assert off[2] == 0
    assert on[2] == REPLAYS.get(name, 1), "the loop was not replayed"
    assert on[1] == off[1]
    if name == "overflow":
        assert off[1] is not None and "SBUF" in off[1]
        return
    assert off[0] is not None
    assert on[0][0] == off[0][0]          # records, columns, live ranges, report, patterns, timelines
    assert on[0][1] == off[0][1]          # tile, partition, buffer tables, ranges, allocator state
    assert len(off[0][0][0][0][0]) > 60
    if name in PERIOD:
        assert loop_replay.STATS["period"] == PERIOD[name]


@pytest.mark.parametrize("name", list(NORMAL))
def test_other_loops_run_normally_with_the_same_state(name, monkeypatch, capsys):
    off, on = _both(NORMAL[name], monkeypatch)
    assert on[2] == 0, "a loop that must run normally was replayed"
    assert on[1] == off[1]
    assert on[0] == off[0]
    if name == "printing":
        assert capsys.readouterr().out == "".join(str(i) for i in range(40)) * 3     # (3 runs: _both)
    if name == "block_tensor":
        assert "block" in loop_replay.STATS["why"]


def test_the_static_pass():
    ok = loop_rewrite.rewritten(stream, lambda lid, it: it)
    assert ok is not None and ok.__code__.co_filename == stream.__code__.co_filename
    assert ok.__code__.co_firstlineno == stream.__code__.co_firstlineno
    for fn in (if_on_index, list_append, helper_call, augmented, printing):
        new = loop_rewrite.rewritten(fn, lambda lid, it: it)
        ok_loops = 0 if new is None else 1
        # the static pass lets these through; the check at the loop's start decides (a list's method, a builtin:
        # refused)
        if fn in (list_append, if_on_index, helper_call, printing):
            assert ok_loops == 1
        else:
            assert ok_loops == 0, fn.__name__


def test_functional_runs_are_not_replayed(monkeypatch):
    before = loop_replay.STATS["replayed"]
    res = run_kernel(stream, (X,), {"n": 40}, (1,), "trn2", execute=True)
    assert loop_replay.STATS["replayed"] == before
    assert len(res.cores[0].instructions) == 200


@pytest.mark.filterwarnings("ignore:data race")       # (both programs store into the one output)
def test_multi_program_launches_are_not_replayed():
    before = loop_replay.STATS["replayed"]
    run_kernel(stream, (X,), {"n": 40}, (2,), "trn2", execute=False)
    assert loop_replay.STATS["replayed"] == before


def test_error_lines_name_the_kernel(monkeypatch):
    """An error inside a rewritten loop names the user's line."""
    def bad(x, n):
        P, F = x.shape
        for i in range(n):
            t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(t, x, x, op=nl.add)      # an HBM operand: refused
        return x
    with pytest.raises(Exception) as e:
        run_kernel(bad, (X,), {"n": 40}, (1,), "trn2", execute=False)
    line = bad.__code__.co_firstlineno + 4
    assert f"{line}" in str(e.value) or any(f.lineno == line for f in e.traceback)


def test_a_broken_delta_is_caught(monkeypatch):
    """The check after the bulk append compares the next block with the prediction: a prediction whose integers
    drift (a delta off by one) raises LoopReplayError."""
    real = loop_replay.predict

    def drifting(fit, q0, m, fields=None):
        for f, var in fit.var.items():
            fit.var[f] = [(pos, sk, ints, [d + 1 for d in delta]) for pos, sk, ints, delta in var]
        return real(fit, q0, m, fields)
    monkeypatch.setattr(loop_replay, "predict", drifting)
    # (the check's message, not the bulk append's "failed (...)": the drift must reach the comparison)
    with pytest.raises(loop_replay.LoopReplayError, match="differ from the prediction"):
        _run(stream, (X,), {"n": 60}, True, monkeypatch)


def test_a_counter_not_advanced_is_caught(monkeypatch):
    """The bulk append advances the buffer id counter; without it the next block's ids differ from the
    prediction."""
    monkeypatch.setattr(loop_replay, "skip_buffer_ids", lambda n: None)
    with pytest.raises(loop_replay.LoopReplayError, match="differ from the prediction"):
        _run(stream, (X,), {"n": 60}, True, monkeypatch)


def test_source_that_is_not_the_code_is_not_rewritten(tmp_path):
    """A kernel whose file changed after it was imported is run as compiled, not rewritten from the file."""
    src = tmp_path / "edited_kernel.py"
    body = ("import nki.isa as nisa\nimport nki.language as nl\n\n\ndef k(x, n):\n    P, F = x.shape\n"
            "    for i in range(n):\n        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)\n"
            "        nisa.dma_copy(t, x)\n    return x\n")
    src.write_text(body)
    mod = load_file("edited_kernel", str(src))
    assert loop_rewrite.rewritten(mod.k, lambda lid, it: it) is not None
    mod2 = load_file("edited_kernel2", str(src))
    src.write_text(body.replace("nisa.dma_copy(t, x)", "nisa.dma_copy(t, x)\n        nisa.dma_copy(t, x)"))
    import linecache
    linecache.checkcache(str(src))
    assert loop_rewrite.rewritten(mod2.k, lambda lid, it: it) is None


def test_a_slice_running_past_the_end_fails_where_it_does_without_replay(monkeypatch):
    """Rows at moving offsets that leave the input at iteration 40 of 60: the loop is not appended in bulk past
    that point, so the same error (same iteration, same message) is raised with the replay on and off."""
    msgs = []
    for on in (False, True):
        monkeypatch.setattr(loop_replay, "MIN_ITERATIONS", 16)
        prev = loop_replay.set_enabled(on)
        try:
            with pytest.raises(Exception) as e:
                run_kernel(moving_rows, (np.zeros((128 * 40, 64), np.float32),), {"n": 60}, (1,), "trn2",
                           execute=False)
        finally:
            loop_replay.set_enabled(prev)
        msgs.append((type(e.value), str(e.value)))
    assert msgs[0] == msgs[1]
    assert "5120" in msgs[0][1] or "40" in msgs[0][1]
