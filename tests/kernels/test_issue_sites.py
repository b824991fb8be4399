"""The issue cache at one call site whose arguments change from call to call, and an SBUF tile's layout numbers set
from its spelling's first tile (``language.ndarray``, issue 29): neither may change a record, a value or an error.
Each run here is compared with the same kernel run without the issue cache (every rule checked at every call), or
with NumPy in float64."""

import numpy as np
import pytest

import trnsim
from trnsim.isa.errors import NkiValidationError
from trnsim.kernels import isa_api, issue_cache, loop_replay
from trnsim.kernels.issue_cache import _buf_key, _view_key
from trnsim.kernels.jit import run_kernel

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def _run(fn, args, kw, cached=True, execute=False):
    prev = issue_cache.set_enabled(cached)
    prev_rep = loop_replay.set_enabled(False)       # the general path: every call issued
    try:
        return run_kernel(fn, args, kw, (1,), "trn2", execute=execute)
    finally:
        issue_cache.set_enabled(prev)
        loop_replay.set_enabled(prev_rep)


def _records(res):
    core = res.cores[0]
    ids = {}
    for b in core.columns.b:
        ids.setdefault(b, len(ids))
    out = []
    for r in core.instructions:
        out.append((r.opcode, r.engine, r.cycles, r.ns, r.loc,
                    tuple((ids[b], lo, hi, v) for b, lo, hi, v in r.writes),
                    tuple((ids[b], lo, hi, v) for b, lo, hi, v in r.reads)))
    return out


def _varying(x, n):
    """One call site per instruction, its arguments changing between iterations: the scalar, the operator, the
    aliasing of the operands, a keyword's value, a partition slice, a keyword appearing and going."""
    P, F = x.shape
    out = nl.ndarray((n, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    ops = (nl.multiply, nl.add, nl.subtract)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        scale = float(i % 3) + 0.5
        nisa.tensor_scalar(u, t, ops[i % 3], scale)                     # the operator and the scalar vary
        op2 = nl.multiply if i % 2 else nl.add                            # a keyword's value varies
        nisa.tensor_tensor(u, t, u if i // 2 % 2 else t, op=op2)        # u = t (op2) u, or t (op2) t
        nisa.tensor_tensor(u, u, t if i % 2 else u, op=nl.add)          # the aliasing alternates
        half = u[0:P // 2, :] if i % 4 == 3 else u                        # a slice every fourth iteration
        nisa.activation(half, nl.copy, half, scale=2.0) if i % 5 else nisa.activation(half, nl.copy, half)
        nisa.dma_copy(out[i], u)
    return out


def _varying_ref(x, n):
    x = x.astype(np.float64)
    P = x.shape[0]
    out = np.empty((n,) + x.shape)
    for i in range(n):
        scale = float(i % 3) + 0.5
        u = (x * scale, x + scale, x - scale)[i % 3]
        other = u if i // 2 % 2 else x
        u = x * other if i % 2 else x + other
        u = u + (x if i % 2 else u)
        if i % 5:
            if i % 4 == 3:
                u[:P // 2] = u[:P // 2] * 2.0
            else:
                u = u * 2.0
        out[i] = u
    return out


def test_a_call_site_whose_arguments_change_gives_the_values_and_record_of_an_uncached_run():
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
    n = 40                                  # past GEN_AFTER: the layouts' generated code runs too
    off = _run(_varying, (x,), {"n": n}, False, execute=True)
    on = _run(_varying, (x,), {"n": n}, True, execute=True)
    ref = _varying_ref(x, n)
    got = np.asarray(on.outputs, np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.asarray(on.outputs), np.asarray(off.outputs))
    assert _records(on) == _records(off)
    shape_off = _run(_varying, (x,), {"n": n}, False)
    shape_on = _run(_varying, (x,), {"n": n}, True)
    assert _records(shape_on) == _records(shape_off) == _records(on)


def _one_site(x, n, bad_at, bad):
    """Every iteration issues the same call site; at ``bad_at`` one of its arguments is bad."""
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    for i in range(n):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        b = i == bad_at
        dst = u[0:64, :] if b and bad == "partitions" else u
        src = x if b and bad == "space" else t
        op = "no_such_op" if b and bad == "operator" else nl.multiply
        imm = "2.0" if b and bad == "immediate" else 2.0
        kw = {"engine": nisa.engine.tensor} if b and bad == "engine" else {}
        nisa.tensor_scalar(dst, src, op, imm, **kw)
    return t


@pytest.mark.parametrize("bad", ["partitions", "space", "operator", "immediate", "engine"])
def test_a_bad_argument_at_a_known_call_site_fails_as_without_the_cache(bad):
    x = np.zeros((128, 64), np.float32)
    errs = []
    for cached in (False, True):
        with pytest.raises(NkiValidationError) as ei:
            _run(_one_site, (x,), {"n": 40, "bad_at": 37, "bad": bad}, cached)
        errs.append((str(ei.value), ei.value.instruction, ei.value.operand, ei.value.location))
    assert errs[0] == errs[1]


def _tiles(x, n):
    P, F = x.shape
    out = []
    for _ in range(n):
        out.append(nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf))
        out.append(nl.ndarray((P // 2, F), dtype=nl.bfloat16, buffer=nl.sbuf))
    _tiles.made = out
    return x


def test_an_sbuf_tile_gets_the_layout_numbers_its_layout_has():
    x = np.zeros((128, 64), np.float32)
    _run(_tiles, (x,), {"n": 4}, True)
    made = _tiles.made
    assert all(t._lk is not None for t in made[2:])          # set at allocation from the first tile of each spelling
    for t in made:
        got_buf, got_view = t.buf.layout_key, t._lk
        # worked out afresh from the tile's own fields
        t.buf.layout_key = None
        t._lk = None
        assert _buf_key(t.buf) == got_buf
        assert _view_key(t) == got_view
    assert made[0]._lk != made[1]._lk and made[0]._lk == made[2]._lk
    del _tiles.made


# -- a call site's function (issue_cache.KEY_AFTER) -------------------------------------------------------------

class _KeyCache(dict):
    """A core's issue cache that notes the key of every lookup and finds a replay noting its tensors."""

    def get(self, key, default=None):
        self.keys.append(key)
        return _NoteReplay(self)


class _NoteReplay(tuple):
    def __new__(cls, cache):
        self = super().__new__(cls)
        self.cache = cache
        return self

    def run(self, core, loc, leaves):
        self.cache.leaves.append(list(leaves))


class _Core:
    def __init__(self):
        self.issue_cache = _KeyCache()
        self.issue_cache.keys = []
        self.issue_cache.leaves = []


def _loop_key(fn, args, kwargs, hbm_off):
    """The key and tensors :func:`issue_cache.issue`'s loop builds for a call (no site: the loop only)."""
    core = _Core()
    issue_cache.issue(fn, core, ("k.py", 1), args, kwargs, hbm_off)
    return core.issue_cache.keys[-1], core.issue_cache.leaves[-1]


def _views():
    """Views of every kind a key tells apart: SBUF tiles, a slice, an HBM tensor and an HBM slice, a PSUM tile."""
    made = {}

    def k(x):
        P, F = x.shape
        made["t"] = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        made["u"] = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        made["half"] = made["u"][0:P // 2, :]
        made["hbm"] = nl.ndarray((4, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
        made["hbm1"] = made["hbm"][1]
        made["hbm2"] = made["hbm"][2]
        made["ps"] = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum)
        return x
    _run(k, (np.zeros((128, 64), np.float32),), {}, True)
    return made


def test_a_site_function_replays_the_layout_of_the_loops_key_or_declines():
    v = _views()
    t, u, half, hbm1, hbm2, ps = v["t"], v["u"], v["half"], v["hbm1"], v["hbm2"], v["ps"]
    from trnsim.isa import INSTRUCTIONS
    from trnsim.kernels.issue_cache import _site_function
    tt, ts, dma = INSTRUCTIONS["tensor_tensor"], INSTRUCTIONS["tensor_scalar"], INSTRUCTIONS["dma_copy"]
    # (function, hbm_off, the call the site function is made for, calls it is then given)
    cases = [
        (tt, True, ((u, t, u), {"op": nl.add}),
         [((u, t, u), {"op": nl.add}), ((u, t, t), {"op": nl.add}), ((t, t, t), {"op": nl.multiply}),
          ((u, u, t), {"op": nl.add}), ((half, t, u), {"op": nl.add}), ((ps, t, u), {"op": nl.add}),
          ((u, t, u), {}), ((u, t, u), {"op": "add"}), ((u, t), {"op": nl.add}), ((u, t, u, 1), {"op": nl.add}),
          ((u, t, u), {"op": nl.add, "x": 1}), ((u, t, u), {"opx": nl.add})]),
        (ts, True, ((u, t, nl.multiply, 2.0), {}),
         [((u, t, nl.multiply, 2.0), {}), ((u, t, nl.add, 3.0), {}), ((u, t, nl.add, 3), {}),
          ((u, u, nl.add, True), {}), ((half, half, nl.multiply, 2.0), {}), ((u, t, nl.multiply, 2.0), {"a": 1})]),
        (ts, True, ((u, t, nl.multiply), {"operand0": 2.0, "engine": None}),
         [((u, t, nl.multiply), {"engine": None, "operand0": 2.0}), ((u, t, nl.add), {"operand0": 1.5, "engine": None}),
          ((u, t, nl.add), {"operand0": 1.5, "engine": 1}), ((u, t, nl.add), {"operand0": 1.5})]),
        (dma, False, ((u, hbm1), {}),
         [((u, hbm1), {}), ((u, hbm2), {}), ((t, hbm2), {}), ((hbm1, u), {}), ((half, hbm1), {}), ((u, u), {})]),
        (tt, True, ((u, t, u), {"op": nl.add}), [((u, t, [u]), {"op": nl.add}), ((u, t, (1, 2)), {"op": nl.add})]),
    ]
    made = checked = 0
    for fn, hbm_off, (a0, k0), calls in cases:
        _loop_key(fn, a0, k0, hbm_off)      # (as at a site: the loop has met the call's kinds of view first)
        kf = _site_function(fn, a0, k0, hbm_off)
        assert kf is not None
        made += 1
        for args, kwargs in calls:
            core = _Core()
            done = kf(core, ("k.py", 1), args, kwargs)
            want, want_leaves = _loop_key(fn, args, kwargs, hbm_off)
            if done:
                assert core.issue_cache.keys == [want], (fn.__name__, args, kwargs)
                assert core.issue_cache.leaves == [want_leaves]
                assert want_leaves == [a for a in args if isinstance(a, type(u))]
                checked += 1
            else:
                assert core.issue_cache.keys == []          # declined before looking anything up
                # refused: the call's arguments are of other kinds than the function's (its key is another shape)
                assert len(args) != len(a0) or set(kwargs) != set(k0) or any(
                    type(a) is not type(b) for a, b in zip(args + tuple(kwargs[k] for k in sorted(kwargs)),
                                                          a0 + tuple(k0[k] for k in sorted(k0))))
    assert made == 5 and checked >= 15
    # arguments of kinds the loop keys as tuples: no site function
    assert _site_function(tt, (u, t, [u]), {"op": nl.add}, True) is None
    assert _site_function(tt, (u, t), {"data1": u, "op": nl.add}, True) is None


def _dispatch(x, n):
    """One call site calling tensor_tensor and tensor_scalar in turn, and a site whose scalar changes type."""
    P, F = x.shape
    out = nl.ndarray((n, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    for i in range(n):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2 if i % 7 == 6 else 2.0)
        f, a = (nisa.tensor_tensor, (u, t, u)) if i % 3 else (nisa.tensor_scalar, (u, u, nl.add, 1.0))
        f(*a, **({"op": nl.add} if f is nisa.tensor_tensor else {}))
        nisa.dma_copy(out[i], u)
    return out


def test_site_functions_leave_values_and_records_as_uncached():
    x = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    n = 120                                 # far past KEY_AFTER: most calls go through the sites' functions
    for kern, ref in ((_varying, _varying_ref(x, n)), (_dispatch, None)):
        off = _run(kern, (x,), {"n": n}, False, execute=True)
        on = _run(kern, (x,), {"n": n}, True, execute=True)
        if ref is not None:
            np.testing.assert_allclose(np.asarray(on.outputs, np.float64), ref, rtol=1e-6, atol=1e-6)
        assert np.array_equal(np.asarray(on.outputs), np.asarray(off.outputs))
        assert _records(on) == _records(off)
        assert _records(_run(kern, (x,), {"n": n}, True)) == _records(on)
        # the sites of the kernel that call one function with arguments of one kind have their function
        code = kern.__code__
        sites = [s for s in isa_api._LOCS.values() if s[4] is code]
        assert sum(callable(s[2]) for s in sites) >= (4 if kern is _varying else 2)
    xd = x.astype(np.float64)
    want = np.stack([xd * 2 + xd if i % 3 else xd * 2 + 1 for i in range(n)])
    np.testing.assert_allclose(np.asarray(_run(_dispatch, (x,), {"n": n}, True, execute=True).outputs), want,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad", ["partitions", "space", "operator", "immediate", "engine"])
def test_a_bad_argument_at_a_site_with_a_site_function_fails_as_without_the_cache(bad):
    x = np.zeros((128, 64), np.float32)
    errs = []
    for cached in (False, True):
        with pytest.raises(NkiValidationError) as ei:
            _run(_one_site, (x,), {"n": 100, "bad_at": 90, "bad": bad}, cached)
        errs.append((str(ei.value), ei.value.instruction, ei.value.operand, ei.value.location))
    assert errs[0] == errs[1]


def _spellings(x, n):
    """Tiles whose spelling changes from call to call: the same shape as another tuple, a list, NumPy integers, a
    float; another dtype; another memory; each used by one instruction."""
    P, F = x.shape
    made = []
    for i in range(n):
        for shape, dt, buf in (((P, F), x.dtype, nl.sbuf), ([P, F], x.dtype, nl.sbuf),
                               ((np.int64(P), np.int32(F)), x.dtype, nl.sbuf), ((P, F // 2), x.dtype, nl.sbuf),
                               ((P, F), nl.bfloat16, nl.sbuf), ((P, F), nl.float32, nl.psum),
                               ((P // 2, F), "float32", nl.sbuf), ((P, F), x.dtype, nl.sbuf)):
            t = nl.ndarray(shape, dtype=dt, buffer=buf)
            made.append((t.shape, t.strides, t.dtype.name, t.buf.kind, t.buf.shape, t.buf.bytes_pp))
            nisa.memset(t, float(i))
    _spellings.made = made
    return x


def test_tiles_of_changing_spellings_are_made_as_their_spelling_says():
    x = np.zeros((128, 64), np.float32)
    recs = []
    for cached in (False, True):
        res = _run(_spellings, (x,), {"n": 3}, cached)
        recs.append(_records(res))
        made = _spellings.made
        want = [((128, 64), (64, 1), "float32", "sbuf", (128, 64), 256)] * 3 + [
            ((128, 32), (32, 1), "float32", "sbuf", (128, 32), 128),
            ((128, 64), (64, 1), "bfloat16", "sbuf", (128, 64), 128),
            ((128, 64), (64, 1), "float32", "psum", (128, 64), 256),
            ((64, 64), (64, 1), "float32", "sbuf", (64, 64), 256),
            ((128, 64), (64, 1), "float32", "sbuf", (128, 64), 256)]
        assert made == want * 3
        assert all(type(s) is int for m in made for s in m[0] + m[4])
    assert recs[0] == recs[1]
    del _spellings.made


@pytest.mark.parametrize("which", ["varying", "dispatch", "row_softmax", "layer_norm"])
def test_records_with_and_without_site_functions_are_identical(which, monkeypatch):
    """The same kernel through the cache with its sites' functions (the default) and with none (KEY_AFTER out
    of reach: every call through issue's loop): the same records, and in a run that computes values the same
    outputs."""
    from trnsim.kernels.library import normalization, softmax
    r = np.random.default_rng(2)
    if which in ("varying", "dispatch"):
        fn = _varying if which == "varying" else _dispatch
        args, kw = (r.standard_normal((128, 64)).astype(np.float32),), {"n": 80}
    elif which == "row_softmax":                    # 64 row tiles: its sites are called 64 times each
        fn, args, kw = softmax.row_softmax, (r.standard_normal((8192, 256)).astype(np.float32),), {}
    else:
        fn, kw = normalization.layer_norm, {}
        args = tuple(r.standard_normal((8192, 256)).astype(np.float32) for _ in range(3))
    got = {}
    default = issue_cache.KEY_AFTER
    for after in (default, 10 ** 9):
        monkeypatch.setattr(issue_cache, "KEY_AFTER", after)
        isa_api._LOCS.clear()                        # (sites made afresh: none keeps a function from before)
        shape = _run(fn, args, kw, True)
        full = _run(fn, args, kw, True, execute=True)
        sites = list(isa_api._LOCS.values())
        got[after] = (_records(shape), _records(full), np.asarray(full.outputs), sum(callable(s[2]) for s in sites))
    (rs, rf, out, made), (rs0, rf0, out0, made0) = got[default], got[10 ** 9]
    assert made >= 2 and made0 == 0                # the sites' functions ran in the first, none in the second
    assert rs == rs0 and rf == rf0 and rs == rf
    assert np.array_equal(out, out0)


# -- a site function with its layout's replay written in (issue_cache._site_function's ``prog``) -----------------

def _state(res):
    """Records, the capacity tables and the buffer table of a run whose buffer ids were counted from 1."""
    core = res.cores[0]
    occ = core.occupancy
    occ.materialize()
    return (_records(res), [(k, list(v)) for k, v in occ.ranges.items()], list(occ.tiles.items()),
            list(occ.parts.items()), dict(core.buffers), occ.seq)


def _run_ids(fn, args, kw, monkeypatch, execute=False):
    import itertools

    from trnsim.memory import space
    monkeypatch.setattr(space, "_ids", itertools.count(1))
    return _run(fn, args, kw, True, execute=execute)


def _switching(x, n, every):
    """A call site whose tile changes its layout: the free size halves after ``n // 2`` calls (every=0), or
    alternates from call to call (every=1)."""
    P, F = x.shape
    out = nl.ndarray((n, P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        f = F if (i % 2 if every else i < n // 2) else F // 2
        t = nl.ndarray((P, f), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[:, 0:f])
        nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(out[i, :, 0:f], t)
    return out


def _site_of(code, lineno):
    return [s for s in isa_api._LOCS.values() if s[4] is code and s[0][1] == lineno]


@pytest.mark.parametrize("every", [0, 1])
def test_a_site_replays_the_layout_written_into_it_and_others_through_their_own_code(every, monkeypatch):
    """The site's function writes in the layout it replayed when made; a call finding another layout replays
    that one through its ``run``, and after KEY_AFTER such calls the function is made again for it (at most
    SITE_REMAKES times, then without a layout written in).  Records, live ranges, tile and buffer tables and
    values are those of the run without site functions and of the uncached run."""
    x = np.random.default_rng(3).standard_normal((128, 64)).astype(np.float32)
    n = 400 if every else 200
    isa_api._LOCS.clear()
    on = _run_ids(_switching, (x,), {"n": n, "every": every}, monkeypatch)
    line = _switching.__code__.co_firstlineno + 9                  # the tensor_scalar call
    (site,) = _site_of(_switching.__code__, line)
    sf = site[2]
    assert callable(sf)
    if every:       # two layouts in turn: remade SITE_REMAKES times, then a function with none written in
        assert "prog is P" not in sf.source
    else:           # remade once, for the second layout: the one the core's cache holds for the narrow tile
        assert "prog is P" in sf.source and sf.__globals__["MISS"][1] == 1
        p = sf.__globals__["P"]
        # (its write: the narrow tile's access pattern, (offset, shape, strides))
        assert any(v is p for v in on.cores[0].issue_cache.values()) and p[0][3][0][2][2][1] == (128, 32)
    monkeypatch.setattr(issue_cache, "KEY_AFTER", 10 ** 9)
    isa_api._LOCS.clear()
    none = _run_ids(_switching, (x,), {"n": n, "every": every}, monkeypatch)
    assert _state(on) == _state(none)
    prev = issue_cache.set_enabled(False)
    try:
        off = _run_ids(_switching, (x,), {"n": n, "every": every}, monkeypatch, execute=True)
    finally:
        issue_cache.set_enabled(prev)
    monkeypatch.setattr(issue_cache, "KEY_AFTER", 32)
    isa_api._LOCS.clear()
    full = _run_ids(_switching, (x,), {"n": n, "every": every}, monkeypatch, execute=True)
    assert _records(full) == _records(off) == _records(on)
    assert np.array_equal(np.asarray(full.outputs), np.asarray(off.outputs), equal_nan=True)   # (the sentinel)
    want = np.zeros((n, 128, 64))
    for i in range(n):
        f = 64 if (i % 2 if every else i < n // 2) else 32
        want[i, :, :f] = x[:, :f].astype(np.float64) * 2
    got = np.asarray(full.outputs, np.float64)
    for i in range(n):          # (the output's unwritten half holds the sentinel)
        f = 64 if (i % 2 if every else i < n // 2) else 32
        np.testing.assert_array_equal(got[i, :, :f], want[i, :, :f])


def _plain_stream(x, n):
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


def test_runs_after_the_first_and_the_loop_replay_see_the_same_state(monkeypatch):
    """A kernel run again in the process (a new core, whose cache holds new layout objects) with its sites'
    functions from the first run: the same state; and the loop replay, which counts the layouts' replays through
    their ``run``, still replays the loop with its sites' functions there, leaving the same state."""
    x = np.zeros((128, 64), np.float32)
    isa_api._LOCS.clear()
    kw = {"n": 120}
    first = _state(_run_ids(_plain_stream, (x,), kw, monkeypatch))
    sites = _site_of(_plain_stream.__code__, _plain_stream.__code__.co_firstlineno + 7)
    assert len(sites) == 1 and "prog is P" in sites[0][2].source
    for _ in range(2):
        assert _state(_run_ids(_plain_stream, (x,), kw, monkeypatch)) == first
    monkeypatch.setattr(loop_replay, "MIN_ITERATIONS", 16)
    for _ in range(2):
        before = loop_replay.STATS["replayed"]
        prev = loop_replay.set_enabled(True)
        try:
            import itertools

            from trnsim.memory import space
            monkeypatch.setattr(space, "_ids", itertools.count(1))
            res = run_kernel(_plain_stream, (x,), kw, (1,), "trn2", execute=False)
        finally:
            loop_replay.set_enabled(prev)
        assert loop_replay.STATS["replayed"] == before + 1
        assert _state(res) == first


def test_each_new_run_gets_its_own_layout_written_in(monkeypatch):
    """Runs of a kernel, one after another (each a new core and cache): the remakes are counted per core, so past
    SITE_REMAKES runs the site's function still has the running core's layout written in."""
    x = np.zeros((128, 64), np.float32)
    isa_api._LOCS.clear()
    code = _plain_stream.__code__
    for _ in range(issue_cache.SITE_REMAKES + 3):
        res = _run(_plain_stream, (x,), {"n": 100}, True)
        (site,) = _site_of(code, code.co_firstlineno + 7)
        sf = site[2]
        assert "prog is P" in sf.source
        assert any(v is sf.__globals__["P"] for v in res.cores[0].issue_cache.values())
