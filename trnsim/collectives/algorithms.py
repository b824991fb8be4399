"""The Neuron runtime's collective algorithms as step schedules (see :mod:`.schedule`), and the choice among them.

Source for the algorithms and the size ranges: neuron-runtime/explore/intranode-collective-comm.rst ("Sweet Range
(Empirically)": Mesh below 1 MB, RDH 1-56 MB, KangaRing above 56 MB, Ring as the fallback; KangaRing only for
groups holding every rank of each chip they touch) and internode-collective-comm.rst (across instances:
hierarchical, reduce-scatter inside, all-reduce across, all-gather inside).  "MB" is read as MiB (an assumption:
the page does not say).

Conventions (nccom-test's, after nccl-tests): ``size`` is the bytes of the larger buffer of one rank: all-reduce
and all-to-all the buffer, all-gather the output, reduce-scatter the input; send/recv, permute and broadcast the
message.  ``C = size / N`` is the chunk of one rank.

How each algorithm is modelled (the published text gives the pattern, not the microcode):

* **Ring**: ranks in a cycle that walks the torus chip by chip (:meth:`Topology.hamiltonian_order`), ranks of a
  chip consecutive; two cycles in opposite directions each carry half of every chunk (the page: "multiple cycles
  with mutually exclusive wires").  All-gather: N-1 steps, each rank forwards C (one read, one write).
  Reduce-scatter: N-1 steps, each forwards a partial sum (two reads: the partial and its own chunk; one write).
* **KangaRing**: ranks of a chip paired (primary, secondary); a ring over the primaries (N/2), two opposite
  cycles; each step a primary moves the pair's 2C.  All-gather: one read, two writes (downstream and its own
  secondary: the duplicated write).  Reduce-scatter: three reads (received partial, own, secondary), one write.
* **Mesh**: all-gather in two steps: every chip's chunks go straight to every other chip (routed, so links are
  over-subscribed), the chip's ranks splitting the destinations; then a broadcast inside each chip.
  Reduce-scatter: each rank reduces its chip's chunks for its destinations and writes them straight over; then
  each rank reduces what it received.  All-reduce: reduce-scatter then all-gather.  All-to-all: one step.
* **RDH**: reduce-scatter: a reduction inside each chip (each local rank collects its inter-chip group's chunks),
  then recursive halving between the chips of each same-local-index group along the hypercube dimensions of the
  torus (a 4-ring is a 2-cube under the Gray code 0,1,3,2).  All-gather: recursive doubling, then a broadcast
  inside each chip.  Needs a power-of-two chip count forming a sub-cube; otherwise Ring.
* **Hierarchical** (several nodes): reduce-scatter inside each node, a ring all-reduce across nodes between the
  ranks at the same position, all-gather inside each node; all-gather and reduce-scatter use the two halves.
"""

from __future__ import annotations

import dataclasses
import functools

from .schedule import Schedule, StepBuilder, fixed_costs
from .topology import Placement, Topology, get_topology, is_power_of_two

MiB = 1024 * 1024
MESH_MAX_BYTES = 1 * MiB     # intranode: Mesh sweet range "< 1MB"
RDH_MAX_BYTES = 56 * MiB     # intranode: RDH "1-56MB", KangaRing ">56MB"

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "permute", "broadcast")
ALGORITHMS = ("mesh", "rdh", "kangaring", "ring", "hierarchical", "direct")

# nccom-test's bus-bandwidth factors (tools/neuron-sys-tools/nccom-test.rst, after nccl-tests' PERFORMANCE.md)
def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("send_recv", "permute", "broadcast"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


@dataclasses.dataclass(frozen=True)
class CollectiveCost:
    op: str
    algorithm: str
    size: int
    nranks: int
    time_ns: float
    schedule: Schedule

    @property
    def algbw_bytes_per_ns(self):
        return self.size / self.time_ns if self.time_ns else float("inf")

    @property
    def busbw_bytes_per_ns(self):
        return self.algbw_bytes_per_ns * bus_factor(self.op, self.nranks)


# -- helpers -------------------------------------------------------------------------------------------------
class _Group:
    def __init__(self, placement: Placement, ranks: tuple):
        self.p = placement
        self.t = placement.topology
        self.ranks = ranks
        self.n = len(ranks)
        by_chip = {}
        for r in ranks:
            by_chip.setdefault(placement.chip(r), []).append(r)
        pos = {c: i for i, c in enumerate(self.t.hamiltonian_order())}
        n_dom = self.t.chips_per_domain
        self.chips = sorted(by_chip, key=lambda c: (c // n_dom, pos[c % n_dom]))
        self.by_chip = {c: sorted(by_chip[c], key=placement.local) for c in self.chips}
        self.ring = [r for c in self.chips for r in self.by_chip[c]]
        self.per_chip = {len(v) for v in self.by_chip.values()}

    def whole_chips(self) -> bool:
        rpc = self.t.logical_cores_per_chip
        return all(len(v) == rpc for v in self.by_chip.values())

    def nodes(self):
        out = {}
        for c in self.chips:
            out.setdefault(c // self.t.chips_per_domain, []).append(c)
        return out


def _ring_steps(g: _Group, order, op, frac, label):
    """Bidirectional ring over ``order`` (rank ids); ``op`` is all_gather or reduce_scatter."""
    n = len(order)
    if n < 2:
        return []
    reads = 1.0 if op == "all_gather" else 2.0
    b = StepBuilder(g.p, f"{label} step", frac)
    for i, r in enumerate(order):
        b.send(r, order[(i + 1) % n], 0.5, reads=reads)
        b.send(r, order[(i - 1) % n], 0.5, reads=reads)
    return _repeat(b.build(), n - 1)


def _repeat(step, k):
    """Every step of a ring moves the same amounts over the same links: build one, repeat it."""
    return [dataclasses.replace(step, label=f"{step.label} {s + 1}/{k}") for s in range(k)]


def _kangaring_steps(g: _Group, op, frac, label):
    """Two opposite cycles over the chips' rank pairs (a, b); a is primary in the forward cycle and b in the
    backward one (the page: primaries and secondaries alternate between cycles, "so that each rank is active in
    half of them"), each cycle carrying one unit per step.  Needs at least two chips (applicable())."""
    pairs = []
    for c in g.chips:
        rs = g.by_chip[c]
        pairs += [(rs[k], rs[k + 1]) for k in range(0, len(rs), 2)]
    n = len(pairs)
    steps = []   # reduce-scatter: the primary reads its secondary's chunks itself (3R1W), nothing moves first
    b = StepBuilder(g.p, f"{label} step", frac)
    for i, (a, s) in enumerate(pairs):
        for src, dst in ((a, pairs[(i + 1) % n][0]), (s, pairs[(i - 1) % n][1])):
            if op == "all_gather":
                b.send(src, dst, 1.0, reads=1.0, writes=1.0, src_writes=1.0)   # 1R2W: duplicated write
            else:
                b.send(src, dst, 1.0, reads=3.0, writes=1.0)                   # 3R1W
    steps += _repeat(b.build(), n - 1)
    b = StepBuilder(g.p, f"{label} secondaries", frac)
    for a, s in pairs:      # each cycle's primary hands its secondary the last chunk (or reduced chunk)
        for src, dst in ((a, s), (s, a)):
            if op == "all_gather":
                b.send(src, dst, 0.5, reads=1.0, writes=1.0)
            else:
                b.send(src, dst, 0.5, reads=2.0, writes=1.0)
    steps.append(b.build())
    return steps


def _mesh_steps(g: _Group, op, frac, label):
    steps = []
    b = StepBuilder(g.p, f"{label} mesh to chips", frac)
    received = {r: 0.0 for r in g.ranks}
    for c in g.chips:
        src = g.by_chip[c]
        others = [d for d in g.chips if d != c]
        for j, d in enumerate(others):
            k = j % len(src)
            dst_ranks = g.by_chip[d]
            if op == "all_gather":
                dst = dst_ranks[k % len(dst_ranks)]
                b.send(src[k], dst, len(src), reads=1.0, writes=1.0)
                received[dst] += len(src)
            else:   # reduce_scatter: one reduced chunk per destination rank, made from the chip's chunks
                for dst in dst_ranks:
                    b.send(src[k], dst, 1.0, reads=float(len(src)), writes=1.0)
    steps.append(b.build())
    b = StepBuilder(g.p, f"{label} inside chips", frac)
    for c in g.chips:
        rs = g.by_chip[c]
        for r in rs:
            if op == "all_gather":
                for q in rs:
                    if q != r:
                        b.send(r, q, received[r] + 1.0)     # what it received, and its own chunk
            else:
                b.local(r, reads=float(len(g.chips) - 1 + len(rs)), writes=1.0)
    if b.moves:
        steps.append(b.build())
    return steps


def _gray(x):
    return x ^ (x >> 1)


def _cube_label(t: Topology, chip_in_domain: int):
    if not t.dims:
        return chip_in_domain
    label = 0
    for x, d in zip(t.coords(chip_in_domain), t.dims):
        if d not in (1, 2, 4):
            return None
        bits = {1: 0, 2: 1, 4: 2}[d]
        label = (label << bits) | _gray(x)
    return label


def _rdh_dims(g: _Group):
    """The hypercube bits along which the group's chips differ, or None when RDH does not apply."""
    if len(g.nodes()) != 1 or len(g.per_chip) != 1 or not is_power_of_two(len(g.chips)):
        return None
    n_dom = g.t.chips_per_domain
    labels = [_cube_label(g.t, c % n_dom) for c in g.chips]
    if any(lb is None for lb in labels):
        return None
    var = 0
    for lb in labels:
        var |= lb ^ labels[0]
    bits = [i for i in range(var.bit_length()) if var >> i & 1]
    if len(set(labels)) != len(labels) or 2 ** len(bits) != len(labels):
        return None
    return labels, bits


def _rdh_steps(g: _Group, op, frac, label):
    labels, bits = _rdh_dims(g)
    chip_of = dict(zip(labels, g.chips))
    nchips = len(g.chips)
    rpc = len(g.by_chip[g.chips[0]])
    steps = []

    def intra(lbl):
        b = StepBuilder(g.p, f"{label} {lbl}", frac)
        for c in g.chips:
            rs = g.by_chip[c]
            for r in rs:
                for q in rs:
                    if q != r:
                        b.send(r, q, float(nchips), reads=1.0, writes=1.0)
                if op == "reduce_scatter":
                    b.local(r, reads=float(nchips * rpc), writes=float(nchips))
        return b.build() if b.moves else None

    def cube(order):
        out = []
        for s, bit in enumerate(order):
            units = nchips / 2 ** (s + 1) if op == "reduce_scatter" else 2 ** s
            b = StepBuilder(g.p, f"{label} dim {bit}", frac)
            for lb, c in zip(labels, g.chips):
                peer = chip_of[lb ^ (1 << bit)]
                for k, r in enumerate(g.by_chip[c]):
                    b.send(r, g.by_chip[peer][k], float(units), reads=2.0 if op == "reduce_scatter" else 1.0)
            out.append(b.build())
        return out

    if op == "reduce_scatter":
        st = intra("reduce inside chips")
        if st:
            steps.append(st)
        steps += cube(bits)
    else:
        steps += cube(bits)
        st = intra("broadcast inside chips")
        if st:
            steps.append(st)
    return steps


def _direct_steps(g: _Group, pairs, frac, label):
    b = StepBuilder(g.p, label, frac)
    for s, d in pairs:
        if s != d:
            b.send(s, d, 1.0)
    return [b.build()]


# -- schedules -----------------------------------------------------------------------------------------------
def _half(g: _Group, op, algorithm, frac):
    """All-gather or reduce-scatter with chunk ``frac * size`` inside one node's group."""
    if g.n == 1:
        return []
    if algorithm == "ring":
        return _ring_steps(g, g.ring, op, frac, f"ring {op}")
    if algorithm == "kangaring":
        return _kangaring_steps(g, op, frac, f"kangaring {op}")
    if algorithm == "mesh":
        return _mesh_steps(g, op, frac, f"mesh {op}")
    if algorithm == "rdh":
        return _rdh_steps(g, op, frac, f"rdh {op}")
    raise ValueError(f"algorithm {algorithm!r} does not apply to {op}")


def applicable(g: _Group, algorithm: str, op: str) -> bool:
    if algorithm == "kangaring":
        # a cycle over the primaries: at least two chips (one chip's pair has no ring to run)
        return (len(g.nodes()) == 1 and len(g.chips) > 1 and g.whole_chips() and g.t.logical_cores_per_chip % 2 == 0
                and op in ("all_reduce", "all_gather", "reduce_scatter"))
    if algorithm == "rdh":
        return _rdh_dims(g) is not None and op in ("all_reduce", "all_gather", "reduce_scatter")
    if algorithm == "hierarchical":
        return len(g.nodes()) > 1 and op in ("all_reduce", "all_gather", "reduce_scatter")
    if algorithm in ("mesh", "ring"):
        return True
    if algorithm == "direct":
        return op in ("send_recv", "permute")
    return False


def choose_algorithm(g: _Group, op: str, size: int) -> str:
    """The runtime's pick by message size (intranode page's sweet ranges; hierarchical across nodes)."""
    if op in ("send_recv", "permute"):
        return "direct"
    if op == "all_to_all":
        return "mesh"
    if len(g.nodes()) > 1 and op != "broadcast":
        return "hierarchical"
    if size < MESH_MAX_BYTES:
        return "mesh"
    if size < RDH_MAX_BYTES and applicable(g, "rdh", op):
        return "rdh"
    if size >= RDH_MAX_BYTES and applicable(g, "kangaring", op):
        return "kangaring"
    return "ring"


def _intra_for(size, g, op):
    if size < MESH_MAX_BYTES:
        return "mesh"
    if size < RDH_MAX_BYTES and applicable(g, "rdh", op):
        return "rdh"
    if applicable(g, "kangaring", op):
        return "kangaring"
    return "ring"


@functools.lru_cache(maxsize=4096)
def build_schedule(topology: Topology, nranks: int, group: tuple, op: str, algorithm: str,
                   intra: str = "ring") -> Schedule:
    p = Placement(topology, nranks)
    g = _Group(p, group)
    n = g.n
    if not applicable(g, algorithm, op):
        raise ValueError(f"algorithm {algorithm!r} does not apply to {op} on {n} ranks of {topology.name} "
                         f"(chips {len(g.chips)}, nodes {len(g.nodes())})")
    steps = []
    if op in ("all_gather", "reduce_scatter"):
        if algorithm == "hierarchical":
            steps = _hier_half(g, op, 1.0 / n, intra)
        else:
            steps = _half(g, op, algorithm, 1.0 / n)
    elif op == "all_reduce":
        if algorithm == "hierarchical":
            steps = _hier_half(g, "reduce_scatter", 1.0 / n, intra) + _hier_half(g, "all_gather", 1.0 / n, intra)
        else:
            steps = _half(g, "reduce_scatter", algorithm, 1.0 / n) + _half(g, "all_gather", algorithm, 1.0 / n)
    elif op == "all_to_all":
        b = StepBuilder(p, "all-to-all", 1.0 / n)
        for r in group:
            for q in group:
                if q != r:
                    b.send(r, q, 1.0)
        steps = [b.build()]
    elif op in ("send_recv", "permute"):
        steps = _direct_steps(g, [(group[i], group[(i + 1) % n]) for i in range(n)], 1.0, op)
    elif op == "broadcast":
        root = group[0]
        if algorithm == "mesh":
            b = StepBuilder(p, "broadcast from root", 1.0)
            for q in group[1:]:
                b.send(root, q, 1.0)
            steps = [b.build()]
        elif algorithm == "ring":   # scatter from the root, then a ring all-gather
            b = StepBuilder(p, "scatter from root", 1.0 / n)
            for q in group[1:]:
                b.send(root, q, 1.0)
            steps = [b.build()] + _ring_steps(g, g.ring, "all_gather", 1.0 / n, "ring all_gather")
        else:
            raise ValueError(f"algorithm {algorithm!r} does not apply to broadcast")
    else:
        raise ValueError(f"unknown collective {op!r}: expected one of {', '.join(OPS)}")
    steps = [s for s in steps if s.loads]      # a step with nothing to move (one chip's mesh) is not run
    fixed = fixed_costs(topology, len(g.nodes()) > 1) if n > 1 else ()
    return Schedule(op, algorithm if algorithm != "hierarchical" else f"hierarchical({intra})", n, tuple(steps),
                    fixed)


def _hier_half(g: _Group, op, frac, intra):
    """Across nodes: reduce-scatter = inside each node, then across nodes; all-gather the reverse."""
    nodes = g.nodes()
    nn = len(nodes)
    # the same position inside each node forms one cross-node ring
    per_node = [[r for c in cs for r in g.by_chip[c]] for _, cs in sorted(nodes.items())]
    k = len(per_node[0])
    if any(len(x) != k for x in per_node):
        raise ValueError("hierarchical collectives need the same number of ranks on every node")
    inner = []
    for x in per_node:
        inner.append(_Group(g.p, tuple(x)))
    inside = []
    if k > 1:
        # all nodes' inside steps run at the same time: merge step i of every node into one step
        per = [_half(gg, op, intra if applicable(gg, intra, op) else "ring", frac * nn) for gg in inner]
        for i in range(len(per[0])):
            inside.append(_merge([s[i] for s in per], g.p))
    across = []
    if nn > 1:
        rings = [[per_node[j][i] for j in range(nn)] for i in range(k)]
        per = [_ring_steps(g, ring, op, frac, f"across nodes {op}") for ring in rings]
        for i in range(len(per[0])):
            across.append(_merge([s[i] for s in per], g.p))
    return inside + across if op == "reduce_scatter" else across + inside


def _merge(steps, placement):
    from .schedule import Step
    loads = {}
    for s in steps:
        for res, u in s.loads:
            loads[res] = loads.get(res, 0.0) + u
    t = placement.topology
    worst, bott = 0.0, ()
    for res, u in loads.items():
        v = u / t.resource_bandwidth(res)
        if v > worst:
            worst, bott = v, res
    tail = max(s.tail_ns_per_unit_byte for s in steps)    # the merged steps are the same step on each node
    return Step(steps[0].label, max(s.latency_ns for s in steps), steps[0].unit_fraction, worst + tail, bott,
                tuple(sorted(loads.items())), tail)


# -- public entry ------------------------------------------------------------------------------------------
def collective_time(op: str, size: int, topology="trn2.48xlarge", nranks: int | None = None, group=None,
                    algorithm: str | None = None, nodes: int = 1, lnc: int | None = None) -> CollectiveCost:
    """Simulated time of one collective of ``size`` bytes (see the module's conventions) among ``group`` (global
    rank ids; default all ``nranks``) placed on ``topology`` (a name or :class:`Topology`), ``nodes`` of them.
    ``algorithm=None`` picks as the runtime does."""
    op = _canon(op)
    t = get_topology(topology, nodes=nodes, lnc=lnc) if not isinstance(topology, Topology) or nodes != 1 or lnc \
        else topology
    if nranks is None:
        nranks = t.ranks
    if int(size) != size or size < 0:
        raise ValueError(f"size must be a non-negative number of bytes, got {size!r}")
    grp = tuple(range(nranks)) if group is None else tuple(int(r) for r in group)
    bad = [r for r in grp if not 0 <= r < nranks]
    if bad or len(set(grp)) != len(grp):
        raise ValueError(f"group {list(grp)} must hold distinct ranks in [0, {nranks})")
    g = _Group(Placement(t, nranks), grp)
    algo = (algorithm or choose_algorithm(g, op, size)).lower()
    if algo not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    intra = _intra_for(size / max(len(g.nodes()), 1), _Group(Placement(t, nranks), _first_node(g)), op) \
        if algo == "hierarchical" else "ring"
    sch = build_schedule(t, nranks, grp, op, algo, intra)
    return CollectiveCost(op, sch.algorithm, int(size), len(grp), sch.time_ns(size), sch)


def _first_node(g):
    nodes = g.nodes()
    first = sorted(nodes)[0]
    return tuple(r for c in nodes[first] for r in g.by_chip[c])


_OP_ALIASES = {"allr": "all_reduce", "allreduce": "all_reduce", "all-reduce": "all_reduce",
               "allg": "all_gather", "allgather": "all_gather", "all-gather": "all_gather",
               "redsct": "reduce_scatter", "reducescatter": "reduce_scatter", "reduce-scatter": "reduce_scatter",
               "alltoall": "all_to_all", "all-to-all": "all_to_all", "a2a": "all_to_all",
               "sendrecv": "send_recv", "send-recv": "send_recv", "bcast": "broadcast"}


def _canon(op: str) -> str:
    k = str(op).strip().lower()
    k = _OP_ALIASES.get(k, k)
    if k not in OPS:
        raise ValueError(f"unknown collective {op!r}: expected one of {', '.join(OPS)} "
                         f"(or nccom-test's allr, allg, redsct, alltoall, sendrecv)")
    return k
