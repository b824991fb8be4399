"""Loop-body replay for shape-only runs: a kernel loop's later iterations appended to the record in bulk.

In a shape-only run (``execute=False``) an iteration of a loop body such as ``for i in range(n): t = nl.ndarray(..);
nisa.dma_copy(t, x[i]); ...`` changes the core only by appending to its state: record columns, live ranges, tile
and buffer tables, interned access patterns, the buffer id counter; and it allocates and frees tiles.  When the
body is straight-line code whose only effects go through trnsim (checked statically on the kernel's source and
dynamically when the loop starts), iterations ``k`` and ``k + p`` differ only by affine changes of those integers
(buffer ids, instruction numbers, HBM offsets), and the allocator repeats with period ``p``, the iterations after a
few observed ones are predicted exactly and appended in bulk, without running their Python.

How (``run_kernel`` uses :func:`rewritten` only for a one-program shape-only launch that records columns):

1. :func:`rewritten` (``loop_rewrite.py``) parses the kernel function's own source (only when it compiles to the
   function's own code; a closure -- a kernel defined inside a function, reading its names -- is compiled inside a
   function defining them and runs with its own cells) and rewrites each *eligible* loop ``for NAME in EXPR:`` to
   ``for NAME in __trnsim_loop__(ID, EXPR):`` (line numbers and file name kept, so error messages name the user's
   lines).  Eligible: no ``else``; the body only assignments to plain local names, expression statements,
   ``pass`` and ``if``/``elif``/``else`` whose tests are comparisons, ``and``/``or``/``not`` and integer
   arithmetic of the loop index, int constants and names from outside the body; expressions only names,
   constants, attribute loads, subscripts/slices of names, tuple/list displays, ``+ - *`` on integers (``*`` with
   at most one operand depending on the loop index, ``//`` and ``%`` only on values free of it: every integer the
   body computes from the index is affine in it) and calls whose callee is a name not assigned in the body or an
   attribute chain of one; no name of the body read before it is assigned in the iteration, nor after an ``if``
   that assigns it in one branch only (no loop-carried Python state); the loop name never assigned in the body.
2. When the loop starts (:func:`_loop`), the iterable must be a ``range`` of at least ``MIN_ITERATIONS``, the
   launch one program, shape-only, with record columns and the issue cache on, and every name the body reads
   from outside it must hold a module, a trnsim tensor, a dtype or a plain value (ints where it does arithmetic,
   ints or bools in tests); subscript bases must be tensors; every callee must be one of trnsim's ``nki.isa``
   instructions or ``nki.language.ndarray`` (by identity), or a helper function of the kernel's (not trnsim's)
   whose body meets the rules of 1 (no ``if``; a ``return`` last) with each parameter as the call passes it (an
   int, a tensor, anything else: neither subscripted nor used in arithmetic) and whose names and callees meet
   these, up to ``MAX_HELPER_DEPTH`` calls deep.  The ``if`` tests are evaluated for every index (one compiled
   function of the index, ``LoopInfo.outcomes``).  Otherwise the loop runs normally.
3.  The first ``WARMUP`` iterations run normally; then iterations run normally while their effects are observed
   (:class:`_Watch`: the appended column slices, the new and touched live ranges, tiles, partitions and buffers, the
   number of new interned patterns, the instruction count and buffer ids, each allocator call and release with its
   address, every instruction an issue-cache hit of a layout cached before (so validated, with the same rules, as
   every skipped one would be), no warning shown, no new cache entry, no barrier, fence or block tensor).  As soon as
   the last three blocks of ``p`` iterations (``p <= PMAX``) are equal up to integers that change by the same amount
   from block to block, and the allocators' states repeat every ``p`` iterations, the blocks up to iteration ``n-p``
   (and up to the first block whose branches differ from the block before it: each skipped iteration takes the
   branches of the observed one it is predicted from) are made from the last observed one (NumPy for the integers, C
   loops -- list repetition, zip, str.format -- for the rest) and appended, unless a moving operand extent would
   leave its buffer on the way (then the loop runs normally and fails where it fails without replay).  The new tiles'
   live ranges and table entries are not made one by one: they go to the occupancy as one segment
   (``loop_fit.TileSegment``, ``Occupancy.add_bulk``), whose columns the capacity sweep reads as arrays and which is
   put in the tables only when something needs them (a refusal, a quadrant-placed tile); the buffer id counter and
   instruction count advance; the issue cache's replay counters advance as the skipped hits would have advanced them
   (``GEN_AFTER``).  The remaining iterations run normally (so the kernel's names hold what the last iteration made)
   and the first block of them is checked against the prediction: a difference raises :class:`LoopReplayError`
   (impossible by construction; the check is the proof's backstop).  The cycle collector is paused from the first
   observed iteration to the end of the checked block.

Not mirrored (memos whose numbers or contents never reach a record): the issue cache's view-layout numbering for
the HBM offsets of skipped ``dma_copy`` s; Python objects (views, buffers) of skipped iterations, which no name
holds after the loop; when the cycle collector frees tiles held in reference cycles (their addresses go back to
the allocator later or sooner; addresses never reach a record, and differ with the collector's timing in a run
without replay too).  A slice that leaves its tensor in a dimension while its element range stays inside the
buffer (a multi-dimensional slice past a middle dimension's end) fails at the checked block, with that
iteration's index in the message, instead of at the first iteration past the end.
``TRNSIM_LOOP_REPLAY=0`` turns the replay off.
"""

from __future__ import annotations

import enum
import gc
import os
import sys
import types
import warnings
from itertools import islice

import numpy as np

from .. import config
from ..memory import HBM, Tensor, next_buffer_id, skip_buffer_ids
from ..memory.dtypes import DType
from . import issue_cache as _ic
from .context import current
from .loop_fit import TileSegment, concat, fit_blocks, predict, same, splits
from .loop_rewrite import LOOPS, helper_info as _helper_info, rewritten as _rewritten

__all__ = ["enabled", "set_enabled", "rewritten", "STATS", "LoopReplayError"]

# shorter loops run normally: observing, fitting and appending cost ~2.5 ms per loop (the stream kernel of
# benchmarks/bench_timing.py, 5 instructions per iteration, best of 5: 64 iterations 1.96 ms normally, 3.31 ms with
# the replay; 128: 3.39 / 3.78 ms; 256: 6.20 / 4.39 ms), so a loop pays from ~150 iterations
MIN_ITERATIONS = 160
WARMUP = 2              # iterations run before observing (the first makes the issue cache's layouts)
# longest period looked for: the allocator's states of a body making two tiles repeat every 3 iterations (the new
# tile is placed before the old one it replaces is freed), and a branch on ``i % 2`` makes that 6
PMAX = 6
# what happened, for tests and benchmarks: loops replayed, iterations appended in bulk, loops declined, the
# period of the last loop replayed, why the last loop declined
STATS = {"replayed": 0, "bulk_iterations": 0, "declined": 0, "period": 0, "why": ""}


class LoopReplayError(RuntimeError):
    """The iterations run after a bulk append differ from the prediction (an internal error)."""


def enabled() -> bool:
    return config.loop_replay


def set_enabled(on: bool) -> bool:
    return config.set("loop_replay", bool(on))


def rewritten(fn):
    """``fn`` with its eligible loops going through the replay iterator (``loop_rewrite.rewritten``), or None."""
    return _rewritten(fn, _loop)


# -- the check when a loop starts --------------------------------------------------------------------------------------

_ALLOWED_CALLEES = None


def _allowed_callees():
    global _ALLOWED_CALLEES
    if _ALLOWED_CALLEES is None:
        from .. import isa as _isa
        from . import isa_api, language
        s = {id(getattr(isa_api, n)) for n in _isa.INSTRUCTIONS if hasattr(isa_api, n)}
        s.add(id(isa_api.dma_copy))
        s.add(id(language.ndarray))
        _ALLOWED_CALLEES = s
    return _ALLOWED_CALLEES


_PLAIN_VALUES = (int, float, str, bool, type(None), DType, np.dtype, enum.Enum, types.FunctionType,
                 types.BuiltinFunctionType, np.ufunc, type)


def _plain(v):
    if isinstance(v, _PLAIN_VALUES):
        return True
    if type(v) is tuple:
        return all(_plain(x) for x in v)
    return False


def _lookup(frame, name):
    loc = frame.f_locals
    if name in loc:
        return True, loc[name]
    return _lookup_globals(frame.f_globals, name)


def _lookup_globals(g, name):
    if name in g:
        return True, g[name]
    b = g.get("__builtins__", __builtins__)
    b = b if isinstance(b, dict) else vars(b)
    if name in b:
        return True, b[name]
    return False, None


def _fn_lookup(fn):
    """``name -> (found, value)`` as helper function ``fn``'s body reads a name not its own: its closure cells,
    then its module's globals, then the builtins."""
    cells = {}
    for n, c in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            cells[n] = c.cell_contents
        except ValueError:           # an empty cell: reading it raises, as the call would
            pass
    g = fn.__globals__

    def look(name):
        if name in cells:
            return True, cells[name]
        return _lookup_globals(g, name)
    return look


MAX_HELPER_DEPTH = 4        # helpers calling helpers: deeper chains run normally


def _kind(v):
    return "int" if type(v) is int else "tensor" if isinstance(v, Tensor) else "other"


def _bind(fn, descs, kws, look):
    """Helper ``fn``'s parameters -> (kind, depends on the index) for a call with arguments described by
    ``descs`` and ``kws`` (``LoopInfo.callees``), or None (a call the pass does not follow)."""
    code = fn.__code__
    npos = code.co_argcount
    names = code.co_varnames[:npos + code.co_kwonlyargcount]
    if len(descs) > npos:
        return None
    bound = dict(zip(names, descs))
    for k, d in kws.items():
        if k not in names or k in bound or names.index(k) < code.co_posonlyargcount:
            return None
        bound[k] = d
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    params = {}
    for j, nm in enumerate(names):
        d = bound.get(nm)
        if d is None:
            if j < npos and j >= npos - len(defaults):
                v = defaults[j - (npos - len(defaults))]
            elif nm in kwdefaults:
                v = kwdefaults[nm]
            else:
                return None
            if not (isinstance(v, (Tensor, types.ModuleType)) or _plain(v)):
                return None
            params[nm] = (_kind(v), False)
            continue
        kind, dep, free = d
        if kind == "free":
            ok, v = look(free)
            if not ok:
                return None
            kind = _kind(v)
        params[nm] = (kind, dep)
    return params


def _names_ok(info, look, depth=0):
    """Whether the names ``info``'s body reads from outside it hold what the replay allows (a module, a trnsim
    tensor, a dtype or a plain value; ints where it does arithmetic, ints or bools in ``if`` tests), and every
    callee is one of trnsim's ``nki.isa`` instructions, ``nki.language.ndarray`` or a helper function whose body
    passes the same rules (``loop_rewrite.helper_info``)."""
    for n in info.free:
        ok, v = look(n)
        if not ok:
            return False
        if n in info.flags and type(v) not in (int, bool):
            return False
        if isinstance(v, types.ModuleType):
            if n in info.subs or n in info.ints:
                return False
            continue
        if isinstance(v, Tensor):
            if n in info.ints:
                return False
            continue
        if n in info.subs:
            return False
        if n in info.ints and type(v) is not int:
            return False
        if not _plain(v):
            return False
    allowed = _allowed_callees()
    for chain, descs, kws in info.callees:
        ok, v = look(chain[0])
        if not ok:
            return False
        if len(chain) > 1:
            if not isinstance(v, types.ModuleType):
                return False
            for a in chain[1:]:
                v = getattr(v, a, None)
                if v is None:
                    return False
        if id(v) in allowed:
            continue
        # a helper function of the kernel's (not trnsim's own: its functions reach the core other ways)
        if (depth >= MAX_HELPER_DEPTH or type(v) is not types.FunctionType
                or (getattr(v, "__module__", None) or "").startswith("trnsim")):
            return False
        hlook = _fn_lookup(v)
        params = _bind(v, descs, kws, look)
        if params is None:
            return False
        hinfo = _helper_info(v, params)
        if hinfo is None or not _names_ok(hinfo, hlook, depth + 1):
            return False
    return True


def _dynamic_ok(info, frame):
    return _names_ok(info, lambda n: _lookup(frame, n))


def _outcomes(info, frame, rng):
    """The ``if`` tests' values at every index of ``rng`` (a list of tuples), or None when the body has no test;
    False when a test cannot be evaluated."""
    if not info.tests:
        return None
    values = {}
    for n in info.flags:
        ok, v = _lookup(frame, n)
        values[n] = v
    try:
        return list(map(info.outcomes(values), rng))
    except Exception:          # (e.g. a modulo by zero in a branch never taken): the loop runs normally
        return False


def _loop(lid, iterable):
    """The iterator a rewritten loop runs over: ``iterable`` itself unless the replay applies."""
    if not config.loop_replay or type(iterable) is not range or len(iterable) < MIN_ITERATIONS or not _ic.enabled():
        return iterable
    try:
        ctx = current()
    except Exception:
        return iterable
    core = ctx.core
    if len(ctx.cores) != 1 or core.execute or not core.recording or core.programs is not None \
            or core.occupancy.log is not None:
        return iterable
    info = LOOPS[lid]
    frame = sys._getframe(1)
    if not _dynamic_ok(info, frame):
        STATS["declined"] += 1
        STATS["why"] = "a name or callee of the body is not one the replay knows"
        return iterable
    outs = _outcomes(info, frame, iterable)
    if outs is False:
        STATS["declined"] += 1
        STATS["why"] = "an if test that cannot be evaluated for every index"
        return iterable
    return _replay(iterable, core, info, outs)


# -- observing, predicting, appending -------------------------------------------------------------------------

_COLS = ("eng", "cost", "pre", "opcode", "flops", "loc", "nw", "nops", "dma", "rows", "part0", "nbytes", "dge",
         "b", "lo", "hi", "v")
def _alloc_state(spaces):
    return tuple(sp.state() for sp in spaces)


class _Watch:
    """Observes one iteration's effects on the core."""

    def __init__(self, core, spaces):
        self.core = core
        self.spaces = spaces
        self.events = None
        self.hits = 0
        self.shown = 0

    def mark(self):
        c = self.core.columns
        occ = self.core.occupancy
        core = self.core
        return ([len(getattr(c, f)) for f in _COLS], len(c.bar), c.barrier, occ.seq, len(occ.ranges),
                len(occ.tiles), len(occ.parts), len(occ.blocks), len(occ.fences), len(core.buffers),
                core.interned_patterns, len(core.issue_cache), next_buffer_id(), _alloc_state(self.spaces))

    def delta(self, a, b):
        """The fields of the iteration between marks ``a`` and ``b`` (None: not replayable)."""
        core = self.core
        c = core.columns
        occ = core.occupancy
        if a[1] != b[1] or a[2] != b[2] or a[7] != b[7] or a[8] != b[8] or a[11] != b[11]:
            STATS["why"] = "a barrier, fence, block tensor or new issue-cache entry"
            return None
        d = {}
        for j, f in enumerate(_COLS):
            d[f] = getattr(c, f)[a[0][j]:b[0][j]]
        nr = b[4] - a[4]
        rk = list(islice(reversed(occ.ranges), nr))[::-1]
        new = set(rk)
        d["rk"] = rk
        d["rv"] = [tuple(occ.ranges[k]) for k in rk]
        if b[5] - a[5] != nr or b[6] - a[6] != nr:
            STATS["why"] = "tile tables out of step"
            return None
        tk = list(islice(reversed(occ.tiles), nr))[::-1]
        pk = list(islice(reversed(occ.parts), nr))[::-1]
        if tk != rk or pk != rk:
            STATS["why"] = "tile tables out of step"
            return None
        d["tv"] = [occ.tiles[k] for k in rk]
        d["pv"] = [occ.parts[k] for k in rk]
        mk = []
        seen = set()
        blocks = occ.blocks
        for bid in d["b"]:
            if bid in blocks:
                STATS["why"] = "a block tensor touched"
                return None
            key = (bid, -1)
            if key in new or key in seen:
                continue
            if key in occ.ranges:
                seen.add(key)
                mk.append(key)
        d["mk"] = mk
        d["mv"] = [tuple(occ.ranges[k]) for k in mk]
        nb = b[9] - a[9]
        bk = list(islice(reversed(core.buffers), nb))[::-1]
        d["bk"] = bk
        d["bv"] = [core.buffers[k] for k in bk]
        d["events"] = self.events
        d["#"] = (b[3] - a[3], b[10] - a[10], b[12] - a[12])
        if self.hits != b[3] - a[3] or self.shown:
            STATS["why"] = "an instruction not replayed from the issue cache, or a warning shown"
            return None
        return d

    # allocator calls and releases, recorded while observing
    def hook(self):
        w = self
        for sp in self.spaces:
            take, alloc, rel = sp.take, sp.allocate, sp.release

            def t_(size, what="tensor", _f=take, _n=sp.name):
                r = _f(size, what)
                w.events.append((_n, "take", size, r))
                return r

            def a_(size, what="tensor", _f=alloc, _n=sp.name):
                r = _f(size, what)
                w.events.append((_n, "alloc", size, r))
                return r

            def r_(addr, size, _f=rel, _n=sp.name):
                w.events.append((_n, "rel", addr, size))
                return _f(addr, size)
            sp.take, sp.allocate, sp.release = t_, a_, r_

    def unhook(self):
        for sp in self.spaces:
            for a in ("take", "allocate", "release"):
                sp.__dict__.pop(a, None)

    def new_events(self):
        self.events = ev = []
        return ev


def _extents_ok(core, fit, m):
    """Whether every operand extent that moves stays inside its buffer up to the last block appended (``m``
    blocks after the base one): a slice past the end would raise in the iteration that makes it, so such a loop
    runs normally and raises there.  (The slice's arguments are affine in the index: if the first observed block
    and the last appended one are inside, every block between is.)"""
    moving = {}
    for f in ("lo", "hi"):
        for pos, sk, ints, delta in fit.var.get(f, ()):
            if sk != 0:
                return False
            moving.setdefault(pos, {})[f] = ints[0] + m * delta[0]
    if not moving:
        return True
    bvar = {pos for pos, _, _, _ in fit.var.get("b", ())}
    bases = fit.base["b"]
    for pos, ends in moving.items():
        info = core.buffers.get(bases[pos]) if pos not in bvar else None
        if info is None:
            return False
        kind, bpp, parts, isz = info
        nelem = (bpp if kind == HBM else bpp * parts) // isz
        lo = ends.get("lo", fit.base["lo"][pos])
        hi = ends.get("hi", fit.base["hi"][pos])
        if lo < 0 or hi > nelem:
            return False
    return True


_MODIFIED = ("mk", "mv")                 # earlier tiles whose live ranges the iterations extend


def _apply(core, pred, m, fit):
    c = core.columns
    occ = core.occupancy
    sd = core.intern_pattern
    v = pred["v"]
    if fit.var.get("v"):
        L = len(fit.base["v"])
        for pos, _, _, _ in fit.var["v"]:
            v[pos::L] = [sd(x) for x in v[pos::L]]
    for f in _COLS:
        getattr(c, f).extend(pred[f])
    occ.add_bulk(TileSegment(fit, 1, m))
    # an earlier tile's range ends where the last block leaves it
    last = predict(fit, m, 1, _MODIFIED)
    ranges = occ.ranges
    for k, val in zip(last["mk"], last["mv"]):
        ranges[k][:] = val
    core.buffers.update(zip(pred["bk"], pred["bv"]))
    ninstr, _, nids = fit.counts
    occ.seq += m * ninstr
    skip_buffer_ids(m * nids)


_BULK_FIELDS = frozenset(_COLS + ("bk", "bv"))


def _replay(rng, core, info, outs=None):
    """The replay iterator (a generator) over ``rng``.  The cycle collector is paused from the first observed
    iteration to the end of the checked block: tiles caught in reference cycles (the first iteration's, through the
    issue cache's probe) go back to the allocator when a collection runs, and a collection in the middle would
    make the allocators' states differ between blocks; the collector runs again, later, as it would have."""
    st = {"gc": gc.isenabled(), "done": False}
    gc.disable()
    try:
        for v in _replay_steps(rng, core, info, st, outs):
            if st["done"] and st["gc"]:
                st["gc"] = False
                gc.enable()
            yield v
    finally:
        if st["gc"]:
            gc.enable()


def _periodic_blocks(outs, k, p, m):
    """How many blocks of ``p`` iterations from ``k`` on (at most ``m``, and one more for the check) take the same
    branches as the block before them: the largest ``m' <= m`` such that iterations ``k .. k + (m' + 1) p`` do."""
    end = k + (m + 1) * p
    if outs[k:end] == outs[k - p:end - p]:
        return m
    j = k
    while outs[j] == outs[j - p]:
        j += 1
    return (j - k) // p - 1


def _replay_steps(rng, core, info, st, outs):
    n = len(rng)
    spaces = (core.sbuf, core.psum, core.chip.hbm)
    k = 0
    while k < WARMUP:
        yield rng[k]
        k += 1
    w = _Watch(core, spaces)
    cache = core.issue_cache
    wrapped = {}
    hits_by = {}

    def counter(prog, run):
        def run_counted(core_, loc, leaves):
            w.hits += 1
            hits_by[id(prog)] = hits_by.get(id(prog), 0) + 1
            r = run(core_, loc, leaves)
            if prog.run is not run_counted:     # the layout's code was just made (GEN_AFTER): count through it
                wrapped[id(prog)] = (prog, prog.run, counter(prog, prog.run))
                prog.run = wrapped[id(prog)][2]
            return r
        return run_counted

    old_show = warnings.showwarning

    def show(*args, **kwargs):
        w.shown += 1
        return old_show(*args, **kwargs)

    fit = None
    its, states = [], []
    def wrap_new():
        for prog in cache.values():
            # (by id: a _Prog is a tuple, equal to another layout's with the same steps; the cache keeps every
            # one alive, so an id is not reused meanwhile)
            if prog and id(prog) not in wrapped:
                wrapped[id(prog)] = (prog, prog.run, counter(prog, prog.run))
                prog.run = wrapped[id(prog)][2]
                prog.watched = True         # (call sites' functions replay it through run meanwhile)
        return len(cache)

    try:
        ncache = wrap_new()
        warnings.showwarning = show
        w.hook()
        last = n - 2 * PMAX
        mark = w.mark()
        states.append(mark[-1])
        while k < min(WARMUP + 3 * PMAX + PMAX, last):
            w.new_events()
            w.hits = 0
            w.shown = 0
            hits_by.clear()
            yield rng[k]
            k += 1
            if len(cache) != ncache:       # layouts made in this iteration (a branch first taken): counted from now
                ncache = wrap_new()
            m2 = w.mark()
            d = w.delta(mark, m2)
            mark = m2
            if d is None:
                its.clear()
                states[:] = [m2[-1]]
                continue
            d["hits"] = [tuple(sorted(hits_by.items()))]
            d["S"] = splits(d)
            its.append(d)
            states.append(m2[-1])
            for p in range(1, PMAX + 1):
                fit = fit_blocks(its, p, states)
                if fit is not None:
                    break
            if fit is not None:
                break
    finally:
        warnings.showwarning = old_show
        w.unhook()
        for prog, run, wr in wrapped.values():
            prog.watched = False
            if prog.run is wr:
                prog.run = run
    if fit is None:
        STATS["declined"] += 1
        if not its:
            STATS["why"] = "no periodic blocks: " + STATS["why"]
        else:
            STATS["why"] = "no periodic blocks"
        yield from _rest(rng, k, st)
        return
    p = fit.p
    m = (n - p - k) // p
    if outs is not None and m > 0:
        # every skipped iteration, and the checked block, takes the branches of the iteration a period before
        # it (so of the observed block the prediction is made from); past the first that does not, normally
        m = _periodic_blocks(outs, k, p, m)
    if m <= 0 or not _extents_ok(core, fit, m):
        STATS["why"] = "too few iterations left" if m <= 0 else "a moving slice would leave its tensor"
        yield from _rest(rng, k, st)
        return
    blockhits = {}
    for d in its[len(its) - p:]:
        for pid, h in d["hits"][0]:
            blockhits[pid] = blockhits.get(pid, 0) + h
    fit.base.pop("events", None)
    fit.var.pop("events", None)
    try:
        pred = predict(fit, 1, m, _BULK_FIELDS)
        state0 = states[-1]
        _apply(core, pred, m, fit)
        for pid, h in blockhits.items():
            wrapped[pid][0].count_replays(h * m)
    except Exception as e:       # pragma: no cover  (a bug of this module)
        raise LoopReplayError(f"loop replay of the loop at {info.filename}:{info.line} failed ({e!r}); run with "
                              "TRNSIM_LOOP_REPLAY=0") from e
    STATS["replayed"] += 1
    STATS["bulk_iterations"] += m * p
    STATS["period"] = p
    k += m * p
    # the next block runs normally and is checked against the prediction
    check = predict(fit, m + 1, 1)
    w2 = _Watch(core, spaces)
    mark = w2.mark()
    ids0 = mark[12]
    seq0 = mark[3]
    views0 = mark[10]
    got = []
    for _ in range(p):
        w2.hits = 0
        yield rng[k]
        k += 1
        m2 = w2.mark()
        d = _fields(w2, mark, m2)
        mark = m2
        got.append(d)
    g = concat(got)
    bad = same({f: v for f, v in check.items() if f in g}, g)
    if bad is None and mark[-1] != state0:
        bad = f"allocator state {mark[-1]} != {state0}"
    if bad is None and (mark[3] - seq0, mark[10] - views0, mark[12] - ids0) != fit.counts:
        bad = "instruction count or buffer ids"
    if bad is not None:
        raise LoopReplayError(
            f"loop replay: the iterations run after the bulk append of the loop at {info.filename}:{info.line} "
            f"differ from the prediction ({bad}); this is a trnsim bug: run with TRNSIM_LOOP_REPLAY=0 and report it")
    yield from _rest(rng, k, st)


def _rest(rng, k, st):
    """Iterations ``k`` onwards of ``rng``, run normally (``st["done"]``: the collector may run again)."""
    st["done"] = True
    yield from rng[k:]


def _fields(w, a, b):
    """The fields of an iteration for the check (as :meth:`_Watch.delta`, without its refusals)."""
    w.events = []
    w.shown = 0
    hits = w.hits
    w.hits = b[3] - a[3]
    d = w.delta(a, b)
    w.hits = hits
    if d is None:
        return {"eng": [None]}
    d.pop("events", None)
    return d
