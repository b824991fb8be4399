"""The physical bound of a collective: the least time any algorithm could take on the paths its ranks sit on.

A collective of ``size`` bytes (nccom-test's convention, see :mod:`.algorithms`) among ``n`` ranks, ``r`` of them
on each chip it touches and ``q`` on each node, must at least

* move across each chip's NeuronLinks (or switch port) the bytes that chip cannot make itself:
  all-gather ``(n - r) C`` in (every foreign chunk arrives once, and can be broadcast inside the chip),
  reduce-scatter ``(n - r) C`` out (the chip's contribution to every foreign chunk leaves once, pre-reduced),
  all-reduce both of these ``2 (n - r) C`` (the classic bandwidth-optimal bound on chips), all-to-all
  ``r (n - r) C`` (nothing combines);
* move across each node's EFA the same quantities with ``q`` in place of ``r``;
* read and write each chip's HBM at least: all-gather ``r (n - 1) C`` writes (the foreign chunks landing in each
  local output) plus ``r C`` reads (each local chunk read once); reduce-scatter ``r S`` reads (every input byte
  once) plus ``r C`` writes; all-reduce ``r S`` reads plus ``r S`` writes; all-to-all ``r (n - 1) C`` reads and as
  many writes.

``C = size / n``.  Each chip's in (or out) NeuronLink bandwidth is the sum of its links' one-direction bandwidth
(torus) or its switch port; a node's EFA is its chips' EFA together; HBM is the chip's peak (:mod:`.topology`,
with sources).  The time bound is the largest of these byte counts over their bandwidth, and the bus-bandwidth
bound is ``size x bus_factor / time bound``: no schedule, however clever, can beat it, so
``tests/collectives/test_bounds.py`` asserts that the simulated busbw never does, for every topology, size and
collective.  Bandwidths in bytes per ns (= GB/s, decimal).
"""

from __future__ import annotations

import dataclasses

from .topology import Placement, Topology

__all__ = ["Bound", "physical_bound"]


@dataclasses.dataclass(frozen=True)
class Bound:
    time_ns: float           # least time for the bytes (no latency)
    busbw_bytes_per_ns: float
    limit: str               # which path sets it: "NeuronLink", "EFA" or "HBM"


def _chip_link_bytes_per_ns(t: Topology) -> float:
    """One direction of all of a chip's NeuronLinks together (torus: two links per dimension of extent > 2, one
    for extent 2, none for 1), or its switch port."""
    if not t.dims:
        return t.switch_port_bytes_per_ns
    total = 0.0
    for d, bw in zip(t.dims, t.dim_link_bytes_per_ns):
        total += bw * (2 if d > 2 else (1 if d == 2 else 0))
    return total


def physical_bound(op: str, size: float, placement: Placement, group) -> Bound:
    """The bound of ``op`` (all_reduce, all_gather, reduce_scatter, all_to_all) of ``size`` bytes among
    ``group`` (rank ids placed by ``placement``)."""
    from .algorithms import bus_factor
    t = placement.topology
    grp = tuple(group)
    n = len(grp)
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        raise ValueError(f"no physical bound for {op!r}: all_reduce, all_gather, reduce_scatter or all_to_all")
    if n < 2 or size <= 0:
        return Bound(0.0, float("inf"), "none")
    per_chip, per_node = {}, {}
    for g in grp:
        per_chip[placement.chip(g)] = per_chip.get(placement.chip(g), 0) + 1
        per_node[placement.node(g)] = per_node.get(placement.node(g), 0) + 1
    c = size / n

    def crossing(k):      # bytes that must cross the boundary of a part holding k of the group's ranks
        if k == n:
            return 0.0
        return {"all_gather": (n - k) * c, "reduce_scatter": (n - k) * c, "all_reduce": 2 * (n - k) * c,
                "all_to_all": k * (n - k) * c}[op]

    def hbm(k):
        return {"all_gather": k * (n - 1) * c + k * c, "reduce_scatter": k * size + k * c,
                "all_reduce": 2 * k * size, "all_to_all": 2 * k * (n - 1) * c}[op]

    cands = []
    link = _chip_link_bytes_per_ns(t)
    for k in per_chip.values():
        if k < n and link > 0:
            cands.append((crossing(k) / link, "NeuronLink"))
        cands.append((hbm(k) / t.hbm_bytes_per_ns, "HBM"))
    if len(per_node) > 1:
        efa = t.efa_bytes_per_ns_per_chip * t.chips_per_domain
        for k in per_node.values():
            cands.append((crossing(k) / efa, "EFA"))
    tmin, limit = max(cands)
    return Bound(tmin, size * bus_factor(op, n) / tmin, limit)
