"""Round robin among the queues of a DMA engine (NeuronCore-v2 and v3): when it applies, and the classes of a
core's transfers.

docs/hardware.md, "DMA in detail", quoting dma-overview: "DMA transfers within a queue on the same DMA engine are
executed in order. DMA transfers from different DMA queues are scheduled in a round robin fashion (for
NeuronCore-v2 and v3) or based on the queue QoS configured (for NeuronCore-v4)".  An engine serving its queues
round robin, descriptor by descriptor, is modelled as a fluid (each descriptor small against a transfer):

* each DMA engine serves the *classes* that have a transfer ready, each an equal share of the engine's time
  (generalised processor sharing); a transfer moving alone on the engine moves at its own rate (its ``work``, the
  engine time ``isa/dma_timing.py`` gives it), two of different queues at half of it each, and so on;
* a class is one named queue (``isa/dma_dge.py``: a trigger engine the kernel named and a DGE mode), served in
  program order (a transfer waits on that engine for the queue's previous transfer to end), or the class of
  transfers whose queue the kernel did not name: trnsim does not know whether those are on one queue or several
  (the compiler's assignment is not documented, ``dma_dge``), so they are served among themselves the earliest in
  program order first (a later one moving in the time the earlier ones leave), and together they take one
  class's share.  A kernel that names no trigger engine therefore has one class: nothing is shared;
* v4 (trn3): "based on the queue QoS configured", with no QoS figure or default in the documents: not modelled;
  on trn3 an engine serves the earliest in program order of the transfers ready on it (a named queue's head
  only), at its full rate.

A later transfer of another queue arriving while a transfer moves slows it, so its end is not known when it is
placed: the scheduler's loop advances the DMA engines in simulated time with everything else, event by event
(``sched_events``); the round robin is a rule of that loop (its ``rr`` flag), not a second loop.

On by default; ``TRNSIM_DMA_ROUND_ROBIN=0`` takes trn3's rule (the earliest in program order first) on trn1/trn2
too: the timelines trnsim gave before the round robin, kept to compare with them
(``benchmarks/microbench/before_after.py``, ``benchmarks/microbench/dma_queues.py``).
"""

from __future__ import annotations

import numpy as np

from .. import config

__all__ = ["applies", "enabled", "queue_classes", "set_enabled"]


def enabled() -> bool:
    return config.dma_round_robin


def set_enabled(on: bool) -> bool:
    """Turn the round robin on or off for this process; returns the previous setting."""
    return config.set("dma_round_robin", bool(on))


def applies(target) -> bool:
    """Round robin among a DMA engine's queues: when on (:func:`enabled`), on NeuronCore-v2 and v3 (trn1, trn2;
    dma-overview, above)."""
    return config.dma_round_robin and target.nc_version in (2, 3)


def queue_classes(core):
    """``(rows, classes)`` of ``core``'s DMA rows (row numbers and each one's class: 0 for a transfer of no named
    queue, queue number + 1 otherwise), or None when they are of fewer than two classes (nothing to share)."""
    c = getattr(core, "columns", None)
    n = len(core.instructions)
    if c is not None and len(c) == n and len(c.nops) == n:
        rows, dges = c.dma, c.dge
    else:
        rows, dges = [], []
        for r in core.instructions:
            if r.engine == "dma":
                rows.append(r.id)
                dges.append(r.dge)
    if dges.count(None) == len(dges):
        return None
    cls = np.fromiter((0 if d is None or d[1] < 0 else d[1] + 1 for d in dges), np.int64, len(dges))
    if len(cls) == 0 or (cls == cls[0]).all():
        return None
    return np.asarray(rows, np.int64), cls
