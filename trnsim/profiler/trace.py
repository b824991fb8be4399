"""Chrome trace-event JSON of a Timeline, which loads in ui.perfetto.dev and chrome://tracing.

* one process per core (``pid`` = core id), one thread (track) per engine and per DMA engine ("DMA queue q"),
  with extra lanes "DMA queue q.k" when transfers interleave on one engine (its 16 hardware queues);
* a complete event (``ph: "X"``) per instruction, on every DMA queue a transfer is spread over, with args: id,
  source line, flops, bytes, dependencies, and the time it waited on another engine's semaphore (``evt_wait_ns``)
  or on DMA (``dma_wait_ns``), as Neuron Explorer names them;
* flow arrows (``ph: "s"`` / ``"f"``) from each dependency to its dependent;
* descriptor generation (``Timeline.dge``): a software-DGE span on the GpSimd Engine's track, a hardware-DGE span
  on the track of its DGE block ("hardware DGE 0/1");
* counter tracks (``ph: "C"``): SBUF and PSUM bytes live, HBM bandwidth.

Times in the file are microseconds (the format's unit) with ns precision.
"""

from __future__ import annotations

import json
import os

from ..machine.timeline import Timeline
from ._io import atomic_write
from .findings import waits

__all__ = ["trace_events", "write_trace", "ENGINE_TRACKS"]

ENGINE_TRACKS = ("tensor", "vector", "scalar", "gpsimd")
_DMA_TID0 = 10
_DGE_TID0 = 7   # the two hardware DGE blocks of a core (tids 7 and 8)
_LANES = 16     # each DMA engine has 16 queues: transfers overlapping on an engine are drawn on its extra lanes


def _lane_tid(q, k):
    return _DMA_TID0 + q if k == 0 else 1000 + 16 * q + k


def _tid(engine, queue):
    if engine == "dma":
        return _DMA_TID0 + queue
    try:
        return 1 + ENGINE_TRACKS.index(engine)
    except ValueError:
        return 9


def _loc(loc):
    if not loc:
        return ""
    return f"{os.path.basename(str(loc[0]))}:{loc[1]}"


def trace_events(tl: Timeline, flows=True, max_flows=200_000):
    """The trace events (a list of dicts) of ``tl``."""
    ev = []
    tg = tl.target
    for c in tl.core_ids:
        ev.append({"ph": "M", "name": "process_name", "pid": c, "tid": 0,
                   "args": {"name": f"NeuronCore {c} ({tg.name})"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": c, "tid": 0, "args": {"sort_index": c}})
        for i, e in enumerate(ENGINE_TRACKS):
            ev.append({"ph": "M", "name": "thread_name", "pid": c, "tid": 1 + i, "args": {"name": f"{e} engine"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": c, "tid": 1 + i, "args": {"sort_index": i}})
        for q in range(tl.queues_per_core):
            ev.append({"ph": "M", "name": "thread_name", "pid": c, "tid": _DMA_TID0 + q,
                       "args": {"name": f"DMA queue {q}"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": c, "tid": _DMA_TID0 + q,
                       "args": {"sort_index": 10 + q}})
    nq = tl.queues_per_core
    lanes = {}        # (core, engine queue) -> end time of each lane: overlapping transfers go on extra lanes
    lane_of = {}

    def dma_tid(core, q, ts, te):
        ends = lanes.setdefault((core, q), [])
        for k, e in enumerate(ends):
            if e <= ts + 1e-9:
                ends[k] = te
                break
        else:
            if len(ends) < _LANES:
                ends.append(te)
                k = len(ends) - 1
                if k:
                    ev.append({"ph": "M", "name": "thread_name", "pid": core, "tid": _lane_tid(q, k),
                               "args": {"name": f"DMA queue {q}.{k}"}})
                    ev.append({"ph": "M", "name": "thread_sort_index", "pid": core, "tid": _lane_tid(q, k),
                               "args": {"sort_index": 10 + q + k / 100}})
            else:
                k = _LANES - 1
                ends[k] = max(ends[k], te)
        return _lane_tid(q, k)

    evt_wait, dma_wait = waits(tl)
    for r in tl.rows():
        args = {"id": r.id, "source": _loc(r.loc), "start_ns": round(r.start, 3), "end_ns": round(r.end, 3)}
        if evt_wait[r.index]:
            args["evt_wait_ns"] = round(evt_wait[r.index], 3)
        if dma_wait[r.index]:
            args["dma_wait_ns"] = round(dma_wait[r.index], 3)
        if r.flops:
            args["flops"] = r.flops
        if r.engine == "dma":
            args["bytes"] = r.nbytes
            args["from"] = r.src
            args["to"] = r.dst
            args["issued_ns"] = round(r.start, 3)
            args["queues"] = f"{r.queue}..{(r.queue + r.nqueues - 1) % nq}"
        if r.deps:
            args["deps"] = list(r.deps)
        ts = r.data_start / 1000.0
        dur = max(r.end - r.data_start, 0.0) / 1000.0
        if r.engine == "dma":
            for j in range(r.nqueues):
                tid = dma_tid(r.core, (r.queue + j) % nq, r.data_start, r.end)
                if j == 0:
                    lane_of[r.index] = tid
                ev.append({"ph": "X", "name": r.opcode, "cat": "dma", "pid": r.core,
                           "tid": tid, "ts": ts, "dur": dur, "args": args})
        else:
            ev.append({"ph": "X", "name": r.opcode, "cat": r.engine, "pid": r.core, "tid": _tid(r.engine, 0),
                       "ts": ts, "dur": dur, "args": args})
    # descriptor generation (isa/dma_dge.py): software DGE on the GpSimd Engine's track, hardware DGE on a track
    # per DGE block
    named = set()
    for r, mode, unit, s, e in tl.dge:
        if e <= s:           # the later rows of a row-by-row gather: their descriptors came with the first's
            continue
        c = tl.core[r]
        tid = _tid("gpsimd", 0) if mode == 1 else _DGE_TID0 + unit
        if mode != 1 and (c, tid) not in named:
            named.add((c, tid))
            ev.append({"ph": "M", "name": "thread_name", "pid": c, "tid": tid,
                       "args": {"name": f"hardware DGE {unit}"}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": c, "tid": tid,
                       "args": {"sort_index": 5 + unit / 10}})
        ev.append({"ph": "X", "name": f"dge {('swdge', 'hwdge')[mode - 1]} ({tl.opcode[r]})", "cat": "dge",
                   "pid": c, "tid": tid, "ts": s / 1000.0, "dur": max(e - s, 0.0) / 1000.0,
                   "args": {"dma_row": r, "id": tl.id[r], "source": _loc(tl.loc[r]), "start_ns": round(s, 3),
                            "end_ns": round(e, 3)}})
    if flows:
        nf = 0
        for r in tl.rows():
            for d in r.deps:
                if nf >= max_flows:
                    break
                p = tl.row(d)
                fid = nf + 1
                nf += 1
                # the start point sits inside the producer's slice, the end binds to the consumer's slice
                ps = (p.data_start + max(p.end - p.data_start, 0.0) / 2) / 1000.0
                ev.append({"ph": "s", "id": fid, "name": "dep", "cat": "dep", "pid": p.core,
                           "tid": lane_of.get(d, _tid(p.engine, p.queue)), "ts": ps})
                ev.append({"ph": "f", "bp": "e", "id": fid, "name": "dep", "cat": "dep", "pid": r.core,
                           "tid": lane_of.get(r.index, _tid(r.engine, r.queue)), "ts": r.data_start / 1000.0})
    names = {"sbuf_bytes": ("SBUF bytes live", "bytes"), "psum_bytes": ("PSUM bytes live", "bytes"),
             "hbm_bytes_per_s": ("HBM bandwidth", "GB/s")}
    for (c, name), pts in tl.counters.items():
        label, unit = names.get(name, (name, "value"))
        scale = 1e-9 if unit == "GB/s" else 1
        for t, v in pts:
            ev.append({"ph": "C", "name": label, "pid": c, "ts": t / 1000.0, "args": {unit: v * scale}})
    return ev


def write_trace(tl: Timeline, path, flows=True):
    """Write ``tl`` as Chrome trace-event JSON to ``path`` (atomically); returns the path."""
    doc = {"traceEvents": trace_events(tl, flows=flows), "displayTimeUnit": "ns",
           "otherData": {"generator": "trnsim", "target": tl.target.name, "total_ns": tl.total_ns}}
    with atomic_write(path) as f:
        json.dump(doc, f, separators=(",", ":"))
    return path
