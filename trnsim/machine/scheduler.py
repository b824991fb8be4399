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
  cost.  The fixed cost is latency, not occupancy.  An engine interleaves the descriptors of its 16 queues: of
  the transfers ready on it, it serves the earliest in program order, a later one moving in the time the earlier
  ones leave (so a store waiting for compute does not block later loads).  On NeuronCore-v2/v3 the engine serves
  its queues round robin ("DMA transfers from different DMA queues are scheduled in a round robin fashion",
  dma-overview): transfers of different named queues moving at the same time share the engine equally, each
  slowed while the others move (``dma_share``: processor sharing, the transfers of no named queue one class
  among themselves, the earliest in program order first).  NeuronCore-v4 (trn3) serves "based on the queue QoS
  configured", with no figure: no round robin, the earliest in program order first (``TRNSIM_DMA_ROUND_ROBIN=0``
  takes that rule on every generation).  Transfers on one DMA queue (a trigger engine and DGE mode the kernel named, ``isa/dma_dge.py``) move their
  data on each DMA engine in program order ("DMA transfers within a queue on the same DMA engine are executed in
  order", dma-overview): a transfer starts on an engine no sooner than the previous transfer of its queue ended
  there.  Descriptor generation comes first: ``swdge`` occupies the GpSimd Engine (in its program order) and
  ``hwdge`` one of the core's two hardware DGE blocks (600 ns) before the semaphore-to-start cost; the spans are
  the Timeline's ``dge`` list.
  A transfer moving HBM bytes (twice for HBM to HBM) moves them no faster than the chip's HBM peak; the
  transfers in flight on a chip share that peak over time (``hbm_share``: processor sharing across the DMA
  queues and the cores of the launch; the slowed transfers are stretched and the cores scheduled again: rounds
  over the whole launch, ``sharing.share_rounds``, the one part not yet advanced in simulated time with the rest).
* Barriers (``core_barrier`` records, from ``NeuronCore.barrier``): each core is scheduled on its own until it
  reaches a barrier; the barrier starts on every participant when the last one is ready to start it, plus the
  semaphore latency (the remote semaphore update).  Cores without barriers are scheduled independently.
* Fresh tiles: buffer ids are never reused (a tile allocated in a loop body is a new buffer each iteration), so
  iterations do not serialise on false dependencies.  To stay within SBUF/PSUM capacity, the first access of a
  new on-chip buffer waits, if the buffers live at that time would not fit, until enough earlier buffers have
  finished their last access (the release order of the compiler's multi-buffering).

The model is one loop, ``sched_events.run``: a core's engines, DMA engines and their queues, descriptor
generation, dependencies, barriers and the capacity gate advanced together in simulated time, event by event, each
instruction placed once (compiled with numba; ``impl="python"`` runs the same functions uncompiled, with identical
timelines), over each core's record encoded as arrays by ``sched_fast.encode`` and prepared in program order by
``sched_state.new_state`` (dependencies, access trackers).  It stops at a barrier whose participants have not all
arrived and keeps its state; this module runs the cores in turn and lets a stopped core go on once every
participant has reached the barrier, with the barrier's completion.
"""

from __future__ import annotations

import gc

from . import dma_share, sched_fast
from .sharing import share_rounds
from .timeline import Timeline

__all__ = ["schedule"]


def schedule(cores, *, progress=None, impl=None) -> Timeline:
    """Schedule the recorded instructions of ``cores`` (``SimulationResult.cores``) and return the
    :class:`Timeline`.  ``progress(done, total)`` is called at each core's start and end.  ``impl``: "numba"
    (the compiled loop; "auto" is the same) or "python" (the same loop uncompiled, for debugging; identical
    timelines); None takes ``TRNSIM_SCHEDULER`` (default auto: compiled, except the first rows a process schedules,
    ``sched_fast.choose``)."""
    cores = list(cores)
    if not cores:
        from ..targets import get_target
        return Timeline(get_target(), ())
    sched_fast.mode(impl)                       # a bad TRNSIM_SCHEDULER is refused before any work
    tg = cores[0].target
    tl = Timeline(tg, [c.core_id for c in cores], queues_per_core=tg.dma_engines_per_core)
    # each transfer alone moves at most the chip's HBM peak; hbm_share divides the peak among the transfers in
    # flight on a chip (rescheduling with the slowed transfers) when their rates can sum to more than it
    cap = tg.hbm_peak_bytes_per_s * 1e-9
    total = sum(len(c.instructions) for c in cores)
    impl = sched_fast.choose(impl, total)       # the build: "numba" or "python"
    # the scheduler allocates many small objects and frees nothing cyclic: the cycle collector's repeated passes
    # over the (large) instruction record would only cost time
    gc_was = gc.isenabled()
    gc.disable()
    try:
        encs = [sched_fast.encode(c, impl == "python") for c in cores]
        rr = [dma_share.applies(c.target) for c in cores]
        results = _schedule_pass(cores, cap, impl, None, progress, total, encs, rr)
        over = share_rounds(cores, results, cap,
                            lambda ov: _schedule_pass(cores, cap, impl, ov, None, total, encs, rr))
        if over is not None:
            results = over
        for cols, counters in results:
            tl.extend(cols)
            tl.add_counters(counters)
    finally:
        if gc_was:
            gc.enable()
    if progress is not None:
        progress(total, total)
    return tl


def _schedule_pass(cores, cap, impl, overrides, progress, total, encs=None, rr=None):
    """One schedule of every core (``overrides``: per core, DMA row -> its ns, or None; ``encs``: each core's
    ``sched_fast.encode``, made here when None; ``rr``: per core, whether its DMA engines serve their queues round
    robin, ``dma_share.applies``); returns each core's ``(columns, counters)``.

    A core at a barrier (``core_barrier``) waits until every core it names has reached that barrier, and all of
    them pass it at the latest of their arrival times (a barrier that cannot complete, when every running core
    waits at one, is passed by each core at its own arrival).  Cores without barriers run straight through, one
    after the other."""
    n = len(cores)
    if encs is None:
        encs = [sched_fast.encode(c, sched_fast.mode(impl) == "python") for c in cores]
    ids = {c.core_id: i for i, c in enumerate(cores)}
    runs = [sched_fast.CoreRun(c, encs[i], cap, overrides[i] if overrides is not None else None, impl=impl,
                               rr=bool(rr and rr[i])) for i, c in enumerate(cores)]
    results = [None] * n
    waiting = {}                       # core index -> (participant indices, barrier row, arrival time)
    live = set(range(n))
    base = [0] * n
    for i in range(1, n):
        base[i] = base[i - 1] + len(cores[i - 1].instructions)
    while live:
        for i in sorted(live):
            if i in waiting:
                continue
            if progress is not None and total > 0:
                progress(base[i], total)
            out = runs[i].run()
            if out[0] == "barrier":
                _, row, t = out
                parts = encs[i][0]["bar_parts"][row]
                waiting[i] = (tuple(sorted(ids.get(p, -1) for p in parts)), row, t)
                continue
            results[i] = out
            live.discard(i)
            if progress is not None and total > 0:
                progress(base[i] + len(cores[i].instructions), total)
        released = False
        for i, (idx, _, _) in list(waiting.items()):
            if i not in waiting:
                continue
            if all(j in waiting and waiting[j][0] == idx for j in idx):
                t = max(waiting[j][2] for j in idx)
                for j in idx:
                    runs[j].pass_barrier(waiting.pop(j)[1], t)
                released = True
        if not released and waiting and all(i in waiting for i in live):
            for i in list(waiting):     # a barrier that cannot complete (not a recorded run): each core passes
                _, row, t = waiting.pop(i)  # it at its own arrival
                runs[i].pass_barrier(row, t)
    return results
