"""Steps of a collective and their time: the runtime's fixed costs, bandwidth, hop latency and contention.

A collective is a sequence of steps.  In a step every participating rank moves some data (transfers) and
touches HBM (reads and writes, including the operands a reduction reads); the step ends when the most loaded
resource has moved its bytes.  Resources: each direction of each NeuronLink, each switch port, each chip's EFA in
and out, each chip's HBM (shared by the chip's ranks) and each rank's DMA engines.  Two transfers crossing one
link in one step share it: the link's load is the sum of their bytes.

Costs, each from the Neuron documents (paths in the AWS Neuron SDK documentation):

* **per collective** (:func:`fixed_costs`): the NeuronCore triggers its CC core with a write (the compiler's
  PseudoTriggerCollective2, which the runtime turns into a Write instruction; neuron-runtime/explore/
  compute-comm-overlap.rst) and the CC core starts the first DMA of the collective's pre-built rings: the
  cross-engine "descriptor setup, synchronization, and semaphore-to-start latency (~1300 ns)" of
  nki/deep-dives/nki-dma-bandwidth-guide.rst (``Target.dma_fixed_ns``).  Then the ranks' CC cores synchronise
  through semaphores before any rank writes into a peer's buffer (compute-comm-overlap.rst: "a semaphore-based
  synchronization protocol among CC cores"): one hop of latency (below) for that entry handshake.
* **per step**: one hop latency, ``Topology.hop_ns`` inside a node (intranode-collective-comm.rst: "the per-hop
  latency of Ring/KangaRing is about 1-2 us (HBM load dependent)", the midpoint) or ``efa_hop_ns`` when any
  transfer of the step leaves the node (internode-collective-comm.rst: "~15us").  The hop covers the step's DMA
  start and the semaphore that tells the receiver its data landed.
* **descriptors**: none at run time.  The runtime builds the collectives' DMA rings when it loads the NEFF
  (compute-comm-overlap.rst: "pre-constructed DMA rings that establish the data path"), so no descriptor
  generation is charged per step.  No figure is published for the CC core's own scheduling between steps; it is
  taken to be inside the hop latency.
* **bandwidth**: each resource's bytes over its bandwidth, the step taking the largest.  A reducing transfer
  (``reads > 1``) reads its operands from HBM, reduces them and writes the result (intranode-collective-comm.rst
  counts KangaRing's reduce-scatter as "3R1W" HBM accesses; neuron-runtime/about/collectives.rst: the CC cores
  "control when and how data movement engines transfer data"): the chip's HBM is charged every read and write,
  and the DMA engines of the rank doing it the larger of the bytes they read and write (assumptions: the DMA
  engines do the reduction, and an engine's practical rate bounds each of its two streams).
* **reduction pipelining**: "a chunk transmit is divided into two sliced transmissions, where the first slice
  reduction overlaps the second slice communication" (intranode-collective-comm.rst).  With transfer time X and
  reduction time R per step, two slices take X/2 + max(X/2, R/2) + R/2 = max(X, R) + min(X, R)/2: the step pays
  ``min(X, R) / 2`` on top of its bottleneck.

Loads are kept in *units*: a step moving ``u`` units moves ``u * unit_bytes`` bytes, where ``unit_bytes`` is a
fixed fraction of the collective's size (``C = size / N`` for most collectives).  So a schedule is built once per
(topology, group, collective, algorithm) and its time for any size is

    fixed + sum over steps of  latency + unit_fraction * size * (max over resources (units / bandwidth) + tail).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from .topology import Placement


@dataclasses.dataclass(frozen=True)
class Step:
    label: str
    latency_ns: float
    unit_fraction: float     # unit bytes = unit_fraction * collective size
    ns_per_unit_byte: float  # max over resources of units / bandwidth, plus the reduction tail (ns per unit byte)
    bottleneck: tuple        # the resource that sets the step's bandwidth time
    loads: tuple             # ((resource, units), ...) sorted, for inspection and tests
    tail_ns_per_unit_byte: float = 0.0   # the part of ns_per_unit_byte that is the last slice's reduction

    def time_ns(self, size: float) -> float:
        return self.latency_ns + self.unit_fraction * size * self.ns_per_unit_byte


class StepBuilder:
    """Collects the transfers of one step; :meth:`build` turns them into a :class:`Step`."""

    def __init__(self, placement: Placement, label: str, unit_fraction: float):
        self.p = placement
        self.t = placement.topology
        self.label = label
        self.unit_fraction = unit_fraction
        self.loads = defaultdict(float)
        self.red = defaultdict(float)     # the reduction's share of the loads (operand reads by the reducing engine)
        self.efa = False
        self.moves = False

    def send(self, src: int, dst: int, units: float, reads: float = 1.0, writes: float = 1.0,
             src_writes: float = 0.0):
        """Rank ``src`` sends ``units`` to rank ``dst``: the route's links carry them, the sender's DMA engines
        move them, HBM is read ``reads`` times at the source chip and written ``writes`` times at the
        destination chip (``src_writes`` more writes land on the source chip: KangaRing's duplicated write).
        ``reads > 1`` is a reducing transfer: the sender's DMA engines read every operand."""
        if units <= 0:
            return
        self.moves = True
        cs, cd = self.p.chip(src), self.p.chip(dst)
        route, efa = self.t.route(cs, cd)
        self.efa |= efa
        for res in route:
            self.loads[res] += units
        self.loads[("dma", src)] += units * max(reads, writes + src_writes)
        self.loads[("hbm", cs)] += units * (reads + src_writes)
        self.loads[("hbm", cd)] += units * writes
        if reads > 1:
            self.red[("dma", src)] += units * reads
            self.red[("hbm", cs)] += units * reads

    def local(self, rank: int, reads: float, writes: float):
        """HBM traffic of a rank on its own chip (a reduction reading its operands, writing its result)."""
        self.moves = True
        self.loads[("hbm", self.p.chip(rank))] += reads + writes
        self.loads[("dma", rank)] += max(reads, writes)

    def build(self) -> Step:
        worst, bott = 0.0, ()
        bw = self.t.resource_bandwidth
        for res, units in self.loads.items():
            v = units / bw(res)
            if v > worst:
                worst, bott = v, res
        # reduction pipelining (module docstring): X = the transfers' time, R = the reduction's, tail min(X, R) / 2
        red = max((u / bw(res) for res, u in self.red.items()), default=0.0)
        xfer = max(((u - self.red.get(res, 0.0)) / bw(res) for res, u in self.loads.items()), default=0.0)
        tail = min(red, xfer) / 2
        lat = (self.t.efa_hop_ns if self.efa else self.t.hop_ns) if self.moves else 0.0
        return Step(self.label, lat, self.unit_fraction, worst + tail, bott, tuple(sorted(self.loads.items())),
                    tail)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The steps of one collective with one algorithm on one group of ranks."""

    op: str
    algorithm: str
    nranks: int
    steps: tuple
    fixed: tuple = ()        # ((label, ns), ...): the per-collective costs (:func:`fixed_costs`)

    @property
    def fixed_ns(self) -> float:
        return sum(ns for _, ns in self.fixed)

    def time_ns(self, size: float) -> float:
        return self.fixed_ns + sum(s.time_ns(size) for s in self.steps)

    def latency_ns(self) -> float:
        """The fixed-cost floor: the time of the collective as its size goes to zero."""
        return self.fixed_ns + sum(s.latency_ns for s in self.steps)

    def breakdown(self, size: float) -> list:
        """``[(label, ns, bottleneck resource)]``: the fixed costs, then each step."""
        return [(lbl, ns, ()) for lbl, ns in self.fixed] + [(s.label, s.time_ns(size), s.bottleneck)
                                                             for s in self.steps]


def fixed_costs(topology, spans_nodes: bool) -> tuple:
    """The per-collective costs (module docstring): the CC core's trigger and first DMA start, and the entry
    handshake between the ranks' CC cores (one hop, over EFA when the group spans nodes)."""
    return (("CC core trigger and first DMA start", topology.target.dma_fixed_ns),
            ("entry handshake between CC cores", topology.efa_hop_ns if spans_nodes else topology.hop_ns))
