"""The scheduler: turns the in-order instruction record of each NeuronCore into start/end times per engine.

The model (every figure from the target, which takes it from docs/hardware.md):

* Engines (Tensor, Vector, Scalar, GpSimd) each run their own instructions in program order.  An instruction
  starts when its engine is free and the instructions it depends on have finished.  Dependencies are overlaps of
  the memory they touch (read after write, write after read, write after write; see ``deps.py``).
* Duration: the ISA's cost formula in engine cycles at the target's clock for that engine.  The engine can take
  the next instruction after that (pipelining: independent instructions hide their fixed latencies, "instruction
  level parallelism"); the *result* is committed (``done``) after the cost plus the static overhead
  (``static_overhead_cycles``, about 100 cycles, "added to the execution cost estimate" of a dependent
  instruction) plus about 60 cycles per SBUF/PSUM access request (``access_request_cycles``; one request per
  SBUF/PSUM operand the instruction reads or writes), so a dependent instruction waits for all of it ("cannot
  start data read until the previous instruction has all of its output committed", nki_perf_guide).  A
  dependency across engines adds the semaphore latency (``semaphore_ns``: no published figure, 0).  Same-
  engine write-after-write and write-after-read are satisfied by program order (so matmuls accumulating into one
  PSUM tile stream back to back, as an accumulation group does).
* Tensor Engine: each matmul's stationary load (``pre`` cycles, the min(64, N_stationary) term) overlaps the
  previous multiply; it is exposed only when the PE was idle or the stationary tile arrived late, and skipped
  when the same stationary tile is reused.  fp32 costs 4x and fp8 double-row doubles the contraction in the same
  time (both in the ISA's cycle formula).
* DMA: a transfer is spread over the core's DMA engines by partition (each serves 8 partitions, so partitions
  ``[p0, p0 + rows)`` use engines ``p0 // 8 ...``, up to 16); each engine moves its share at its practical rate,
  reduced for small per-partition payloads (``trnsim.isa.dma.dma_cost_ns``), after the fixed semaphore-to-start
  cost.  The fixed cost is latency, not occupancy.  An engine interleaves the descriptors of its 16 queues: a
  ready transfer takes the engine's free time from its data start on, filling the gaps between transfers placed
  earlier (the most recent 32 gaps are searched), so a store waiting for compute does not block later loads.
  With ``TRNSIM_DMA_ROUND_ROBIN=1`` (off by default: on long capacity-bound streams the rescheduling below finds
  no fixed point, see ``dma_share``), on NeuronCore-v2/v3 the engine serves its queues round robin ("DMA
  transfers from different DMA queues are scheduled in a round robin fashion", dma-overview): transfers of
  different named queues moving at the same time share the engine equally, each slowed while the others move
  (``dma_share``: processor sharing, the transfers of no named queue one class among themselves in the gap
  filling's order).  A later transfer can slow an earlier
  one, so the cores are scheduled again with each transfer's data start and end after its arrival taken from
  the shared engines, until the schedule is its own round robin (at most ``dma_share.MAX_ROUNDS`` schedules; if
  not, the gap filling, with a warning).  The engines' busy time is the gap filling's; individual ends differ.
  NeuronCore-v4 (trn3) serves "based on the queue QoS configured", with no figure: the gap filling stays.
  Transfers on one DMA queue (a trigger engine and DGE mode the kernel named, ``isa/dma_dge.py``) move their
  data on each DMA engine in program order ("DMA transfers within a queue on the same DMA engine are executed in
  order", dma-overview): a transfer starts on an engine no sooner than the previous transfer of its queue ended
  there.  Descriptor generation comes first: ``swdge`` occupies the GpSimd Engine (in its program order) and
  ``hwdge`` one of the core's two hardware DGE blocks (600 ns) before the semaphore-to-start cost; the spans are
  the Timeline's ``dge`` list.
  A transfer moving HBM bytes (twice for HBM to HBM) moves them no faster than the chip's HBM peak; the
  transfers in flight on a chip share that peak over time (``hbm_share``: processor sharing across the DMA
  queues and the cores of the launch; the slowed transfers are stretched and the cores scheduled again).
* Barriers (``core_barrier`` records, from ``NeuronCore.barrier``): each core is scheduled on its own until it
  reaches a barrier; the barrier starts on every participant when the last one is ready to start it, plus the
  semaphore latency (the remote semaphore update).  Cores without barriers are scheduled independently, as before.
* Fresh tiles: buffer ids are never reused (a tile allocated in a loop body is a new buffer each iteration), so
  iterations do not serialise on false dependencies.  To stay within SBUF/PSUM capacity, the first access of a
  new on-chip buffer waits, if the buffers live at that time would not fit, until enough earlier buffers have
  finished their last access (the release order of the compiler's multi-buffering).
"""

from __future__ import annotations

import gc
import heapq
from bisect import bisect_right

from ..isa.dma_dge import QUEUE_KEYS
from . import sched_fast
from .deps import AccessTracker, overlaps
from .sharing import share_rounds
from .timeline import Timeline

__all__ = ["schedule", "schedule_core"]

_ENGINE_ORDER = ("tensor", "vector", "scalar", "gpsimd", "sync")


def schedule(cores, *, progress=None, impl=None) -> Timeline:
    """Schedule the recorded instructions of ``cores`` (``SimulationResult.cores``) and return the
    :class:`Timeline`.  ``progress(done, total)`` is called now and then for long runs.  ``impl``: "python" (the
    reference loop below), "numba" (the compiled loop of ``sched_kernels`` where the record allows it) or
    "auto"; None takes ``TRNSIM_SCHEDULER`` (default "auto": compiled for large records, see ``sched_fast``).
    Both give identical timelines."""
    cores = list(cores)
    if not cores:
        from ..targets import get_target
        return Timeline(get_target(), ())
    tg = cores[0].target
    tl = Timeline(tg, [c.core_id for c in cores], queues_per_core=tg.dma_engines_per_core)
    # each transfer alone moves at most the chip's HBM peak; hbm_share divides the peak among the transfers in
    # flight on a chip (rescheduling with the slowed transfers) when their rates can sum to more than it
    cap = tg.hbm_peak_bytes_per_s * 1e-9
    total = sum(len(c.instructions) for c in cores)
    # the scheduler allocates many small tuples and frees nothing cyclic: the cycle collector's repeated passes
    # over the (large) instruction record would only cost time
    gc_was = gc.isenabled()
    gc.disable()
    try:
        results = _schedule_pass(cores, cap, impl, None, progress, total)
        over = share_rounds(cores, results, cap,
                            lambda ov, mv: _schedule_pass(cores, cap, impl, ov, None, total, mv))
        if over is not None:
            results = over
        for cols, counters in results:
            tl.extend(cols)
            tl.counters.update(counters)
    finally:
        if gc_was:
            gc.enable()
    if progress is not None:
        progress(total, total)
    return tl


def _schedule_pass(cores, cap, impl, overrides, progress, total, moves=None):
    """One schedule of every core (``overrides``: per core, DMA row -> its ns, or None; ``moves``: per core, DMA
    row -> its data start and end after its arrival, from ``dma_share``, or None); returns each core's
    ``(columns, counters)``."""
    gens = []
    done = 0
    for i, c in enumerate(cores):
        ov = overrides[i] if overrides is not None else None
        mv = moves[i] if moves is not None else None
        fast = None
        if sched_fast.use_fast(c, impl):
            if progress is not None and total > 0:
                progress(done, total)          # (the compiled loop reports its core at its start and end)
            fast = sched_fast.schedule_core_fast(c, cap, ov, mv)
        if fast is not None:
            if progress is not None and total > 0:
                progress(done + len(c.instructions), total)
            gens.append(_finished(fast))
        else:
            gens.append(_schedule_core(c, cap, progress, done, total, ov, mv))
        done += len(c.instructions)
    return _run_with_barriers(cores, gens)


def _finished(result):
    """A scheduling generator that has nothing to wait for: it returns ``result`` at once."""
    return result
    yield  # noqa: unreachable (makes this a generator)


def _run_with_barriers(cores, gens):
    """Drive each core's scheduling generator; a core at a barrier (``core_barrier``) waits until every core it
    names has reached that barrier, and all of them pass it at the latest of their arrival times.  Cores without
    barriers run straight through, one after the other.  Returns each core's ``(columns, counters)``."""
    ids = {c.core_id: i for i, c in enumerate(cores)}
    results = [None] * len(gens)
    waiting = {}                       # core index -> (participant indices, arrival time)
    send = [None] * len(gens)
    live = set(range(len(gens)))
    while live:
        for i in sorted(live):
            if i in waiting:
                continue
            try:
                parts, t = gens[i].send(send[i])
            except StopIteration as stop:
                results[i] = stop.value
                live.discard(i)
                continue
            idx = tuple(sorted(ids.get(p, -1) for p in parts))
            waiting[i] = (idx, t)
        released = False
        for i, (idx, _) in list(waiting.items()):
            if i not in waiting:
                continue
            if all(j in waiting and waiting[j][0] == idx for j in idx):
                t = max(waiting[j][1] for j in idx)
                for j in idx:
                    send[j] = t
                    del waiting[j]
                released = True
        if not released and waiting and all(i in waiting for i in live):
            for i, (_, t) in list(waiting.items()):    # a barrier that cannot complete (not a recorded run):
                send[i] = t                             # each core passes it at its own arrival
                del waiting[i]
    return results


def schedule_core(core, *, hbm_bytes_per_ns=None, progress=None, progress_base=0, progress_total=0):
    """Schedule one core's record on its own (a barrier passes at the core's own arrival); returns
    ``(columns, counters)`` for :meth:`Timeline.extend`."""
    gen = _schedule_core(core, hbm_bytes_per_ns, progress, progress_base, progress_total)
    t = None
    while True:
        try:
            _, t = gen.send(t)
        except StopIteration as stop:
            return stop.value


def _schedule_core(core, hbm_bytes_per_ns=None, progress=None, progress_base=0, progress_total=0, ns_over=None,
                   moves=None):
    """The scheduling of one core's record, as a generator: at a ``core_barrier`` record it yields
    ``(participant core ids, the time it is ready to start)`` and is sent the time the barrier completes (the
    latest arrival of the participants); it returns ``(columns, counters)``.  ``ns_over``: DMA row -> the ns
    it costs instead of its record's (the HBM sharing of ``hbm_share``); ``moves``: DMA row -> its data start
    and end after its arrival at the engines under their round robin (``dma_share``)."""
    tg = core.target
    recs = core.instructions
    binfo = core.buffers
    cid = core.core_id
    clock = {e: tg.engine_clock_hz[e] * 1e-9 for e in _ENGINE_ORDER}    # cycles per ns
    static = tg.static_overhead_cycles
    acc = tg.access_request_cycles
    sema = tg.semaphore_ns
    fixed = tg.dma_fixed_ns
    nq = tg.dma_engines_per_core
    ppe = tg.dma_partitions_per_engine
    if hbm_bytes_per_ns is None:
        hbm_bytes_per_ns = tg.hbm_peak_bytes_per_s * 1e-9
    cap = {"sbuf": tg.sbuf_partition_bytes, "psum": tg.psum_partition_bytes}
    parts = {"sbuf": tg.sbuf_partitions, "psum": tg.psum_partitions}

    n = len(recs)
    start = [0.0] * n
    dstart = [0.0] * n
    end = [0.0] * n
    done = [0.0] * n
    work = [0.0] * n
    engs = [None] * n
    queue = [-1] * n
    nqs = [0] * n
    hbm = [0] * n
    srcm = [None] * n
    dstm = [None] * n
    deps_col = [()] * n
    bind = [-1] * n

    eng_free = {e: 0.0 for e in _ENGINE_ORDER}
    eng_last = {e: -1 for e in _ENGINE_ORDER}
    q_free = [0.0] * nq                    # latest end of each DMA engine's transfers
    busy_s = [[] for _ in range(nq)]       # merged busy intervals of each DMA engine (starts, ends, last row)
    busy_e = [[] for _ in range(nq)]
    busy_o = [[] for _ in range(nq)]
    synced = True                          # every transfer so far used all engines: engine 0 stands for all
    qend = [[0.0] * QUEUE_KEYS for _ in range(nq)]     # per DMA engine and queue: end of its last transfer
    qlast = [[-1] * QUEUE_KEYS for _ in range(nq)]     # and that transfer's row
    dge_s = ([], [])                       # busy intervals of the core's two hardware DGE blocks (docs/hardware.md,
    dge_e = ([], [])                       # nki-dge: two per NeuronCore), with the row of each
    dge_o = ([], [])
    dge_log = []                           # (row, mode, unit, start, end) of each descriptor generation
    all_q = list(range(nq))
    pe_prev_key = None
    pe_prev_start = 0.0
    pe_load_free = 0.0

    trackers = {}
    last_use = {}
    for i, r in enumerate(recs):
        for op in r.writes:
            last_use[op[0]] = i
        for op in r.reads:
            last_use[op[0]] = i
    live = {"sbuf": 0, "psum": 0}
    released = {"sbuf": [], "psum": []}    # heaps of (release time, seq, bytes per partition, row)
    popped = {"sbuf": (0.0, -1), "psum": (0.0, -1)}
    lifetimes = []                         # (kind, bytes, t0, t1) of each on-chip buffer
    new_bufs = []

    step = 65536
    for idx in range(n):
        r = recs[idx]
        e = r.engine
        engs[idx] = e
        ready = 0.0
        rb = -1
        dl = None
        gate = 0.0
        gb = -1
        ready_s = 0.0
        reads = r.reads
        writes = r.writes
        if new_bufs:
            new_bufs.clear()
        # -- dependencies -------------------------------------------------------------------------
        first = True
        for op in reads:
            tr = trackers.get(op[0])
            if tr is None:
                tr = trackers[op[0]] = _new_tracker(binfo, op[0])
                if tr.kind is not None:
                    new_bufs.append(tr)
            elif tr.went:
                went = tr.went
                if len(went) <= 8:
                    lo = op[1]
                    hi = op[2]
                    found = [ent for ent in went if ent[0] < hi and ent[1] > lo and
                             ((ent[0] == lo and ent[1] == hi) or overlaps(ent[2], op[3]))]
                else:
                    found = []
                    tr.writers(op[1], op[2], op[3], found)
                for ent in found:
                    p = ent[3]
                    t = done[p] if ent[4] == e else done[p] + sema
                    if t > ready:
                        ready = t
                        rb = p
                    if dl is None:
                        dl = [p]
                    elif p not in dl:
                        dl.append(p)
            if first:
                ready_s = ready
                first = False
        for op in writes:
            tr = trackers.get(op[0])
            if tr is None:
                tr = trackers[op[0]] = _new_tracker(binfo, op[0])
                if tr.kind is not None:
                    new_bufs.append(tr)
                continue
            went = tr.went
            rent = tr.rent
            if not went and not rent:
                continue
            if len(went) + len(rent) <= 8:
                lo = op[1]
                hi = op[2]
                v = op[3]
                found = [ent for ent in went if ent[0] < hi and ent[1] > lo and
                         ((ent[0] == lo and ent[1] == hi) or overlaps(ent[2], v))]
                if rent:
                    found.extend([ent for ent in rent if ent[0] < hi and ent[1] > lo and
                                  ((ent[0] == lo and ent[1] == hi) or overlaps(ent[2], v))])
            else:
                found = []
                tr.writers(op[1], op[2], op[3], found)
                tr.readers(op[1], op[2], op[3], found)
            for ent in found:
                p = ent[3]
                if ent[4] == e:
                    t = end[p]
                else:
                    t = done[p] + sema
                    if dl is None:
                        dl = [p]
                    elif p not in dl:
                        dl.append(p)
                if t > ready:
                    ready = t
                    rb = p
        # -- capacity gate for new on-chip buffers --------------------------------------------------
        for tr in new_bufs:
            kind = tr.kind
            size = tr.size
            heap = released[kind]
            while live[kind] + size > cap[kind] and heap:
                t_r, _, sz, pb = heapq.heappop(heap)
                live[kind] -= sz
                if t_r > popped[kind][0]:
                    popped[kind] = (t_r, pb)
            # a new buffer starts after every buffer whose space it may reuse has gone (monotone, so the
            # buffers live at any time fit the capacity)
            if popped[kind][0] > gate:
                gate, gb = popped[kind]
            live[kind] += size
        # -- timing -------------------------------------------------------------------------------
        if e == "dma":
            if ready >= gate:
                issue = ready
                b = rb
            else:
                issue = gate
                b = gb
            rows = r.rows or 1
            nuse = -(-rows // ppe)
            if nuse > nq:
                nuse = nq
            q0 = (r.part0 // ppe) % nq
            dg = r.dge
            qk = -1
            if dg is not None:
                qk = dg[1]
                if dg[0] == 1:                 # swdge: a GpSimd instruction in the GpSimd program order
                    gs = eng_free["gpsimd"]
                    if gs > issue:
                        b = eng_last["gpsimd"]
                    else:
                        gs = issue
                    ge = gs + dg[2] / clock["gpsimd"]
                    eng_free["gpsimd"] = ge
                    dge_log.append((idx, 1, -1, gs, ge))
                    issue_d = ge
                elif dg[0] == 2:               # hwdge: the earliest free slot from its issue on either block
                    g0, w0 = _dge_slot(dge_s[0], dge_e[0], dge_o[0], issue, dg[2])
                    g1, w1 = _dge_slot(dge_s[1], dge_e[1], dge_o[1], issue, dg[2])
                    u = 0 if g0 <= g1 else 1
                    gs, wb = (g0, w0) if u == 0 else (g1, w1)
                    if gs > issue:
                        b = wb
                    ge = gs + dg[2]
                    _insert(dge_s[u], dge_e[u], dge_o[u], gs, ge, idx)
                    dge_log.append((idx, 2, u, gs, ge))
                    issue_d = ge
                else:
                    issue_d = issue
                ds = issue_d + fixed
            else:
                ds = issue + fixed
            xfer = (r.ns if ns_over is None else ns_over.get(idx, r.ns)) - fixed
            if xfer < 0.0:
                xfer = 0.0
            sk = trackers[reads[0][0]].mem if reads else None
            dk = trackers[writes[0][0]].mem if writes else None
            nh = (sk == "hbm") + (dk == "hbm")
            if nh:
                hb = r.nbytes * nh
                hx = hb / hbm_bytes_per_ns          # no faster than the chip's HBM peak
                if hx > xfer:
                    xfer = hx
                hbm[idx] = hb
            if synced and nuse == nq:
                qs = _Q0
            else:
                if synced:
                    for q in range(1, nq):
                        busy_s[q] = busy_s[0][:]
                        busy_e[q] = busy_e[0][:]
                        busy_o[q] = busy_o[0][:]
                        q_free[q] = q_free[0]
                        qend[q] = qend[0][:]
                        qlast[q] = qlast[0][:]
                    synced = False
                qs = all_q if nuse == nq else [(q0 + j) % nq for j in range(nuse)]
            first_piece = None
            fin = ds
            delayed_by = -1
            for q in qs:
                t0 = ds
                oq = -1
                if qk >= 0 and qend[q][qk] > ds:       # in order behind its queue's last transfer on this engine
                    t0 = qend[q][qk]
                    oq = qlast[q][qk]
                if q_free[q] <= t0:        # the engine is idle from t0: append (fast path)
                    _append(busy_s[q], busy_e[q], busy_o[q], t0, t0 + xfer, idx)
                    f0, f1, ob = t0, t0 + xfer, -1
                else:
                    f0, f1, ob = _fill(busy_s[q], busy_e[q], busy_o[q], t0, xfer, idx)
                if ob < 0:
                    ob = oq
                if qk >= 0:
                    qend[q][qk] = f1
                    qlast[q][qk] = idx
                if f1 > q_free[q]:
                    q_free[q] = f1
                if first_piece is None or f0 < first_piece:
                    first_piece = f0
                if f1 > fin:
                    fin = f1
                    delayed_by = ob
            if fin > ds + xfer + 1e-9 and delayed_by >= 0:
                b = delayed_by
            ds_arr = ds
            ds = first_piece if first_piece is not None else ds
            if moves is not None:
                mv = moves.get(idx)
                if mv is not None:             # the engines' round robin (dma_share): shared data start and end
                    ds = ds_arr + mv[0]
                    fin = ds_arr + mv[1]
                    if fin < ds + xfer:        # (its engine time changed since: hbm_share's stretch)
                        fin = ds + xfer
            start[idx] = issue
            dstart[idx] = ds
            end[idx] = fin
            done[idx] = fin
            work[idx] = xfer
            queue[idx] = q0
            nqs[idx] = nuse
            srcm[idx] = sk
            dstm[idx] = dk
            d = fin
        else:
            clk = clock.get(e)
            if clk is None:                    # an engine without a clock of its own: the Scalar Engine's
                clk = clock[e] = clock["scalar"]
                eng_free[e] = 0.0
                eng_last[e] = -1
            st = eng_free[e]
            b = eng_last[e]
            if ready > st:
                st = ready
                b = rb
            if gate > st:
                st = gate
                b = gb
            if r.parts is not None:             # core_barrier: starts when the last participant arrives
                joined = yield (r.parts, st)
                if joined is not None and len(r.parts) > 1:
                    joined += sema              # the remote semaphore update reaching the other core
                    if joined > st:
                        st = joined
                        b = -1
            cyc = r.cycles
            if r.pre and e == "tensor":
                key = reads[0][:3] if reads else None
                if key is None or key != pe_prev_key:     # the same stationary tile again: no reload
                    ls = ready_s if ready_s > pe_prev_start else pe_prev_start
                    if pe_load_free > ls:
                        ls = pe_load_free
                    le = ls + r.pre / clk
                    pe_load_free = le
                    if le > st:
                        st = le
                        b = rb if rb >= 0 else eng_last[e]
                pe_prev_key = key
                pe_prev_start = st
            fin = st + cyc / clk
            work[idx] = fin - st
            start[idx] = st
            dstart[idx] = st
            end[idx] = fin
            nacc = 0                           # SBUF/PSUM access requests: one per on-chip operand
            for op in writes:
                if trackers[op[0]].mem != "hbm":
                    nacc += 1
            for op in reads:
                if trackers[op[0]].mem != "hbm":
                    nacc += 1
            d = st + (cyc + static + acc * nacc) / clk
            done[idx] = d
            eng_free[e] = fin
            eng_last[e] = idx
        bind[idx] = b
        if dl is not None:
            deps_col[idx] = tuple(dl[:8])
        # -- record the accesses ------------------------------------------------------------------
        for op in writes:
            tr = trackers[op[0]]
            tr.add_write(op[1], op[2], op[3], idx, e)
            if tr.kind is not None:
                if tr.t0 is None or last_use[op[0]] == idx:
                    _touch(tr, op[0], idx, d, dstart, last_use, released, lifetimes, parts)
                elif d > tr.tdone:
                    tr.tdone = d
        for op in reads:
            tr = trackers[op[0]]
            tr.add_read(op[1], op[2], op[3], idx, e)
            if tr.kind is not None:
                if tr.t0 is None or last_use[op[0]] == idx:
                    _touch(tr, op[0], idx, d, dstart, last_use, released, lifetimes, parts)
                elif d > tr.tdone:
                    tr.tdone = d
        if progress is not None and idx % step == step - 1:
            progress(progress_base + idx + 1, progress_total)

    cols = {"core": [cid] * n, "id": [r.id for r in recs], "engine": engs, "queue": queue, "nqueues": nqs,
            "opcode": [r.opcode for r in recs], "start": start, "data_start": dstart, "end": end, "done": done, "work": work,
            "flops": [r.flops for r in recs], "nbytes": [r.nbytes for r in recs], "hbm_bytes": hbm,
            "src": srcm, "dst": dstm, "loc": [r.loc for r in recs], "deps": deps_col, "bind": bind,
            "dge": dge_log}
    counters = _counters(cid, lifetimes, dstart, end, hbm, engs)
    return cols, counters


_Q0 = (0,)
_SEQ = [0]


def _new_tracker(binfo, bid):
    tr = AccessTracker()
    info = binfo.get(bid)
    if info is None or info[0] == "hbm":
        tr.mem = "hbm"
    else:
        tr.mem = tr.kind = info[0]
        tr.size = info[1]
    return tr


def _touch(tr, bid, idx, d, dstart, last_use, released, lifetimes, parts):
    """Lifetime bookkeeping of an on-chip buffer accessed by row ``idx`` (result ready at ``d``)."""
    if tr.t0 is None:
        tr.t0 = dstart[idx]
    if d > tr.tdone:
        tr.tdone = d
    if last_use[bid] == idx and not tr.released:
        tr.released = True
        _SEQ[0] += 1
        heapq.heappush(released[tr.kind], (tr.tdone, _SEQ[0], tr.size, idx))
        lifetimes.append((tr.kind, tr.size * parts[tr.kind], tr.t0, tr.tdone))


_BACKFILL = 32   # busy intervals searched per engine: the most recent ones (older gaps are long past)


def _append(starts, ends, owners, s, e, idx):
    if ends and ends[-1] >= s:
        if e > ends[-1]:
            ends[-1] = e
            owners[-1] = idx
    else:
        starts.append(s)
        ends.append(e)
        owners.append(idx)


def _insert(starts, ends, owners, s, e, idx):
    """Mark [s, e) busy on one engine (it lies in a gap), merging with the intervals it touches."""
    if not ends or s >= ends[-1]:
        _append(starts, ends, owners, s, e, idx)
        return
    i = bisect_right(starts, s)
    if i > 0 and ends[i - 1] >= s - 1e-9:          # touches the interval before: extend it
        i -= 1
        if e > ends[i]:
            ends[i] = e
            owners[i] = idx
    else:
        starts.insert(i, s)
        ends.insert(i, e)
        owners.insert(i, idx)
    j = i + 1
    if j < len(starts) and starts[j] <= ends[i] + 1e-9:   # and the one after
        if ends[j] > ends[i]:
            ends[i] = ends[j]
            owners[i] = owners[j]
        del starts[j], ends[j], owners[j]


def _dge_slot(starts, ends, owners, t, dur):
    """The earliest start ``>= t`` of ``dur`` ns free on one hardware DGE block (its busy intervals, the most recent
    ``_BACKFILL`` searched): a descriptor generation is not split.  Returns ``(start, row it waited behind or -1)``."""
    n = len(starts)
    i = bisect_right(ends, t)
    waited = -1
    if i < n - _BACKFILL:
        i = n - _BACKFILL
        if ends[i - 1] > t:
            t = ends[i - 1]
            waited = owners[i - 1]
    cur = t
    while i < n:
        if ends[i] <= cur:
            i += 1
            continue
        if starts[i] >= cur + dur:
            break
        cur = ends[i]
        waited = owners[i]
        i += 1
    return cur, waited


def _fill(starts, ends, owners, t, dur, idx):
    """Give a transfer ``dur`` ns of one DMA engine's time from ``t`` on, in the gaps between the transfers
    already placed (an engine interleaves the descriptors of its 16 queues).  Marks the time busy; returns
    ``(first start, end, row of the transfer it waited behind last, or -1)``."""
    n = len(starts)
    i = bisect_right(ends, t)
    if i < n - _BACKFILL:
        i = n - _BACKFILL
        if ends[i - 1] > t:
            t = ends[i - 1]
    cur = t
    rem = dur
    pieces = []
    waited = -1
    while rem > 1e-9:
        if i < n and starts[i] <= cur:
            if ends[i] > cur:
                cur = ends[i]
                waited = owners[i]
            i += 1
            continue
        gap_end = starts[i] if i < n else cur + rem
        take = gap_end - cur
        if take > rem:
            take = rem
        if take > 0.0:
            pieces.append((cur, cur + take))
            rem -= take
            cur += take
        elif i >= n:
            break
    first = pieces[0][0] if pieces else t
    last = pieces[-1][1] if pieces else t
    for p0, p1 in pieces:
        _insert(starts, ends, owners, p0, p1, idx)
    return first, last, waited


def _kind(binfo, bid):
    info = binfo.get(bid)
    return info[0] if info is not None else "hbm"


def _parts(tg, info):
    """Partitions whose bytes a buffer's allocation occupies: every partition of the space (the allocator
    reserves the address range on all of them)."""
    return tg.sbuf_partitions if info[0] == "sbuf" else tg.psum_partitions


def _counters(cid, lifetimes, start, end, hbm, engs, bins=200):
    out = {}
    for kind in ("sbuf", "psum"):
        ev = []
        for k, size, t0, t1 in lifetimes:
            if k == kind:
                ev.append((t0, size))
                ev.append((t1, -size))
        ev.sort()
        pts = [(0.0, 0)]
        cur = 0
        for t, dlt in ev:
            cur += dlt
            if pts[-1][0] == t:
                pts[-1] = (t, cur)
            else:
                pts.append((t, cur))
        out[(cid, f"{kind}_bytes")] = pts
    total = max(end, default=0.0)
    pts = []
    if total > 0:
        width = total / bins
        acc = [0.0] * bins
        for s, e, hb, en in zip(start, end, hbm, engs):
            if not hb or e <= s:
                continue
            # spread the bytes evenly over the transfer's duration
            rate = hb / (e - s)
            b0 = min(bins - 1, int(s / width))
            b1 = min(bins - 1, int(e / width))
            for bi in range(b0, b1 + 1):
                lo = max(s, bi * width)
                hi = min(e, (bi + 1) * width)
                if hi > lo:
                    acc[bi] += rate * (hi - lo)
        pts = [(bi * width, acc[bi] / width * 1e9) for bi in range(bins)]
        pts.append((total, 0.0))
    out[(cid, "hbm_bytes_per_s")] = pts
    return out
