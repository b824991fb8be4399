"""The issue cache: an instruction's validation and cost computed once per operand layout.

In a shape-only run (``execute=False``) an instruction's effect on the machine is its record: opcode, engine,
cost, FLOPs and the operands it read and wrote; in a run that computes values, also its numerics.  The record
follows from the *layout* of the call -- for each tensor operand its class, memory, dtype, shape, strides,
on-chip offset (the partitions it starts at), its buffer's geometry, and which operands share a buffer; for every
other argument its type and value.  The first
call with a layout runs the instruction function as usual, with every rule checked, through a probe that stands
for the core and notes what the function recorded; later calls with the same layout replay the records on the
new operands (``core.record`` / ``core.record_dma``: the occupancy, the record and its columns are made exactly
as before).  When the run computes values, only instructions whose numerics go through ``core.compute`` are
cached (the function's values part, run again on the new operands with the values the rules resolved, e.g. the
ALU function of ``op``); an instruction that tests ``core.execute`` itself runs whole every time.  A layout
seen for the first time is always validated, so bad input raises the same error as it does without the cache.

A call is cached only when its first run

* read nothing of the core but ``target``, ``execute``, ``precise`` and ``strict`` (an instruction that keeps
  state on the core, e.g. an accumulation register, is never cached) and set nothing on it,
* recorded only operands that are arguments of the call (no derived views) with the call's source line,
* returned ``None``,

and when every argument is a tensor view or a plain value (number, string, ``None``, enum member, function,
NumPy scalar or dtype, or a tuple/list of these).  HBM offsets are left out of the layout only for the DMA
instructions whose rules and cost do not depend on them (``dma_copy``, ``dma_transpose``); PSUM buffers add their
byte address (a matmul output must stay in one PSUM bank).

A call site of kernel source that calls one instruction function with arguments of the same kinds (each
positional argument of one class, the same keyword names with plain values) gets, after ``KEY_AFTER`` replays
through the general loop, a function generated for those kinds (:func:`_site_function`): it builds the same key in
straight-line code and replays the cached layout; a call it does not fit, or whose layout is not cached yet, goes
through :func:`issue` as before, so it is validated and fails exactly as without it.  The layout the site replayed
when its function was made has its replay written into the function (the code of the layout's own straight-line
replay, ``replay_gen.program_lines``); other layouts replay through their own code, and a site that keeps finding
another one gets its function made again for it (``SITE_REMAKES``).

Numerics are never cached: a replayed ``compute`` reads the new operands' values (strict mode's check of
never-written memory runs there too).  ``TRNSIM_ISSUE_CACHE=0`` turns the cache off (the benchmarks measure
both in one run).
"""

from __future__ import annotations

import enum
import itertools
import os
import re
import types
import weakref
from _thread import get_ident

import numpy as np

from .. import config
from ..memory import HBM, PSUM, Tensor
from ..machine.replay_gen import compile_program, compiled_source, program_lines
from ..memory.dtypes import DType

__all__ = ["enabled", "set_enabled", "issue", "MAX_ENTRIES"]

MAX_ENTRIES = 4096          # layouts cached per core; past this, new layouts are validated and not kept

# instructions whose rules and cost do not read an HBM operand's offset (checked in trnsim/isa/dma.py)
_HBM_OFFSET_FREE = frozenset(("dma_copy", "dma_transpose"))

_TENSORS: set = set()        # classes of tensor views (Tensor and its subclasses), filled as they are met
_PLAIN = frozenset((int, float, bool, str, type(None), complex, types.FunctionType, types.BuiltinFunctionType,
                    np.ufunc, DType, np.dtype))
# what a cached instruction may read of the core: its fixed settings, and ``matmul_f32`` (a method of the class,
# the same for every call)
_SAFE_ATTRS = frozenset(("target", "execute", "precise", "strict", "matmul_f32"))


def enabled() -> bool:
    return config.issue_cache


def set_enabled(on: bool) -> bool:
    """Turn the cache on or off for this process (for the cores made from now on: each reads the setting once,
    ``NeuronCore.issue_cache_on``); returns the previous setting."""
    return config.set("issue_cache", bool(on))


class _Uncacheable(Exception):
    pass


_BUF_LAYOUTS: dict = {}      # a buffer geometry -> its number (so a key holds one int per buffer)
_BUF_IDS = itertools.count()


def _buf_key(buf):
    """A buffer's geometry as a layout sees it (its fields are fixed once the buffer is made), numbered."""
    kind = buf.kind
    g = (kind, buf.shape, buf.dtype.name, buf.pfree, buf.nelem, buf.block, buf.addr if kind == PSUM else None)
    k = _BUF_LAYOUTS.get(g)
    if k is None:
        k = _BUF_LAYOUTS[g] = (next(_BUF_IDS), kind == HBM)
    buf.layout_key = k
    return k


_VIEW_KEYS: dict = {}        # a view's layout (class, buffer geometry number, dtype, shape, strides, offset) -> number
_VIEW_IDS = itertools.count()   # never reused: forgetting _VIEW_KEYS (past a million) only costs a new number


def _view_id(k):
    v = _VIEW_KEYS.get(k)
    if v is None:
        if len(_VIEW_KEYS) >= 1 << 20:
            _VIEW_KEYS.clear()
        v = _VIEW_KEYS[k] = next(_VIEW_IDS)
    return v


def _view_key(a):
    """``(number with the offset, number without it)`` of tensor view ``a``'s layout (the same number for an
    on-chip view, whose offset is always in the layout), kept on the view (``Tensor._lk``)."""
    buf = a.buf
    bk = buf.layout_key or _buf_key(buf)
    base = (type(a), bk[0], a.dtype.name, a.shape, a.strides)
    k1 = _view_id(base + (a.offset,))
    lk = a._lk = (k1, _view_id(base + (None,)) if bk[1] else k1)
    return lk


def _arg_key(a, leaves, hbm_off):
    if isinstance(a, Tensor):
        _TENSORS.add(type(a))
        buf = a.buf
        alias = -1
        i = 0
        for x in leaves:
            if x.buf is buf:
                alias = i
                break
            i += 1
        leaves.append(a)
        bk = buf.layout_key or _buf_key(buf)
        # dtypes by name (DType equality is by name; its Python __hash__ would cost more than the rest)
        return (type(a), bk[0], a.dtype.name, a.shape, a.strides, a.offset if (hbm_off or not bk[1]) else None,
                alias)
    t = type(a)
    if t in _PLAIN:
        return (t, a)
    if isinstance(a, (tuple, list)):
        return (t, tuple(_arg_key(x, leaves, hbm_off) for x in a))
    if isinstance(a, (enum.Enum, np.generic)):
        return (t, a)
    raise _Uncacheable


class _Probe:
    """Stands for the core during a call's first (validating) run: forwards everything, notes each record and
    each ``compute`` (the instruction's numerics), and notes whether the function touched anything of the core
    a layout does not determine."""

    __slots__ = ("_core", "_calls", "_ok")

    def __init__(self, core):
        object.__setattr__(self, "_core", core)
        object.__setattr__(self, "_calls", [])
        object.__setattr__(self, "_ok", True)

    def __getattr__(self, a):
        core = self._core
        # a function that tests ``execute`` in a run that computes values does its numerics inline: its replay
        # could not redo them
        if a not in _SAFE_ATTRS or (a == "execute" and core.execute):
            object.__setattr__(self, "_ok", False)
        return getattr(core, a)

    def __setattr__(self, a, v):
        object.__setattr__(self, "_ok", False)
        setattr(self._core, a, v)

    def compute(self, values_fn, *args):
        self._calls.append((2, values_fn, args))
        self._core.compute(values_fn, *args)

    def record(self, opcode, engine, writes, reads, cycles, loc, flops=0, pre=0.0):
        self._calls.append((0, opcode, engine, writes, reads, cycles, loc, flops, pre))
        self._core.record(opcode, engine, writes, reads, cycles, loc, flops, pre)

    def record_dma(self, opcode, writes, reads, nbytes, rows, ns, loc, part0=0, dge=None):
        self._calls.append((1, opcode, writes, reads, nbytes, rows, ns, loc, part0, dge))
        self._core.record_dma(opcode, writes, reads, nbytes, rows, ns, loc, part0, dge)


def _index(ts, leaves):
    out = []
    for t in ts:
        for i, x in enumerate(leaves):
            if x is t:
                out.append(i)
                break
        else:
            raise _Uncacheable
    return tuple(out)


# argument codes of a replayed ``compute``: a value kept from the first run, a tensor argument of the call, the
# core, the call's source line, or a tuple/list of these
_CONST, _LEAF, _CORE, _LOC, _SEQ = range(5)


def _arg_spec(a, probe, leaves, loc):
    if a is probe:
        return (_CORE, None)
    if a is loc:
        return (_LOC, None)
    if isinstance(a, Tensor):
        return (_LEAF, _index((a,), leaves)[0])
    t = type(a)
    if t is tuple or t is list:
        return (_SEQ, (t, tuple(_arg_spec(x, probe, leaves, loc) for x in a)))
    if isinstance(a, np.ndarray):      # a mutable value: not kept
        raise _Uncacheable
    return (_CONST, a)


def _resolve(spec, core, loc, leaves):
    out = []
    for code, v in spec:
        if code == _LEAF:
            out.append(leaves[v])
        elif code == _CONST:
            out.append(v)
        elif code == _CORE:
            out.append(core)
        elif code == _LOC:
            out.append(loc)
        else:
            out.append(v[0](_resolve(v[1], core, loc, leaves)))
    return out


def _operands(core, ts, leaves, fixed):
    return tuple((i,) + core.operand_template(leaves[i], fixed[i]) for i in _index(ts, leaves))


def _compile(calls, leaves, loc, probe, fixed):
    """The replay program of a first run's records and computes: operands as indices into the call's tensor
    arguments (with their extent and access pattern when the layout fixes them, ``fixed``)."""
    core = probe._core
    prog = []
    for c in calls:
        if c[0] == 0:
            _, opcode, engine, w, r, cycles, cloc, flops, pre = c
            if cloc is not loc:
                raise _Uncacheable
            prog.append((0, opcode, engine, _operands(core, w, leaves, fixed), _operands(core, r, leaves, fixed),
                         cycles, flops, pre, None))
        elif c[0] == 1:
            _, opcode, w, r, nbytes, rows, ns, cloc, part0, dge = c
            if cloc is not loc:
                raise _Uncacheable
            prog.append((0, opcode, "dma", _operands(core, w, leaves, fixed), _operands(core, r, leaves, fixed),
                         ns, 0, 0.0, (nbytes, rows, part0, dge)))
        else:
            _, values_fn, args = c
            if core.execute:          # shape-only replays skip the numerics
                spec = [_arg_spec(a, probe, leaves, loc) for a in args]
                # (kept values, (position, tensor index) pairs, (position, code, value) of the rest)
                consts = tuple(v if code == _CONST else None for code, v in spec)
                tens = tuple((pos, v) for pos, (code, v) in enumerate(spec) if code == _LEAF)
                rest = tuple((pos, code, v) for pos, (code, v) in enumerate(spec) if code not in (_CONST, _LEAF))
                prog.append((2, values_fn, consts, tens, rest))
    return tuple(prog)


def _replay_generic(prog, core, loc, leaves):
    """Replay ``prog`` step by step (``NeuronCore.replay`` for records): what :class:`_Prog`'s generated function
    does, used by it when the core keeps no columns or a multi-program launch runs."""
    replay = core.replay
    for p in prog:
        if p[0] == 0:
            replay(p[1], p[2], p[3], p[4], p[5], loc, p[6], p[7], leaves, p[8])
        else:
            # the numerics' arguments: the kept values with the call's tensors, core and line put in
            fa = list(p[2])
            for pos, i in p[3]:
                fa[pos] = leaves[i]
            for pos, code, v in p[4]:
                fa[pos] = core if code == _CORE else loc if code == _LOC else \
                    v[0](_resolve(v[1], core, loc, leaves))
            p[1](*fa)


def _seq_expr(v):
    """A tuple/list argument of a replayed ``compute``, made anew from the call (``_SEQ``)."""
    return lambda core, loc, leaves: v[0](_resolve(v[1], core, loc, leaves))


# replays of a layout done step by step before its straight-line code is made: making it costs 12-16 us (measured,
# the compiled code shared), each generated replay saves ~0.6 us over the step-by-step one, so it pays from ~25
# replays on; a short kernel's layouts, replayed a few times each, never pay it
GEN_AFTER = 32


class _Prog(tuple):
    """A cached layout's replay program (the steps of :func:`_compile`), with ``run(core, loc, leaves)``: the
    steps replayed one by one (:func:`_replay_generic`) for the first ``GEN_AFTER`` replays, then as straight-line
    code made for the layout (``trnsim.machine.replay_gen``)."""

    def __init__(self, steps):
        super().__init__()
        self.n = 0
        self.run = self._warm
        # True while the loop replay counts the calls of ``run`` (trnsim/kernels/loop_replay.py): a call site's
        # function with this layout's replay written in then calls ``run`` instead
        self.watched = False

    def _warm(self, core, loc, leaves):
        n = self.n = self.n + 1
        if n >= GEN_AFTER:
            self.run = self._generate()
        _replay_generic(self, core, loc, leaves)

    def count_replays(self, n: int) -> None:
        """Count ``n`` replays made without calling :attr:`run` (the loop replay's skipped iterations), as if
        they had run: past ``GEN_AFTER`` the layout's straight-line code is made, as the ``n`` calls would have."""
        if self.run != self._warm:
            return
        if self.n + n >= GEN_AFTER:
            self.n = GEN_AFTER
            self.run = self._generate()
        else:
            self.n += n

    def _generate(self):
        return compile_program(self.gen_steps(), lambda core, loc, leaves: _replay_generic(self, core, loc, leaves))

    def gen_steps(self):
        """The steps as ``trnsim.machine.replay_gen`` takes them."""
        gen = []
        for p in self:
            if p[0] == 0:
                _, opcode, engine, wl, rl, cost, flops, pre, dma = p
                gen.append(("rec", opcode, engine, wl + rl, len(wl), cost, flops, pre, dma))
            else:
                _, values_fn, consts, tens, rest = p
                args = [("const", v) for v in consts]
                for pos, i in tens:
                    args[pos] = ("leaf", i)
                for pos, code, v in rest:
                    args[pos] = ("core",) if code == _CORE else ("loc",) if code == _LOC else ("expr", _seq_expr(v))
                gen.append(("call", values_fn, tuple(args)))
        return gen


_HBM_OFF: dict = {}          # instruction function -> whether HBM offsets are in its layouts


def keeps_hbm_offsets(fn) -> bool:
    """Whether instruction function ``fn``'s layouts hold its HBM operands' offsets (all but ``_HBM_OFFSET_FREE``)."""
    hbm_off = _HBM_OFF.get(fn)
    if hbm_off is None:
        hbm_off = _HBM_OFF[fn] = fn.__name__ not in _HBM_OFFSET_FREE
    return hbm_off


# call sites: the wrapper of an instruction (kernels/isa_api.py) keeps one list per call site of kernel source (a
# bytecode offset of a code object), ``[loc, fn, site function, calls, code]``.  After KEY_AFTER calls of one instruction
# function at a site whose layouts the cache already held, the site gets a function made for the kinds of its
# arguments (_site_function): it builds the same key as the loop below, in straight-line code, and replays the
# cached layout; the wrapper calls it first, then this function when it answers False.  Making one costs ~10 us
# when its code is already compiled (~0.5 ms to compile a new structure, once per process), and it saves ~0.4 us
# per call against the loop (measured, process time, on the stream kernel's tensor_tensor): it pays from ~25
# calls of a site on, so a site that calls a few times never makes one.
KEY_AFTER = 32


def issue(fn, core, loc, args, kwargs, hbm_off=None, site=None):
    """Run instruction ``fn(core, loc, *args, **kwargs)`` through the cache (``hbm_off``: ``keeps_hbm_offsets(fn)``,
    which the caller may pass, worked out once; ``site``: the call site's list, see KEY_AFTER, or None)."""
    cache = core.issue_cache
    leaves = []
    if hbm_off is None:
        hbm_off = keeps_hbm_offsets(fn)
    try:
        parts = [fn]
        for a in args:
            t = type(a)
            if t in _TENSORS:
                # a positional tensor: its layout as the view's number (made once per view) and its alias, two
                # ints (no other argument adds an int to the key: the rest are (type, value) tuples)
                buf = a.buf
                alias = -1
                i = 0
                for x in leaves:
                    if x.buf is buf:
                        alias = i
                        break
                    i += 1
                leaves.append(a)
                try:
                    lk = a._lk or _view_key(a)
                except AttributeError:      # a view made without the slot set
                    lk = _view_key(a)
                parts.append(lk[0] if hbm_off else lk[1])
                parts.append(alias)
            elif t in _PLAIN:
                # a plain value as two entries, its type and itself (no tuple made and hashed per call): the key
                # still reads one way, as each argument's first entry says what follows -- a view number (an
                # int: its alias follows), a type (its value follows) or an _arg_key tuple (nothing follows)
                parts.append(t)
                parts.append(a)
            else:
                parts.append(_arg_key(a, leaves, hbm_off))
        if kwargs:
            for k in (sorted(kwargs) if len(kwargs) > 1 else kwargs):
                v = kwargs[k]
                t = type(v)
                parts.append(k)              # (a str: no argument's first entry is one)
                if t in _PLAIN:
                    parts.append(t)
                    parts.append(v)
                else:
                    parts.append(_arg_key(v, leaves, hbm_off))
        key = tuple(parts)
        prog = cache.get(key)
    except (_Uncacheable, TypeError):      # TypeError: an unhashable value inside an argument
        key = None
    if key is None:                        # run whole, outside the handler: its own errors carry no cache context
        return fn(core, loc, *args, **kwargs)
    if prog is None:
        # not yet in this core's cache: a shape-only launch takes what an earlier one of this process validated
        # with the same settings (the layout's rules were checked then; its replay makes the same record)
        store = None if core.execute else _store(core)
        if store is not None:
            prog = store.get(key)
            if prog is not None:
                if prog is not False:
                    _adopt(prog, core)
                if len(cache) < MAX_ENTRIES:
                    cache[key] = prog
    if prog is not None:
        if prog is False:                  # a layout the cache cannot replay: the function runs whole
            return fn(core, loc, *args, **kwargs)
        prog.run(core, loc, leaves)        # straight-line code made for this layout (_Prog)
        if site is not None and site[2] is None:
            _count_site(site, fn, args, kwargs, hbm_off, prog)
        return None
    probe = _Probe(core)
    try:
        out = fn(probe, loc, *args, **kwargs)
        if len(cache) < MAX_ENTRIES or store is not None:
            prog = False
            if out is None and probe._ok:
                try:
                    # an operand's offset is in the layout unless left out (HBM operands of offset-free
                    # instructions)
                    fixed = [hbm_off or not x.buf.layout_key[1] for x in leaves]
                    prog = _Prog(_compile(probe._calls, leaves, loc, probe, fixed))
                except _Uncacheable:
                    pass
            if len(cache) < MAX_ENTRIES:
                cache[key] = prog
            if store is not None:
                if len(store) >= STORE_ENTRIES:
                    store.clear()
                store[key] = prog
    finally:
        # the probe's notes hold the probe itself (each compute's core argument) and the call's tensors: a cycle
        # that would keep the core and its buffers (HBM data included) alive until the cyclic collector runs
        probe._calls.clear()
    return out


# The layouts shape-only launches validated, kept across launches: one store per thread and core settings (target,
# ``precise``, ``strict``), since a layout's rules and record follow from its key and these (a core's own cache,
# ``core.issue_cache``, is filled from it as before: what the loop replay and the tests read of it is unchanged).
# A launch that computes values does not use it (its replays redo numerics whose functions a first run resolved).
STORE_ENTRIES = 1 << 15      # layouts kept per store; a full store starts again empty
_STORES: dict = {}


def _store(core):
    """The store of ``core``'s thread and settings (made on first use)."""
    tg = core.target
    sk = (get_ident(), id(tg), core.precise, core.strict)
    st = _STORES.get(sk)
    if st is None:
        if len(_STORES) >= 64:       # (stores of threads gone)
            _STORES.clear()
        st = _STORES[sk] = (tg, {})      # (the target kept: its id is in the key)
    return st[1]


def _adopt(prog, core):
    """A layout of the store replayed by ``core`` for the first time: its fixed access patterns interned in the
    core (as its first run there would have interned them), so that the core's record holds each pattern once."""
    intern = core.intern_pattern
    for p in prog:
        if p[0] == 0:
            for ops in (p[3], p[4]):
                for op in ops:
                    tm = op[2]
                    if tm is not None:
                        intern(tm[2])


def clear_store():
    """Forget every layout kept across launches (the next launches validate theirs again)."""
    _STORES.clear()


def _count_site(site, fn, args, kwargs, hbm_off, prog):
    """A call of ``fn`` at ``site`` replayed a cached layout through the loop of :func:`issue`: counted, and at
    KEY_AFTER such calls the site gets its function (False when the arguments are of kinds it does not handle).
    A site calling another function than the one counted starts again; a site calling several functions in turn
    (``site[1]`` changes) never gets one."""
    if site[1] is not fn:
        if site[1] is not None:
            site[2] = False
            return
        site[1] = fn
    n = site[3] = site[3] + 1
    if n >= KEY_AFTER:
        site[2] = _site_function(fn, args, kwargs, hbm_off, prog, site) or False


_SITE_CODE: dict = {}     # source -> compiled code (_site_function): once per kinds of arguments and layout steps
_MISSING = object()
# a site function whose layout's replay is written into it (the layout the site replayed when it was made) made
# again, for the layout then found, after this many calls replaying another layout; at most SITE_REMAKES times, then
# a function without a written-in replay
SITE_REMAKES = 4


def _inline_steps(prog):
    """``prog``'s steps for a site function's written-in replay, or None when it has none (a layout the cache
    cannot replay, or numerics that read the list of the call's tensors)."""
    if not isinstance(prog, _Prog):
        return None
    steps = prog.gen_steps()
    for st in steps:
        if st[0] == "call" and any(a[0] == "expr" for a in st[2]):
            return None
    return steps


def _site_missed(site, miss, core, fn, args, kwargs, hbm_off, prog):
    """A site function found another layout than the one written into it: counted, and at KEY_AFTER such calls
    the function is made again for ``prog`` (at most SITE_REMAKES times for one core's cache, then without a
    written-in replay; a layout of another core's cache -- the next run of the kernel -- starts the count again)."""
    miss[0] += 1
    if miss[0] >= KEY_AFTER:
        # (the core by a weak reference: a site outlives its launch, and an id could be reused by the next core)
        remakes = miss[1] + 1 if miss[2] is not None and miss[2]() is core else 1
        site[2] = _site_function(fn, args, kwargs, hbm_off, prog if remakes <= SITE_REMAKES else None, site,
                                 (remakes, weakref.ref(core))) or False


def _site_function(fn, args, kwargs, hbm_off, prog=None, site=None, remakes=(0, None)):
    """``replay(core, loc, args, kwargs)`` for calls of ``fn`` whose arguments are of the same kinds as
    ``args``/``kwargs`` -- as many positional arguments, each of the same class (a tensor view class of
    ``_TENSORS`` or a plain type of ``_PLAIN``), and the same keyword names with values of the same plain types:
    it builds the key :func:`issue`'s loop builds for the call (its tensors as the leaves, in the same order) and,
    when the core's cache holds a replay for it, replays it and returns True; otherwise returns False (nothing
    done: :func:`issue` then runs the call).  None (no function) when an argument is of another kind (a tuple, an
    enum member, a tensor passed by keyword: the loop's ``_arg_key`` forms).

    ``prog`` (the cached layout ``site`` replayed when the function is made): its replay's code
    (``replay_gen.program_lines``, the code of the layout's own straight-line replay) is written into the function,
    run when the key finds that very layout object, without the call of its ``run`` and the list of operands; another
    layout is replayed by its ``run`` (and counted, :func:`_site_missed`).  The source holds only the structure
    (names ``C0``, ``N0``... for the classes and keyword names, ``R..`` for the replay's constants), so it is
    compiled once per structure."""
    ns = {"FN": fn, "_view_key": _view_key, "_MISSING": _MISSING}
    ki = 0 if hbm_off else 1
    n = len(args)
    lines = ["def replay(core, loc, args, kwargs):",
             f"    if len(kwargs) != {len(kwargs)}:",
             "        return False"]
    if n:
        lines += ["    try:",
                  f"        {', '.join(f'a{i}' for i in range(n))}, = args",
                  "    except ValueError:           # another number of positional arguments",
                  "        return False"]
    else:
        lines += ["    if args:", "        return False"]
    checks, parts, tens = [], ["FN"], []
    same = ["cache is M0"]          # the last key found at this site, compared by identity (below)
    for i, a in enumerate(args):
        t = type(a)
        ns[f"C{i}"] = t
        checks.append(f"type(a{i}) is not C{i}")
        if t in _TENSORS:
            j = len(tens)
            tens.append(i)
            alias = " else ".join(f"{m} if buf{j} is buf{m}" for m in range(j)) + " else -1" if j else "-1"
            parts += [f"l{j}[{ki}]", alias if j == 0 else f"al{j}"]
            same.append(f"l{j} is ML{j}")
            if j:
                same.append(f"al{j} == MA{j}")
        elif t in _PLAIN:
            parts += [f"C{i}", f"a{i}"]
            same.append(f"a{i} is MP{i}")
        else:
            return None
    names = sorted(kwargs) if len(kwargs) > 1 else list(kwargs)
    for i, k in enumerate(names):
        v = kwargs[k]
        t = type(v)
        if t not in _PLAIN:
            return None
        ns[f"N{i}"], ns[f"D{i}"] = k, t
        lines.append(f"    kw{i} = kwargs.get(N{i}, _MISSING)")
        checks.append(f"type(kw{i}) is not D{i}")
        parts += [f"N{i}", f"D{i}", f"kw{i}"]
        same.append(f"kw{i} is MK{i}")
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return False"]
    for j, i in enumerate(tens):
        if len(tens) > 1:            # (the alias tests read the buffers)
            lines.append(f"    buf{j} = a{i}.buf")
        lines += ["    try:",
                  f"        l{j} = a{i}._lk or _view_key(a{i})",
                  "    except AttributeError:      # a view made without the slot set",
                  f"        l{j} = _view_key(a{i})"]
        if j:
            alias = " else ".join(f"{m} if buf{j} is buf{m}" for m in range(j)) + " else -1"
            lines.append(f"    al{j} = {alias}")
    # the key's parts the same objects as at the last call that found a layout (the same core's cache, the views'
    # layout numbers the same tuples, the plain values the same objects, the same aliasing): the same key, so the
    # same layout, without building and hashing the key (a site in a loop body meets the same key call after call)
    memo = re.findall(r"\b(M[A-Z]*\d+)\b", " ".join(same))
    rhs = {"M0": "cache"} | {f"ML{j}": f"l{j}" for j in range(len(tens))} | \
        {f"MA{j}": f"al{j}" for j in range(1, len(tens))} | {f"MP{i}": f"a{i}" for i in range(n)} | \
        {f"MK{i}": f"kw{i}" for i in range(len(names))}
    for m in memo:
        ns[m] = _MISSING
    lines.insert(1, f"    global MPROG, {', '.join(memo)}")
    lines += ["    cache = core.issue_cache",
              f"    if {' and '.join(same)}:",
              "        prog = MPROG",
              "    else:",
              f"        prog = cache.get(({', '.join(parts)},))",
              "        if prog is not None and prog is not False:      # (None: not cached yet; False: not cacheable)",
              f"            MPROG, {', '.join(memo)} = prog, {', '.join(rhs[m] for m in memo)}"]
    leaves = f"[{', '.join(f'a{i}' for i in tens)}]"
    steps = _inline_steps(prog) if site is not None else None
    if steps is not None:
        # the layout written in: its replay, as its straight-line code does it (hand-over test included)
        ns["P"], ns["SITE"], ns["MISS"], ns["_missed"] = prog, site, [0, remakes[0], remakes[1]], _site_missed
        ns["HBM_OFF"] = hbm_off
        lines += ["    if prog is P and not P.watched:",
                  "        if not core._record or core.programs is not None:",
                  f"            prog.run(core, loc, {leaves})",
                  "            return True"]
        lines += program_lines(steps, ns, "R", lambda j: f"a{tens[j]}", leaves, indent="        ")
        lines.append("        return True")
    lines += ["    if prog is None or prog is False:",
              "        return False",
              f"    prog.run(core, loc, {leaves})"]
    if steps is not None:
        lines.append("    _missed(SITE, MISS, core, FN, args, kwargs, HBM_OFF, prog)")
    lines.append("    return True")
    src = "\n".join(lines) + "\n"
    code = compiled_source(src, _SITE_CODE, "<trnsim issue-cache site>")
    exec(code, ns)   # noqa: S102  (defines replay; the source was made above from the arguments' kinds only)
    replay = ns["replay"]
    replay.source = src
    return replay
