"""One core's instruction record as the arrays of the scheduler's loop (``sched_events.run``, the one timing
model, after ``sched_state.new_state``), that loop's run, and its results turned back into the Timeline's columns.

Which build of the loop runs (``schedule(..., impl=...)`` or ``TRNSIM_SCHEDULER``): ``numba`` the compiled loop,
``python`` the same functions uncompiled (the modules' plain functions, ``sched_jit``: numba is not imported),
``auto`` (the default) compiled except for the first ``PY_ROWS`` rows a process schedules (:func:`choose`); all
give identical timelines.  ``NUMBA_DISABLE_JIT=1`` (numba's switch) runs the "compiled" build uncompiled too.  A
process loads the compiled loop from numba's cache on first use (compiles it after an install).
"""

from __future__ import annotations

from functools import partial
from itertools import chain
from operator import attrgetter

import numpy as np

from .. import config
from ..isa.dma_dge import QUEUE_KEYS
from .capacity import _placed_keys
from .deps import _geo, alias_groups, byte_operand

__all__ = ["fast_available", "mode", "choose", "expect_many", "compiled", "encode", "CoreRun", "FAST_MIN",
           "PY_ROWS"]

# records from which the progress line announces the compiled loop's loading (cli.py; above PY_ROWS, so ``auto``
# loads it for them); smaller ones that load it (past the budget, or ``numba``) do so without the announcement
FAST_MIN = 20_000
# rows a process schedules uncompiled under ``auto`` before it loads the compiled loop (``choose``): about as many
# as loading it costs (benchmarks/speed-s23-sched.md, process CPU on the development machine: loading from a warm
# cache about 0.4 s, the uncompiled loop 40-50 us per row of the stream kernel); trnsim's choice, no timeline
# depends on it
PY_ROWS = 10_000
# rows a process schedules uncompiled under ``auto`` when numba's cache holds no build of the loop (a fresh install,
# an edited loop, another CPU: :func:`cache_warm`), before it compiles the loop: about as many rows as the compile
# costs.  Measured at stop 47 on the development machine (process CPU): compiling ``new_state`` and ``run`` from a
# cold cache 88 s; the uncompiled loop 45-110 us per row (the stream kernel; the 128,898 rows of a cold compiled
# Qwen3-32B estimate); so 0.8-2 million rows.  trnsim's choice, no timeline depends on it.
COLD_ROWS = 1_000_000

_STATE = {"kernels": None, "py": None, "py_rows": 0, "loaded": None, "warm": None, "chosen": None}
_ENG_FIXED = ("tensor", "vector", "scalar", "gpsimd", "sync")
_MEM = {"hbm": 0, "sbuf": 1, "psum": 2}
_MEM_OBJ = np.array([None, "hbm", "sbuf", "psum"], dtype=object)     # index: mem code + 1
_FIELDS = attrgetter("engine", "cycles", "ns", "pre", "rows", "part0", "nbytes", "parts", "reads", "writes", "id",
                     "opcode", "flops", "loc", "dge")


def _kernels(py=False):
    """The loop's functions, as a namespace: ``new_state``, ``run``, ``hbm_bins``, ``factorize``; uncompiled (the
    modules' plain functions) when ``py``, else their compiled builds (``sched_jit.jitted``: numba loaded once)."""
    key = "py" if py else "kernels"
    if _STATE[key] is None:
        from types import SimpleNamespace

        from . import sched_events, sched_heaps, sched_jit, sched_state
        fns = dict(new_state=sched_state.new_state, run=sched_events.run, hbm_bins=sched_heaps.hbm_bins,
                   factorize=sched_heaps.factorize)
        if not py:
            fns = {k: sched_jit.jitted(f) for k, f in fns.items()}
        _STATE[key] = SimpleNamespace(**fns)
    return _STATE[key]


def fast_available() -> bool:
    """Whether the loop runs compiled (numba importable)."""
    from .sched_jit import available
    return available()


def mode(force=None) -> str:
    """``numba`` or ``python``: ``force`` (``schedule``'s ``impl``), else ``TRNSIM_SCHEDULER`` (default numba;
    ``TRNSIM_NO_NUMBA=1`` also runs the loop uncompiled)."""
    m = force or config.scheduler               # validated by trnsim.config
    if m not in ("auto", "python", "numba"):
        raise ValueError(f"impl={m!r}: expected 'auto', 'python' or 'numba'")
    return "python" if m == "python" or (force is None and config.no_numba) else "numba"


def compiled() -> bool:
    """Whether the compiled loop is already loaded in this process.  Once it is, it stays so: remembered per build
    (numba's ``signatures`` list of a dispatcher hashes every argument type of each build: about 0.1 ms, at every
    schedule)."""
    k = _STATE["kernels"]
    if k is None:
        return False
    if _STATE["loaded"] is k:
        return True
    if getattr(k.run, "signatures", ()):
        _STATE["loaded"] = k
        return True
    return False


def cache_warm() -> bool:
    """Whether numba's cache holds builds of the loop's two large functions (``new_state``, ``run``) as the source
    now is (``sched_jit.cache_holds``): loading them costs about 0.4 s of CPU, compiling them about 90 s (numba's
    other entry points are small).  Asked once per process (imports numba: 0.1-0.3 s)."""
    if _STATE["warm"] is None:
        from . import sched_events, sched_jit, sched_state
        _STATE["warm"] = all(sched_jit.cache_holds(f) for f in (sched_state.new_state, sched_events.run))
    return _STATE["warm"]


def choose(force=None, rows=0) -> str:
    """The build that schedules a launch of ``rows`` instructions: :func:`mode`'s, except that ``auto`` (the default
    of ``TRNSIM_SCHEDULER``; not an explicit ``numba``) runs uncompiled while the compiled loop is not loaded in this
    process and the rows this process has scheduled uncompiled so far, these included, stay within a budget:
    ``PY_ROWS`` when numba's cache holds the loop's build, ``COLD_ROWS`` when it must be compiled
    (:func:`cache_warm`).  A process scheduling little never loads numba; one scheduling more pays at most about
    what the loading costs in rows run uncompiled before it loads the loop once (0.4 s from a warm cache, about
    90 s of compiling from a cold one: a process never waits for a compile that its own rows would not repay;
    ``trnsim warmup`` compiles it ahead).  Both builds give identical timelines.  :func:`last_choice` tells the
    answer to the progress line."""
    m = mode(force)
    if m == "python" or (force or config.scheduler) != "auto" or compiled():
        _STATE["chosen"] = m
        return m
    n = _STATE["py_rows"] + rows
    if n <= PY_ROWS or not fast_available() or (n <= COLD_ROWS and not cache_warm()):
        _STATE["py_rows"] = n
        m = "python"
    _STATE["chosen"] = m
    return m


def ran_uncompiled_cold() -> bool:
    """Whether this process has run more than ``PY_ROWS`` rows uncompiled because numba's cache did not hold the
    compiled loop (:func:`choose`'s cold budget) and has not loaded it since: ``trnsim warmup`` would have helped."""
    return _STATE["warm"] is False and _STATE["py_rows"] > PY_ROWS and not compiled()


def last_choice():
    """:func:`choose`'s last answer in this process (``numba``, ``python``, or None before any schedule)."""
    return _STATE["chosen"]


def expect_many():
    """Say that this process is about to schedule far more than ``PY_ROWS`` rows (a cost estimate's layer runs on cold
    caches simulate hundreds of kernels): under ``auto`` the compiled loop is loaded at the next schedule instead of
    after ``PY_ROWS`` rows run uncompiled first (about 0.45 s of CPU saved; a process that then schedules nothing
    loads nothing), when numba's cache holds it; when it does not, ``COLD_ROWS`` still applies (:func:`choose`).
    Timelines are identical either way."""
    _STATE["py_rows"] = max(_STATE["py_rows"], PY_ROWS)


def _row_columns(rows, py=False):
    """The per-instruction columns of record rows (``record_cols.ROW_FIELDS`` tuples, ``RecordColumns.pend``) as
    arrays, made per distinct row object (a cached layout appends the same row object at every replay) and spread
    by each row's distinct number: numbers as int64/float64 arrays, the engine, opcode and FLOPs as object arrays
    (their own objects), the DMA rows' fields as arrays (``dge`` a list)."""
    first, inv = _distinct(rows, py)
    dis = [rows[i] for i in first]
    nd = len(dis)

    def obj(vals):
        a = np.empty(len(vals), object)
        for i, x in enumerate(vals):        # (one by one: tuples and strings stay objects)
            a[i] = x
        return a

    def col(k, dt=None):
        vals = [r[k] for r in dis]
        return (obj(vals) if dt is None else np.array(vals, dt))[inv]

    out = dict(eng=col(0), cost=col(1, np.float64), pre=col(2, np.float64), opcode=col(3), flops=col(4),
               nw=col(5, np.int64), nops=col(6, np.int64))
    # the engines as the distinct rows' engines and each row's distinct number: encode numbers the engines from
    # them without factorizing the million-entry engine column again
    out["eng_rows"] = ([r[0] for r in dis], inv)
    is_dma = np.fromiter((r[7] is not None for r in dis), np.bool_, nd)
    dma = np.flatnonzero(is_dma[inv])
    di = inv[dma]
    dd = [r[7] or (0, 0, 0, None) for r in dis]
    out.update(dma=dma, nbytes=np.array([d[0] for d in dd], np.int64)[di], rows=np.array([d[1] for d in dd],
               np.int64)[di], part0=np.array([d[2] for d in dd], np.int64)[di],
               dge=obj([d[3] for d in dd])[di].tolist())
    return out


def _columns(core, py=False):
    """The core's record as columns (``record_cols.RecordColumns`` lists): the ones appended while recording when
    they cover the record (the per-instruction ones from its rows while every row is still pending:
    :func:`_row_columns`), else gathered from the ``InstrRecord`` objects.  Returns a dict of sequences."""
    recs = core.instructions
    n = len(recs)
    c = getattr(core, "columns", None)
    pend = getattr(c, "pend", None)
    if pend and len(pend) == n and len(c) == n and n:
        out = _row_columns(pend, py)
        out.update(loc=c.loc, b=c.b, lo=c.lo, hi=c.hi, v=c.v, bar=c.bar if c.barrier else {}, id=None)
        return out
    if c is not None and len(c) == n and len(c.nops) == n:
        return dict(eng=c.eng, cost=c.cost, pre=c.pre, opcode=c.opcode, flops=c.flops, loc=c.loc, nw=c.nw,
                    nops=c.nops, dma=c.dma, rows=c.rows, part0=c.part0, nbytes=c.nbytes, dge=c.dge, b=c.b, lo=c.lo,
                    hi=c.hi, v=c.v, bar=c.bar if c.barrier else {}, id=None)
    if n == 0:
        return dict(eng=(), cost=(), pre=(), opcode=(), flops=(), loc=(), nw=(), nops=(), dma=(), rows=(),
                    part0=(), nbytes=(), dge=(), b=(), lo=(), hi=(), v=(), bar={}, id=None)
    eng, cyc, ns, pre, rows, part0, nbytes, parts, reads, writes, ids, opcodes, flops, locs, dges = \
        zip(*map(_FIELDS, recs))
    bar = {i: p for i, p in enumerate(parts) if p is not None} if parts.count(None) != n else {}
    dma = [i for i, e in enumerate(eng) if e == "dma"]
    nw = list(map(len, writes))
    ops = list(chain.from_iterable(chain.from_iterable(zip(writes, reads))))
    b, lo, hi, v = zip(*ops) if ops else ((), (), (), ())
    return dict(eng=eng, cost=[ns[i] if e == "dma" else cyc[i] for i, e in enumerate(eng)], pre=pre,
                opcode=opcodes, flops=flops, loc=locs, nw=nw, nops=[a + len(r) for a, r in zip(nw, reads)],
                dma=dma, rows=[rows[i] for i in dma], part0=[part0[i] for i in dma],
                nbytes=[nbytes[i] for i in dma], dge=[dges[i] for i in dma], b=b, lo=lo, hi=hi, v=v, bar=bar,
                id=None if list(ids) == list(range(n)) else list(ids))


def _distinct(seq, py=False):
    """``(first, inverse)``: the index of the first of each distinct object of ``seq`` (by identity: C loops and
    a compiled hash pass only) and each item's distinct number.  Equal objects that are not one object get numbers
    of their own; callers map the distinct objects by value."""
    first, inv = _kernels(py).factorize(np.fromiter(map(id, seq), np.int64, len(seq)))
    return first.tolist(), inv


def _ints(seq, dtype=np.int64):
    """A list of numbers as an array (``np.fromiter`` with the length known: no pass to find the type); an array
    as it is (in ``dtype``)."""
    if isinstance(seq, np.ndarray):
        return seq.astype(dtype, copy=False)
    return np.fromiter(seq, dtype, len(seq))


def encode(core, py=False):
    """``(arrays, engine codes, record columns)``: the arrays the loop reads (``sched_events``' docstring)
    and the record's own columns for the Timeline.  ``py``: with the loop's helpers uncompiled (``choose``)."""
    n = len(core.instructions)
    c = _columns(core, py)
    eng_s = c["eng"]
    if c.get("eng_rows") is not None:       # (_row_columns: engines per distinct row; names may repeat)
        names, inv = c["eng_rows"]
    else:
        first, inv = _distinct(eng_s, py)
        names = [eng_s[i] for i in first]
    emap = {e: k for k, e in enumerate(_ENG_FIXED)}
    for e in sorted(set(names)):
        if e not in emap and e != "dma":
            emap[e] = len(emap)
    dma_code = len(emap)
    emap["dma"] = dma_code
    eng = np.array([emap[e] for e in names], np.int64)[inv]
    tg = core.target
    clk = np.empty(dma_code)
    for e, k in emap.items():
        if e != "dma":
            clk[k] = tg.engine_clock_hz[e if e in _ENG_FIXED else "scalar"] * 1e-9
    nops = _ints(c["nops"])
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(nops, out=ptr[1:])
    views = c["v"]
    ba = _ints(c["b"])
    b_lo = int(ba.min()) if len(ba) else 0
    b_n = int(ba.max()) - b_lo + 1 if len(ba) else 0
    if b_n <= 4 * len(ba) + 1024:         # buffer ids are a counter: an offset is a dense numbering
        op_b = ba - b_lo
        ub = np.arange(b_lo, b_lo + b_n)
    else:
        ub, op_b = np.unique(ba, return_inverse=True)
    # views: the record path interns equal views to one object (core._ranges), so identity finds the few
    # distinct ones; equal views that are distinct objects still get one id (by value, over the distinct objects)
    first, inv = _distinct(views, py)
    vmap = {}
    cls = np.fromiter([vmap.setdefault(views[i], len(vmap)) for i in first], np.int64, len(first))
    op_v = cls[inv]
    # dependencies are tracked per key: a buffer's id, or the alias group of placed tiles sharing bytes (deps.py)
    op_k, k_lo, k_hi, k_v = _dep_keys(core, ba, ub, op_b, c["lo"], c["hi"], views, op_v, vmap)
    uviews = list(vmap)
    nv = len(uviews)
    v_pitch = np.full(nv, -1, np.int64)
    v_c0 = np.zeros(nv, np.int64)
    v_c1 = np.zeros(nv, np.int64)
    v_size = np.zeros(nv, np.int64)
    for k, v in enumerate(uviews):
        g = _geo(v)
        if g is not None:
            v_pitch[k], v_c0[k], v_c1[k] = g
        s = 1
        for d in v[1]:
            s *= d
        v_size[k] = s
    binfo = core.buffers
    b_mem = np.zeros(len(ub), np.int64)      # buffers the core does not know are HBM (as _new_tracker takes them)
    b_size = np.zeros(len(ub), np.int64)
    if binfo and len(ub):                     # (records that touch no buffer: nothing to classify)
        keys = np.fromiter(binfo.keys(), np.int64, len(binfo))
        kinds, sizes = list(zip(*binfo.values()))[:2]
        pos = np.searchsorted(ub, keys)
        pos[pos >= len(ub)] = 0
        used = ub[pos] == keys
        kfirst, kinv = _distinct(kinds, py)
        kcodes = []
        for i in kfirst:
            code = _MEM.get(kinds[i])
            if code is None:
                raise ValueError(f"core {core.core_id}: buffer {keys[i]} is in memory {kinds[i]!r}; the scheduler "
                                 f"knows {sorted(_MEM)}")
            kcodes.append(code)
        m = np.array(kcodes, np.int64)[kinv][used]
        on = m != 0
        b_mem[pos[used][on]] = m[on]
        b_size[pos[used][on]] = np.array(sizes, np.int64)[used][on]
    f64 = np.float64
    cost = _ints(c["cost"], f64)
    dma = _ints(c["dma"])
    rows = np.zeros(n, np.int64)
    part0 = np.zeros(n, np.int64)
    nbytes = np.zeros(n, np.int64)
    rows[dma] = _ints(c["rows"])
    part0[dma] = _ints(c["part0"])
    nbytes[dma] = _ints(c["nbytes"])
    dge_m = np.zeros(n, np.int64)             # DGE mode, queue and cost of each DMA row (isa/dma_dge.py)
    dge_q = np.full(n, -1, np.int64)
    dge_c = np.zeros(n, f64)
    dges = c["dge"]
    if dges.count(None) != len(dges):         # (a C pass: most records name no DGE mode or queue)
        for i, dg in zip(c["dma"], dges):
            if dg is not None:
                dge_m[i], dge_q[i], dge_c[i] = dg
    arrs = dict(
        eng=eng, dma_code=dma_code, clk=clk, cycles=cost, ns=cost, pre=_ints(c["pre"], f64),
        rows=rows, part0=part0, nbytes=nbytes, dge_m=dge_m, dge_q=dge_q, dge_c=dge_c,
        ptr=ptr, nw=_ints(c["nw"]), op_b=op_b.astype(np.int64), op_lo=_ints(c["lo"]), op_hi=_ints(c["hi"]),
        op_v=op_v, op_k=op_k, k_lo=k_lo, k_hi=k_hi, k_v=k_v,
        v_pitch=v_pitch, v_c0=v_c0, v_c1=v_c1, v_size=v_size, b_mem=b_mem, b_size=b_size,
    )
    bar = np.full(n, -1, np.int64)           # core_barrier rows: how many cores they name
    bar_parts = {}
    for i, parts in c["bar"].items():
        bar[i] = len(parts)
        bar_parts[i] = tuple(parts)
    arrs["bar"] = bar
    arrs["bar_parts"] = bar_parts
    for f, base in (("op_k", "op_b"), ("k_lo", "op_lo"), ("k_hi", "op_hi"), ("k_v", "op_v")):
        if arrs[f] is None:            # no alias group: the buffer's own columns
            arrs[f] = arrs[base]
    # the record's own columns for the Timeline (the record's lists: copied, as lists, when the Timeline reads them)
    rec_cols = dict(engine=eng_s, id=c["id"], opcode=c["opcode"], flops=c["flops"], nbytes=nbytes, loc=c["loc"])
    return arrs, emap, rec_cols


def _dep_keys(core, ba, ub, op_b, lo, hi, views, op_v, vmap):
    """``(op_k, k_lo, k_hi, k_v)``: each operand's dependency key, extent and pattern number where the core has
    placed tiles sharing bytes (``deps.alias_groups``: keys after the buffers' numbers, ``len(ub) + group``; new
    byte patterns join ``vmap``), else four None (the buffer columns serve)."""
    occ = getattr(core, "occupancy", None)
    if occ is None:
        return None, None, None, None
    if any(seg.placed for seg in occ.bulk):
        occ.materialize()
    binfo = core.buffers
    tiles = occ.tiles
    placed = []
    for key in _placed_keys(tiles):         # (C loops over the tiles: most kernels place none)
        bid, blk = key
        if blk < 0 and bid in binfo:
            t = tiles[key]
            p = t[3]
            placed.append((bid, t[0], p[0], p[1], p[2], p[3], binfo[bid][3]))
    if len(placed) < 2:
        return None, None, None, None
    groups = alias_groups(placed)
    if not groups:
        return None, None, None, None
    gb = np.fromiter(groups.keys(), np.int64, len(groups))
    sel = np.flatnonzero(np.isin(ba, gb))
    if len(sel) == 0:
        return None, None, None, None
    nb = len(ub)
    op_k = op_b.copy()
    k_lo = np.array(lo, np.int64)
    k_hi = np.array(hi, np.int64)
    k_v = op_v.copy()
    gv = [groups[b] for b in gb.tolist()]
    gid = np.fromiter((x[0] for x in gv), np.int64, len(gv))
    order = np.argsort(gb)
    op_k[sel] = nb + gid[order[np.searchsorted(gb[order], ba[sel])]]
    byte_bids = {b for b, x in zip(gb.tolist(), gv) if x[1]}
    if byte_bids:
        for j in sel[np.isin(ba[sel], np.fromiter(byte_bids, np.int64, len(byte_bids)))].tolist():
            _, _, tile, grp = groups[int(ba[j])]
            a, b, v = byte_operand(int(k_lo[j]), int(k_hi[j]), views[j], tile, grp)
            k_lo[j] = a
            k_hi[j] = b
            k_v[j] = vmap.setdefault(v, len(vmap))
    return op_k, k_lo, k_hi, k_v


class CoreRun:
    """One run of the loop over a core's encoding ``enc`` (``encode(core)``), to the end of its record or to a
    barrier at a time.  ``ns_over``: DMA row -> the ns it costs instead of its record's (``hbm_share``).
    ``impl``: as :func:`mode`.  ``rr``: the DMA engines serve their queues round robin (``dma_share.applies``)."""

    def __init__(self, core, enc, hbm_bytes_per_ns, ns_over=None, impl=None, rr=False):
        arrs, emap, rec_cols = enc
        py = mode(impl) == "python"
        k = _kernels(py)
        self.py = py
        self.core = core
        self.enc = enc
        self.k = k
        self.fn = k.run
        n = len(arrs["eng"])
        tg = core.target
        ns = arrs["ns"]
        if ns_over:
            ns = ns.copy()
            ns[np.fromiter(ns_over.keys(), np.int64, len(ns_over))] = np.fromiter(ns_over.values(), np.float64,
                                                                                   len(ns_over))
        self.bar_t = np.full(n, np.nan)     # each barrier's completion, once known
        nq = int(tg.dma_engines_per_core)
        self.args = (
            arrs["eng"], arrs["dma_code"], arrs["clk"], arrs["cycles"], ns, arrs["pre"], arrs["nbytes"],
            arrs["ptr"], arrs["nw"], arrs["op_b"], arrs["op_lo"], arrs["op_hi"], arrs["b_mem"], arrs["b_size"],
            float(tg.static_overhead_cycles), float(tg.access_request_cycles), float(tg.semaphore_ns),
            float(tg.dma_fixed_ns), float(hbm_bytes_per_ns), arrs["dge_m"], arrs["dge_c"], QUEUE_KEYS,
            arrs["bar"], self.bar_t, bool(rr))
        self.state = k.new_state(arrs["eng"], arrs["dma_code"], arrs["rows"], arrs["part0"], arrs["ptr"], arrs["nw"],
                         arrs["op_b"], arrs["op_k"], arrs["k_lo"], arrs["k_hi"], arrs["k_v"], arrs["v_pitch"],
                         arrs["v_c0"], arrs["v_c1"], arrs["v_size"], arrs["b_mem"], nq,
                         int(tg.dma_partitions_per_engine),
                         arrs["dge_m"], arrs["dge_q"], QUEUE_KEYS, arrs["bar"], int(tg.sbuf_partition_bytes),
                         int(tg.psum_partition_bytes), int(tg.sbuf_partitions), int(tg.psum_partitions))

    def run(self):
        """Go on: ``("barrier", row, arrival)`` when stopped at a barrier whose completion is not known (set it
        with :meth:`pass_barrier`, then run again), else ``(columns, counters)`` for :meth:`Timeline.extend`."""
        self.state, stop_row, stop_t = self.fn(*self.args, self.state)
        if stop_row >= 0:
            return "barrier", int(stop_row), float(stop_t)
        return self._columns()

    def pass_barrier(self, row, t):
        """The barrier at ``row`` completes at ``t`` (the latest arrival of its participants)."""
        self.bar_t[row] = t

    def _columns(self):
        arrs, emap, rec_cols = self.enc
        st = self.state
        nlt = int(st[-2][11])
        cols = CoreColumns(self.core.core_id, len(arrs["eng"]), rec_cols, st[:16], arrs["dge_m"])
        lt_kind, lt_size, lt_t0, lt_t1 = (a[:nlt] for a in st[16:20])
        self.state = None                  # (the arrays the columns are made from are kept by them)
        # the counters, made when the Timeline's are first read (a partial, not a closure: it pickles)
        return cols, partial(_core_counters, self.py, self.core.core_id, lt_kind, lt_size, lt_t0, lt_t1, st[1], st[2], st[7])


class CoreColumns:
    """One core's rows for :meth:`Timeline.extend`: the loop's result arrays and the record's columns, each made a
    list (``column``) only when the Timeline's column is first read.  ``cols[field]`` is that list for these rows
    alone (made once; ``sharing`` reads them)."""

    __slots__ = ("cid", "n", "rec", "res", "dge_m", "_made")

    def __init__(self, cid, n, rec_cols, results, dge_m):
        self.cid = cid
        self.n = n
        self.rec = rec_cols
        self.res = results          # the loop's per-row results (sched_state's tuple order, its first 16)
        self.dge_m = dge_m
        self._made = {}

    def __len__(self):
        return self.n

    def __getitem__(self, f):
        v = self._made.get(f)
        if v is None:
            v = self._made[f] = self.column(f, 0)
        return v

    def column(self, f, base):
        """The list of field ``f`` of :class:`~trnsim.machine.timeline.Row` (or "dge") for these rows, row
        indices plus ``base``."""
        n = self.n
        (start, dstart, end, done, work, queue, nqs, hbm, srcm, dstm, deps, ndeps, bind, dge_s, dge_e, dge_u
         ) = self.res
        rec = self.rec
        if f in ("engine", "opcode", "flops", "loc"):
            return list(rec[f][:n])
        if f == "id":
            return list(range(n)) if rec["id"] is None else list(rec["id"][:n])
        if f == "core":
            return [self.cid] * n
        arr = _ARR.get(f)
        if arr is not None:
            return (rec["nbytes"] if f == "nbytes" else self.res[arr]).tolist()
        if f in ("src", "dst"):
            return _MEM_OBJ[(srcm if f == "src" else dstm) + 1].tolist()
        if f == "deps":
            return _dep_tuples(deps + base if base else deps, ndeps)
        if f == "bind":
            return (np.where(bind >= 0, bind + base, -1) if base else bind).tolist()
        if f == "dge":
            return _dge_spans(self.dge_m, dge_u, dge_s, dge_e, base)
        raise KeyError(f)


# result columns that are one array of the loop's results (index into ``CoreColumns.res``), or the record's nbytes
_ARR = dict(start=0, data_start=1, end=2, done=3, work=4, queue=5, nqueues=6, hbm_bytes=7, nbytes=-1)


def _dge_spans(mode, unit, s, e, base=0):
    """The ``dge`` list ``(row, mode, unit, start, end)`` of the rows with descriptor generation (row numbers plus
    ``base``)."""
    rows = np.flatnonzero(mode > 0)
    return list(zip((rows + base).tolist(), mode[rows].tolist(), unit[rows].tolist(), s[rows].tolist(),
                    e[rows].tolist()))


def _dep_tuples(deps, ndeps):
    """The ``deps`` column: row i's first ``ndeps[i]`` entries as a tuple (built per count, C loops only)."""
    n = len(ndeps)
    obj = np.empty(n, object)
    for k in range(deps.shape[1] + 1):
        sel = np.flatnonzero(ndeps == k)
        if len(sel) == 0:
            continue
        if k == 0:
            obj[sel] = np.fromiter([()] * len(sel), object, len(sel))
        else:          # zip makes the k-tuples straight from k column lists (no per-row list)
            obj[sel] = np.fromiter(zip(*(deps[sel, j].tolist() for j in range(k))), object, len(sel))
    return obj.tolist()


def _core_counters(py, cid, lt_kind, lt_size, lt_t0, lt_t1, dstart, end, hbm):
    return _counters(_kernels(py), cid, lt_kind, lt_size, lt_t0, lt_t1, dstart, end, hbm)


def _counters(k, cid, lt_kind, lt_size, lt_t0, lt_t1, dstart, end, hbm, bins=200):
    """The core's counters: SBUF and PSUM bytes allocated over time (each on-chip buffer from its first data
    access to its last result, on every partition of its space) and HBM traffic in ``bins`` bins."""
    out = {}
    for kd, kind in enumerate(("sbuf", "psum")):
        sel = lt_kind == kd
        sz = lt_size[sel]
        t = np.concatenate((lt_t0[sel], lt_t1[sel]))
        dv = np.concatenate((sz, -sz))
        order = np.lexsort((dv, t))
        t = np.concatenate(([0.0], t[order]))
        cur = np.cumsum(np.concatenate(([0], dv[order])))
        keep = np.ones(len(t), bool)
        keep[:-1] = t[1:] != t[:-1]          # the last point of each run of equal times
        out[(cid, f"{kind}_bytes")] = list(zip(t[keep].tolist(), cur[keep].tolist()))
    total, acc = k.hbm_bins(dstart, end, hbm, bins)
    total = float(total)                     # (uncompiled: a NumPy scalar)
    pts = []
    if total > 0:
        width = total / bins
        pts = [(bi * width, a / width * 1e9) for bi, a in enumerate(acc.tolist())]
        pts.append((total, 0.0))
    out[(cid, "hbm_bytes_per_s")] = pts
    return out
