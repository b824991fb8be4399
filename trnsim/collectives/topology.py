"""Cluster topologies as data: chips, the links between them, and which logical rank lives on which chip.

Sources (AWS Neuron documentation, paths as in ``docs/hardware.md#sources``):

* ``trn2-arch`` -- about-neuron/arch/neuron-hardware/trn2-arch.rst (trn2.48xlarge 4x4 2D torus, chip i at
  (i//4, i%4) linked to its four torus neighbours; NeuronLink-v3 1.28 TB/s per chip: 1,024 GB/s inside the
  instance, 256 GB/s to the other instances of an UltraServer; UltraServer = 4 x trn2u.48xlarge, 4x4x4)
* ``trn1-arch`` -- about-neuron/arch/neuron-hardware/trn1-arch.rst (trn1.32xlarge: 16 chips, 2D torus,
  NeuronLink-v2 384 GB/s per chip)
* ``trn3-arch`` -- about-neuron/arch/neuron-hardware/trn3-arch.rst (Gen1 UltraServer 64 chips, Gen2 144 chips = 36
  servers x 4, all-to-all through NeuronSwitch-v1; NeuronLink-v4 2,048 GiB/s per device; EFA 12,800 / 28,800 Gbps)
* ``rt-coll`` -- neuron-runtime/about/collectives.rst (EFA: 800 Gbps per trn1.32xlarge, 3.2 Tbps per trn2.48xlarge)
* ``intranode`` -- neuron-runtime/explore/intranode-collective-comm.rst (per-hop latency of Ring/KangaRing about
  1-2 us, HBM-load dependent)
* ``internode`` -- neuron-runtime/explore/internode-collective-comm.rst (inter-node hop latency about 15 us)

Modelling choices (assumptions, not published): a chip's NeuronLink figure is split evenly over its links and each
link carries that share in each direction at once (full duplex); switched topologies (Trn3) are non-blocking, each
chip having one port of its NeuronLink-v4 figure into the switch and one out; an instance's EFA bandwidth is split
evenly over its chips; a transfer between two ranks of one chip is limited by the sending rank's DMA engines and
the chip's HBM, not by a link.

Bandwidths are in bytes per ns (= GB/s); latencies in ns.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from types import MappingProxyType
from typing import Mapping

from ..targets import TRN1, TRN2, TRN3, Target

__all__ = ["Topology", "TOPOLOGIES", "MACHINE_ALIASES", "machine_name", "get_topology", "Placement", "GiB_per_s"]

GiB_per_s = 1024 ** 3 / 1e9      # one GiB/s in bytes per ns

INTRA_HOP_NS = 1500.0    # intranode: "per-hop latency of Ring/KangaRing is about 1-2 us"; the midpoint
EFA_HOP_NS = 15000.0     # internode: "inter-node hop latency about 15 us"


@dataclasses.dataclass(frozen=True)
class Topology:
    """One scale-up domain (chips joined by NeuronLink, as a torus or through switches), repeated ``nodes`` times
    and joined by EFA.  Immutable; :meth:`with_nodes` / :meth:`with_lnc` give variants."""

    name: str
    target: Target = dataclasses.field(compare=False)   # the name identifies it (Target is not hashable)
    dims: tuple                  # torus extents, e.g. (4, 4) or (4, 4, 4); () for a switched domain
    chips_per_domain: int
    dim_link_bytes_per_ns: tuple  # per torus dimension: one direction of one link
    switch_port_bytes_per_ns: float   # switched domains: each chip's port (each direction); 0 for a torus
    efa_bytes_per_ns_per_chip: float
    nodes: int = 1
    lnc: int | None = None       # None: the target's default
    hop_ns: float = INTRA_HOP_NS
    efa_hop_ns: float = EFA_HOP_NS
    sources: Mapping = dataclasses.field(default_factory=dict, compare=False, hash=False)

    # -- derived ---------------------------------------------------------------------------------------------
    @property
    def logical_cores_per_chip(self) -> int:
        lnc = self.lnc or self.target.default_lnc
        if lnc not in self.target.allowed_lnc:
            raise ValueError(f"topology {self.name}: LNC={lnc} is not allowed on {self.target.name} "
                             f"(allowed {self.target.allowed_lnc})")
        return self.target.physical_cores_per_chip // lnc

    @property
    def effective_lnc(self) -> int:
        return self.lnc or self.target.default_lnc

    @property
    def chips(self) -> int:
        return self.chips_per_domain * self.nodes

    @property
    def ranks(self) -> int:
        return self.chips * self.logical_cores_per_chip

    @property
    def hbm_bytes_per_ns(self) -> float:
        return self.target.hbm_peak_bytes_per_s / 1e9

    @property
    def rank_dma_bytes_per_ns(self) -> float:
        """A logical core drives the DMA engines of its ``lnc`` physical cores (targets.py: practical rate)."""
        return self.target.dma_bytes_per_ns_per_core * self.effective_lnc

    def with_nodes(self, nodes: int) -> "Topology":
        if int(nodes) != nodes or nodes < 1:
            raise ValueError(f"nodes must be a positive integer, got {nodes!r}")
        name = self.name.split(" x")[0] + (f" x{int(nodes)}" if nodes > 1 else "")
        return dataclasses.replace(self, nodes=int(nodes), name=name)

    def with_lnc(self, lnc: int) -> "Topology":
        t = dataclasses.replace(self, lnc=int(lnc))
        t.logical_cores_per_chip  # validates
        return t

    # -- geometry --------------------------------------------------------------------------------------------
    def coords(self, chip_in_domain: int) -> tuple:
        """Torus coordinates, last dimension fastest: trn2.48xlarge chip i is at (i // 4, i % 4) (trn2-arch)."""
        out = []
        for d in reversed(self.dims):
            out.append(chip_in_domain % d)
            chip_in_domain //= d
        return tuple(reversed(out))

    def chip_at(self, coords: tuple) -> int:
        i = 0
        for c, d in zip(coords, self.dims):
            i = i * d + (c % d)
        return i

    def neighbours(self, chip_in_domain: int) -> list:
        """The chips one NeuronLink away (torus only), as the documented neighbour map gives them."""
        if not self.dims:
            return [c for c in range(self.chips_per_domain) if c != chip_in_domain]
        x = self.coords(chip_in_domain)
        out = []
        for k, d in enumerate(self.dims):
            for s in (-1, 1):
                y = list(x)
                y[k] = (y[k] + s) % d
                c = self.chip_at(tuple(y))
                if c != chip_in_domain and c not in out:
                    out.append(c)
        return out

    def route(self, src_chip: int, dst_chip: int) -> tuple:
        """The resources a transfer from ``src_chip`` to ``dst_chip`` (global chip numbers) crosses, and whether
        it leaves the scale-up domain.  Torus: dimension-order routing along the shorter way round each ring
        (ties go the positive way).  Switch: the source's up port and the destination's down port.  Across
        domains: the source chip's EFA out and the destination chip's EFA in."""
        return _route(self, src_chip, dst_chip)

    def resource_bandwidth(self, res: tuple) -> float:
        kind = res[0]
        if kind == "link":
            return self.dim_link_bytes_per_ns[res[3]]
        if kind in ("up", "down"):
            return self.switch_port_bytes_per_ns
        if kind in ("efa_out", "efa_in"):
            return self.efa_bytes_per_ns_per_chip
        if kind == "hbm":
            return self.hbm_bytes_per_ns
        if kind == "dma":
            return self.rank_dma_bytes_per_ns
        raise KeyError(res)

    def hamiltonian_order(self) -> list:
        """Chips of one domain in an order where consecutive chips (and last to first) are NeuronLink
        neighbours: a boustrophedon walk of the torus (row by row, then layer by layer)."""
        if not self.dims:
            return list(range(self.chips_per_domain))
        return [self.chip_at(c) for c in _snake(self.dims)]

    def describe(self) -> str:
        lines = [f"{self.name}: {self.target.name}, {self.chips} chips "
                 f"({self.nodes} x {self.chips_per_domain}), LNC={self.effective_lnc}, "
                 f"{self.logical_cores_per_chip} ranks per chip, {self.ranks} ranks"]
        if self.dims:
            lines.append(f"  torus {'x'.join(map(str, self.dims))}, link per direction "
                         + ", ".join(f"{b:g} GB/s" for b in self.dim_link_bytes_per_ns))
        else:
            lines.append(f"  switched, {self.switch_port_bytes_per_ns:g} GB/s per chip port")
        lines.append(f"  EFA {self.efa_bytes_per_ns_per_chip:g} GB/s per chip; hop latency "
                     f"{self.hop_ns / 1e3:g} us (NeuronLink), {self.efa_hop_ns / 1e3:g} us (EFA)")
        for k, v in self.sources.items():
            lines.append(f"  {k}: {v}")
        return "\n".join(lines)


def _snake(dims):
    if len(dims) == 1:
        return [(i,) for i in range(dims[0])]
    inner = _snake(dims[1:])
    out = []
    for i in range(dims[0]):
        seq = inner if i % 2 == 0 else list(reversed(inner))
        out.extend((i,) + c for c in seq)
    return out


@functools.lru_cache(maxsize=200_000)
def _route(topo, src_chip, dst_chip):
    if src_chip == dst_chip:
        return (), False
    n = topo.chips_per_domain
    sd, dd = divmod(src_chip, n), divmod(dst_chip, n)
    if sd[0] != dd[0]:
        return (("efa_out", src_chip), ("efa_in", dst_chip)), True
    base = sd[0] * n
    if not topo.dims:
        return (("up", src_chip), ("down", dst_chip)), False
    x = list(topo.coords(sd[1]))
    y = topo.coords(dd[1])
    res = []
    for k, d in enumerate(topo.dims):
        fwd = (y[k] - x[k]) % d
        step = 1 if fwd <= d - fwd else -1
        while x[k] != y[k]:
            a = topo.chip_at(tuple(x))
            x[k] = (x[k] + step) % d
            b = topo.chip_at(tuple(x))
            res.append(("link", base + a, base + b, k))
    return tuple(res), False


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where each of ``nranks`` ranks lives: ``nodes`` instances (domains) share the ranks equally (as
    nccom-test's ``--nnodes`` divides its workers); inside a node ranks fill chips in order, ``lnc``-sized
    logical cores per chip."""

    topology: Topology
    nranks: int

    def __post_init__(self):
        t = self.topology
        if self.nranks < 1:
            raise ValueError(f"need at least one rank, got {self.nranks}")
        if self.nranks % t.nodes:
            raise ValueError(f"{self.nranks} ranks cannot be divided equally over {t.nodes} nodes")
        per_node = self.nranks // t.nodes
        cap = t.chips_per_domain * t.logical_cores_per_chip
        if per_node > cap:
            raise ValueError(f"{per_node} ranks per node exceed {t.name}'s {cap} logical cores per node "
                             f"({t.chips_per_domain} chips x {t.logical_cores_per_chip} at LNC={t.effective_lnc})")

    @property
    def ranks_per_node(self) -> int:
        return self.nranks // self.topology.nodes

    def chip(self, rank: int) -> int:
        t = self.topology
        node, r = divmod(rank, self.ranks_per_node)
        return node * t.chips_per_domain + r // t.logical_cores_per_chip

    def local(self, rank: int) -> int:
        return (rank % self.ranks_per_node) % self.topology.logical_cores_per_chip

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node


# -- the topologies ------------------------------------------------------------------------------------------
def _trn1_32xlarge():
    return Topology(
        name="trn1.32xlarge", target=TRN1, dims=(4, 4), chips_per_domain=16,
        # trn1-arch: NeuronLink-v2 384 GB/s per chip over its 4 torus links (assumption: even split, per direction)
        dim_link_bytes_per_ns=(384 / 4, 384 / 4),
        switch_port_bytes_per_ns=0.0,
        # rt-coll: 800 Gbps EFA per trn1.32xlarge, over its 16 chips
        efa_bytes_per_ns_per_chip=800 / 8 / 16,
        sources=MappingProxyType({
            "torus": "trn1-arch (16 chips, 2D torus; the 4x4 neighbour map of trn2 assumed)",
            "link": "NeuronLink-v2 384 GB/s per chip / 4 links (trn1-arch)",
            "efa": "800 Gbps per instance (neuron-runtime/about/collectives.rst)"}))


def _trn2_48xlarge():
    return Topology(
        name="trn2.48xlarge", target=TRN2, dims=(4, 4), chips_per_domain=16,
        # trn2-arch: 1,024 GB/s of NeuronLink-v3 inside the instance per chip, over 4 torus links
        dim_link_bytes_per_ns=(1024 / 4, 1024 / 4),
        switch_port_bytes_per_ns=0.0,
        # rt-coll: 3.2 Tbps EFA per trn2.48xlarge = 200 Gbps per chip
        efa_bytes_per_ns_per_chip=200 / 8,
        sources=MappingProxyType({
            "torus": "trn2-arch: 4x4, chip i at (i//4, i%4) links to ((r+-1)%4, c), (r, (c+-1)%4)",
            "link": "NeuronLink-v3 1,024 GB/s per chip inside the instance / 4 links (trn2-arch)",
            "efa": "3.2 Tbps per instance, 200 Gbps per chip (neuron-runtime/about/collectives.rst)"}))


def _trn2_ultraserver():
    return Topology(
        name="trn2-ultraserver", target=TRN2, dims=(4, 4, 4), chips_per_domain=64,
        # trn2-arch: 256 GB/s per chip to the other instances of the UltraServer, over its 2 z-links
        dim_link_bytes_per_ns=(256 / 2, 1024 / 4, 1024 / 4),
        switch_port_bytes_per_ns=0.0,
        efa_bytes_per_ns_per_chip=200 / 8,       # rt-coll: 200 Gbps per chip
        sources=MappingProxyType({
            "torus": "trn2-arch: 4 x trn2u.48xlarge, 4x4x4 3D torus (z = instance)",
            "link": "x/y: 1,024 GB/s / 4 links; z: 256 GB/s to other instances / 2 links (trn2-arch)",
            "efa": "200 Gbps per chip (neuron-runtime/about/collectives.rst)"}))


def _trn3_gen1():
    return Topology(
        name="trn3-gen1-ultraserver", target=TRN3, dims=(), chips_per_domain=64,
        dim_link_bytes_per_ns=(),
        switch_port_bytes_per_ns=2048 * GiB_per_s,   # trn3-arch: NeuronLink-v4 2,048 GiB/s per device
        efa_bytes_per_ns_per_chip=12_800 / 8 / 64,   # trn3-arch: 12,800 Gbps EFA per Gen1 UltraServer
        sources=MappingProxyType({
            "switch": "trn3-arch: 64 chips all-to-all through NeuronSwitch-v1 (non-blocking assumed)",
            "link": "NeuronLink-v4 2,048 GiB/s per device (trn3-arch)",
            "efa": "12,800 Gbps per UltraServer (trn3-arch)"}))


def _trn3_gen2():
    return Topology(
        name="trn3-gen2-ultraserver", target=TRN3, dims=(), chips_per_domain=144,
        dim_link_bytes_per_ns=(),
        switch_port_bytes_per_ns=2048 * GiB_per_s,   # trn3-arch: NeuronLink-v4 2,048 GiB/s per device
        efa_bytes_per_ns_per_chip=28_800 / 8 / 144,  # trn3-arch: 28,800 Gbps EFA per Gen2 UltraServer
        sources=MappingProxyType({
            "switch": "trn3-arch: 36 servers x 4 chips, two switch levels (NeuronSwitch-v1), non-blocking assumed",
            "link": "NeuronLink-v4 2,048 GiB/s per device (trn3-arch)",
            "efa": "28,800 Gbps per UltraServer (trn3-arch)"}))


TOPOLOGIES: Mapping[str, Topology] = MappingProxyType({
    "trn1.32xlarge": _trn1_32xlarge(),
    "trn2.48xlarge": _trn2_48xlarge(),
    "trn2-ultraserver": _trn2_ultraserver(),
    "trn3-gen1-ultraserver": _trn3_gen1(),
    "trn3-gen2-ultraserver": _trn3_gen2(),
})

# One name per machine (the keys of TOPOLOGIES), used by every command (nccom-test --topology/--instance, estimate
# --instance, TRNSIM_TOPOLOGY); these aliases are accepted everywhere and mapped to it.  A Trn2 UltraServer is four
# trn2u.48xlarge instances (trn2-arch), and the unit nccom-test and estimate both mean by that name is the
# UltraServer, so trn2u.48xlarge names trn2-ultraserver.
MACHINE_ALIASES: Mapping[str, str] = MappingProxyType({
    "trn1": "trn1.32xlarge", "trn1n.32xlarge": "trn1.32xlarge",
    "trn2": "trn2.48xlarge",
    "trn2u": "trn2-ultraserver", "trn2u.48xlarge": "trn2-ultraserver", "trn2-us": "trn2-ultraserver",
    "trn3": "trn3-gen1-ultraserver", "trn3-gen1": "trn3-gen1-ultraserver",
    "trn3-gen2": "trn3-gen2-ultraserver",
})


def machine_name(name) -> str:
    """The one canonical name of a machine (a key of :data:`TOPOLOGIES`) for ``name`` or any of its aliases
    (case and surrounding spaces ignored); a clear error naming the accepted names otherwise."""
    key = str(name).strip().lower()
    key = MACHINE_ALIASES.get(key, key)
    if key not in TOPOLOGIES:
        raise ValueError(f"unknown machine {name!r}: expected one of {', '.join(TOPOLOGIES)} "
                         f"(aliases: {', '.join(f'{a} = {b}' for a, b in MACHINE_ALIASES.items())})")
    return key


def get_topology(name: "str | Topology" = "trn2.48xlarge", nodes: int = 1, lnc: int | None = None) -> Topology:
    """A topology by machine name (``trn2.48xlarge``, ``trn2-ultraserver``, ``trn1.32xlarge``,
    ``trn3-gen1-ultraserver``, ``trn3-gen2-ultraserver``, or an alias in :data:`MACHINE_ALIASES`), ``nodes`` of
    them joined by EFA, at the given LNC (default: the target's)."""
    if isinstance(name, Topology):
        t = name
    else:
        t = TOPOLOGIES[machine_name(name)]
    if nodes != 1 or t.nodes != 1:
        t = t.with_nodes(nodes)
    if lnc is not None:
        t = t.with_lnc(lnc)
    return t


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def log2(n: int) -> int:
    return int(round(math.log2(n)))
