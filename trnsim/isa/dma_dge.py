"""Descriptor generation (DGE) and the DMA queue of a transfer (docs/hardware.md#dma-in-detail).

Sources (docs/hardware.md's rows, quoting nki/deep-dives/nki-dge.rst and nki/get-started/about/nki-dma-overview.rst):

* ``dge_mode``: ``none`` -- descriptors pre-computed on the host and stored in HBM, "no on-device cost";
  ``swdge`` -- the GpSimd Engine generates them at run time ("costs GpSimd cycles", no figure given; the only mode
  for indirect gather/scatter); ``hwdge`` -- a hardware block, two per NeuronCore, "approximately 600 ns" per DMA
  instruction, which "can overlap with compute through Scalar Engine pipelining".
* "DMA transfers within a queue on the same DMA engine are executed in order"; "16 DMA queues per DMA engine"; the
  queue is "typically tied to the trigger engine and the method of descriptor generation".

What trnsim makes of them (the choices the documents leave open are trnsim's, the simplest reading; the scheduler
applies the result, ``machine/scheduler.py``):

* ``dge_mode=unknown`` (or not given) resolves to ``none`` (the cost trnsim charged before: none on the device),
  except for an indirect gather/scatter (a ``vector_offset`` access pattern), which resolves to ``swdge``, the only
  mode the document allows for it.  An explicit mode is taken as given.
* ``swdge``: a GpSimd instruction in front of the transfer, in the GpSimd Engine's program order, of the GpSimd
  instruction cost "about 150 + N" cycles (docs/hardware.md, "Instruction cost model") with N the descriptors it writes
  per partition (the transfer's descriptors per row).  No document gives a figure for software descriptor
  generation; this is the generic GpSimd cost applied to the descriptor list as the instruction's elements.
* ``hwdge``: ``Target.dma_dge_instruction_ns`` (600 ns) on one of the core's two hardware DGE blocks (the one free
  first), in front of the transfer's semaphore-to-start cost (docs/hardware.md does not say the 600 ns is inside the
  1,300 ns; the DGE writes the descriptors the engines then run).  It occupies no compute engine (the overlap with
  compute the document states).
* The queue: a transfer whose kernel names its trigger engine (``dma_copy(engine=...)``) is on the queue of (that
  engine, its DGE mode) of every DMA engine it uses; transfers on one queue of one DMA engine move their data in
  program order.  A transfer whose trigger engine is not given gets no queue constraint (the compiler's queue
  assignment is not documented; one shared default queue would hold every load behind every earlier store in
  program order, which trnsim cannot claim of the hardware), and DMA engines keep interleaving the transfers of
  different queues: on NeuronCore-v2/v3 round robin among the named queues, the transfers of no named queue
  taking one share among them (``machine/dma_share.py``); on v4 by filling each engine's free time in program
  order (its queue QoS has no figure).
"""

from __future__ import annotations

from .errors import fail

__all__ = ["DGE_NONE", "DGE_SW", "DGE_HW", "DGE_MODES", "NO_QUEUE", "dge_of"]

DGE_NONE, DGE_SW, DGE_HW = 0, 1, 2
DGE_MODES = ("none", "swdge", "hwdge")
NO_QUEUE = -1
# trigger engines that own DMA queues ("DMA transfers can be triggered by any engine sequencer", dma-overview);
# a queue is numbered trigger * 4 + DGE mode (fewer than 32 numbers: the scheduler's table per DMA engine)
_TRIGGERS = ("tensor", "vector", "scalar", "gpsimd", "sync", "dma")
QUEUE_KEYS = 32


# a plain int dge_mode is nki.isa.dge_mode's value (unknown 0, swdge 1, hwdge 2, none 3; nki-library kernels pass
# ``3`` for none)
_DGE_VALUES = {0: "unknown", 1: "swdge", 2: "hwdge", 3: "none"}


def _name(x, values=None):
    if x is None:
        return None
    if values is not None and type(x) is int:
        return values.get(x)
    n = getattr(x, "name", x)
    return n if isinstance(n, str) else None


def dge_of(core, I, loc, dge_mode, engine, descs_per_row, gathered=False):
    """``(mode, queue, cost)`` of one DMA instruction: the DGE mode (``DGE_NONE``/``DGE_SW``/``DGE_HW``), its queue
    number (``NO_QUEUE`` when the kernel does not name the trigger engine) and the DGE cost (GpSimd cycles for
    swdge, ns for hwdge, 0 for none)."""
    m = _name(dge_mode, _DGE_VALUES)
    if dge_mode is not None and m is None:
        fail(I, "dge_mode", f"is {dge_mode!r}; expected nisa.dge_mode.unknown, none, swdge or hwdge", dge_mode,
             ("unknown", "none", "swdge", "hwdge"), loc)
    if m is None or m == "unknown":
        mode = DGE_SW if gathered else DGE_NONE
    elif m in DGE_MODES:
        mode = DGE_MODES.index(m)
    else:
        fail(I, "dge_mode", f"is {m!r}; expected unknown, none, swdge or hwdge", m,
             ("unknown", "none", "swdge", "hwdge"), loc)
    e = _name(engine)
    if engine is not None and e is None:
        fail(I, "engine", f"is {engine!r}; expected an nisa.engine", engine, _TRIGGERS, loc)
    if e is None or e == "unknown":
        queue = NO_QUEUE
    elif e in _TRIGGERS:
        queue = _TRIGGERS.index(e) * 4 + mode
    else:
        fail(I, "engine", f"is {e!r}; a DMA is triggered by one of {', '.join(_TRIGGERS)}", e, _TRIGGERS, loc)
    tg = core.target
    if mode == DGE_SW:
        cost = float(tg.gpsimd_fixed_cycles + max(1, int(descs_per_row)))   # docs/hardware.md: GpSimd about 150 + N
    elif mode == DGE_HW:
        cost = float(tg.dma_dge_instruction_ns)                             # nki-dge: about 600 ns
    else:
        cost = 0.0
    return mode, queue, cost
