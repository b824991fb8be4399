"""Steps of a collective and their time: bandwidth, hop latency and contention.

A collective is a sequence of steps.  In a step every participating rank moves some data (transfers) and
touches HBM (reads and writes, including the operands a reduction reads); the step ends when the most loaded
resource has moved its bytes.  Resources: each direction of each NeuronLink, each switch port, each chip's EFA in
and out, each chip's HBM (shared by the chip's ranks) and each rank's DMA engines.  Two transfers crossing one
link in one step share it: the link's load is the sum of their bytes.  A step also costs one hop latency
(``Topology.hop_ns``; ``efa_hop_ns`` when any of its transfers leaves the node).

Loads are kept in *units*: a step moving ``u`` units moves ``u * unit_bytes`` bytes, where ``unit_bytes`` is a
fixed fraction of the collective's size (``C = size / N`` for most collectives).  So a schedule is built once per
(topology, group, collective, algorithm) and its time for any size is

    sum over steps of  latency + unit_fraction * size * max over resources (units / bandwidth).
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
    ns_per_unit_byte: float  # max over resources of units / bandwidth (ns per byte of one unit)
    bottleneck: tuple        # the resource that sets the step's bandwidth time
    loads: tuple             # ((resource, units), ...) sorted, for inspection and tests

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
        self.efa = False
        self.moves = False

    def send(self, src: int, dst: int, units: float, reads: float = 1.0, writes: float = 1.0,
             src_writes: float = 0.0):
        """Rank ``src`` sends ``units`` to rank ``dst``: the route's links carry them, the sender's DMA engines
        move them, HBM is read ``reads`` times at the source chip and written ``writes`` times at the
        destination chip (``src_writes`` more writes land on the source chip: KangaRing's duplicated write)."""
        if units <= 0:
            return
        self.moves = True
        cs, cd = self.p.chip(src), self.p.chip(dst)
        route, efa = self.t.route(cs, cd)
        self.efa |= efa
        for res in route:
            self.loads[res] += units
        self.loads[("dma", src)] += units
        self.loads[("hbm", cs)] += units * (reads + src_writes)
        self.loads[("hbm", cd)] += units * writes

    def local(self, rank: int, reads: float, writes: float):
        """HBM traffic of a rank on its own chip (a reduction reading its operands, writing its result)."""
        self.moves = True
        self.loads[("hbm", self.p.chip(rank))] += reads + writes
        self.loads[("dma", rank)] += writes

    def build(self) -> Step:
        worst, bott = 0.0, ()
        for res, units in self.loads.items():
            v = units / self.t.resource_bandwidth(res)
            if v > worst:
                worst, bott = v, res
        lat = (self.t.efa_hop_ns if self.efa else self.t.hop_ns) if self.moves else 0.0
        return Step(self.label, lat, self.unit_fraction, worst, bott, tuple(sorted(self.loads.items())))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The steps of one collective with one algorithm on one group of ranks."""

    op: str
    algorithm: str
    nranks: int
    steps: tuple

    def time_ns(self, size: float) -> float:
        return sum(s.time_ns(size) for s in self.steps)

    def latency_ns(self) -> float:
        return sum(s.latency_ns for s in self.steps)

    def breakdown(self, size: float) -> list:
        """``[(label, ns, bottleneck resource)]`` per step."""
        return [(s.label, s.time_ns(size), s.bottleneck) for s in self.steps]
