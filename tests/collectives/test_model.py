"""The collective timing model's claims: topology data, contention, the alpha-beta ring, the runtime's algorithm
switch points, hierarchical collectives across instances, HBM traffic of KangaRing, busbw bounds."""


import pytest

from trnsim.collectives import collective_time, get_topology, TOPOLOGIES
from trnsim.collectives.algorithms import MESH_MAX_BYTES, RDH_MAX_BYTES, build_schedule, bus_factor
from trnsim.collectives.schedule import StepBuilder
from trnsim.collectives.topology import Placement

MiB = 1 << 20
GiB = 1 << 30


def test_trn2_neighbour_map_is_the_documented_torus():
    t = get_topology("trn2.48xlarge")
    assert t.chips == 16 and t.logical_cores_per_chip == 4 and t.ranks == 64    # LNC=2: 4 logical per chip
    for i in range(16):
        r, c = i // 4, i % 4
        want = {((r + 1) % 4) * 4 + c, ((r - 1) % 4) * 4 + c, r * 4 + (c + 1) % 4, r * 4 + (c - 1) % 4}
        assert set(t.neighbours(i)) == want
    assert get_topology("trn2.48xlarge", lnc=1).ranks == 128


def test_ultraserver_and_trn3_shapes():
    us = get_topology("trn2-ultraserver")
    assert us.chips == 64 and us.dims == (4, 4, 4) and all(len(us.neighbours(i)) == 6 for i in range(64))
    assert get_topology("trn3-gen1-ultraserver").chips == 64
    assert get_topology("trn3-gen2-ultraserver").chips == 144
    # switched: every other chip is one switch traversal away
    t3 = get_topology("trn3")
    route, efa = t3.route(0, 63)
    assert route == (("up", 0), ("down", 63)) and not efa
    assert get_topology("trn2", nodes=4).chips == 64


def test_hamiltonian_order_is_a_cycle_of_neighbours():
    for name in ("trn2.48xlarge", "trn2-ultraserver", "trn1.32xlarge"):
        t = TOPOLOGIES[name]
        order = t.hamiltonian_order()
        assert sorted(order) == list(range(t.chips_per_domain))
        for a, b in zip(order, order[1:] + order[:1]):
            assert b in t.neighbours(a), (name, a, b)


def test_every_link_figure_has_a_source():
    for t in TOPOLOGIES.values():
        assert {"link", "efa"} <= set(t.sources)


def _one_unit(placement, sends):
    b = StepBuilder(placement, "test", 1.0)
    for s, d in sends:
        b.send(s, d, 1.0)
    return b.build()


def test_contention_two_transfers_on_one_link_share_it():
    t = get_topology("trn2.48xlarge")
    p = Placement(t, 64)
    link_bw = 1024 / 4
    # rank 0 and rank 1 live on chip 0; ranks 4 and 5 on chip 1, its neighbour
    one = _one_unit(p, [(0, 4)])
    assert one.bottleneck == ("link", 0, 1, 1) and one.ns_per_unit_byte == pytest.approx(1 / link_bw)
    two = _one_unit(p, [(0, 4), (1, 5)])
    assert two.ns_per_unit_byte == pytest.approx(2 / link_bw)          # each transfer gets half the link
    # the reverse direction is another wire (full duplex): no sharing
    both_ways = _one_unit(p, [(0, 4), (5, 1)])
    assert both_ways.ns_per_unit_byte == pytest.approx(1 / link_bw)
    # a routed transfer 0 -> 2 (two hops) shares link 1->2 with a transfer 1 -> 2
    routed = _one_unit(p, [(0, 8), (4, 9)])
    assert dict(routed.loads)[("link", 1, 2, 1)] == 2
    assert routed.ns_per_unit_byte == pytest.approx(2 / link_bw)
    size = 64 * MiB
    assert two.time_ns(size) - two.latency_ns == pytest.approx(2 * (one.time_ns(size) - one.latency_ns))


def test_ring_time_is_the_alpha_beta_formula():
    t = get_topology("trn2.48xlarge")
    group = tuple(range(0, 64, 4))          # one rank per chip: the ring's hops are all NeuronLinks
    n = len(group)
    alpha, beta = t.hop_ns, 1024 / 4       # hop latency; one direction of one link (bytes/ns)
    fixed = t.target.dma_fixed_ns + t.hop_ns   # CC core trigger + first DMA start; the entry handshake (one hop)
    for size in (n * 1024, 64 * MiB, GiB):
        c = size / n
        ag = collective_time("all_gather", size, t, nranks=64, group=group, algorithm="ring")
        # two opposite cycles each carry half a chunk per step
        link = c / (2 * beta)
        assert ag.time_ns == pytest.approx(fixed + (n - 1) * (alpha + link), rel=1e-12)
        ar = collective_time("all_reduce", size, t, nranks=64, group=group, algorithm="ring")
        # reduce-scatter steps: each rank's DMA engines read two operands of each half chunk they send (2 C), and
        # the last slice's reduction is not hidden: + min(transfer, reduction) / 2
        red = 2 * c / t.rank_dma_bytes_per_ns
        rs_step = alpha + max(link, red) + min(link, red) / 2
        assert ar.time_ns == pytest.approx(fixed + (n - 1) * rs_step + (n - 1) * (alpha + link), rel=1e-12)
    # the asymptote: busbw -> both directions of one link
    big = collective_time("all_gather", 16 * GiB, t, nranks=64, group=group, algorithm="ring")
    assert big.busbw_bytes_per_ns == pytest.approx(2 * beta, rel=0.01)


def test_algorithm_switches_at_the_documented_sizes():
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert collective_time(op, MESH_MAX_BYTES - 64, "trn2").algorithm == "mesh"
        assert collective_time(op, MESH_MAX_BYTES, "trn2").algorithm == "rdh"
        assert collective_time(op, RDH_MAX_BYTES - 64, "trn2").algorithm == "rdh"
        assert collective_time(op, RDH_MAX_BYTES, "trn2").algorithm == "kangaring"
    assert MESH_MAX_BYTES == 1 * MiB and RDH_MAX_BYTES == 56 * MiB
    # KangaRing needs every rank of each chip in the group: one rank per chip falls back to Ring
    assert collective_time("all_reduce", 100 * MiB, "trn2", nranks=64, group=range(0, 64, 4)).algorithm == "ring"
    # RDH needs a power-of-two sub-cube of chips: 12 chips (48 ranks) use Ring
    assert collective_time("all_reduce", 4 * MiB, "trn2", nranks=48).algorithm == "ring"
    assert collective_time("all_reduce", 4 * MiB, "trn2", nranks=32).algorithm == "rdh"
    assert collective_time("all_to_all", GiB, "trn2").algorithm == "mesh"


def test_rdh_partners_are_torus_neighbours():
    sch = build_schedule(get_topology("trn2"), 64, tuple(range(64)), "reduce_scatter", "rdh")
    cube = [s for s in sch.steps if "dim" in s.label]
    assert len(cube) == 4                                   # 16 chips = 4-dimensional hypercube
    for s in cube:
        for res, _ in s.loads:
            if res[0] == "link":
                assert res[2] in get_topology("trn2").neighbours(res[1])
        # halving: each step moves half of the previous one's units
    units = [max(u for r, u in s.loads if r[0] == "dma") for s in cube]
    assert [u / units[-1] for u in units] == [8, 4, 2, 1]


def test_kangaring_cuts_hbm_traffic_as_documented():
    t = get_topology("trn2")

    def hbm_units(op, algo):
        sch = build_schedule(t, 64, tuple(range(64)), op, algo)
        return sum(u for s in sch.steps for r, u in s.loads if r[0] == "hbm")

    ag = hbm_units("all_gather", "kangaring") / hbm_units("all_gather", "ring")
    rs = hbm_units("reduce_scatter", "kangaring") / hbm_units("reduce_scatter", "ring")
    assert ag == pytest.approx(0.75, abs=0.01)       # 1R2W against 2 x 1R1W: 25% fewer touches
    assert rs == pytest.approx(2 / 3, abs=0.01)      # 3R1W against 2 x 2R1W: 33% fewer
    # and half the hops of a ring
    n_ring = len(build_schedule(t, 64, tuple(range(64)), "all_gather", "ring").steps)
    n_kr = len(build_schedule(t, 64, tuple(range(64)), "all_gather", "kangaring").steps)
    assert n_ring == 63 and n_kr == 32


def test_hierarchical_across_instances():
    one = collective_time("all_reduce", 256 * MiB, "trn2", nranks=64)
    two = collective_time("all_reduce", 256 * MiB, "trn2", nranks=128, nodes=2)
    assert two.algorithm.startswith("hierarchical(") and two.time_ns > one.time_ns
    efa_steps = [s for s in two.schedule.steps if s.label.startswith("across nodes")]
    assert len(efa_steps) == 2                        # reduce-scatter and all-gather across 2 nodes
    t = get_topology("trn2", nodes=2)
    for s in efa_steps:
        assert s.latency_ns == t.efa_hop_ns
        assert s.bottleneck[0] in ("efa_out", "efa_in")
        # each chip's 4 ranks each send one unit (half each way round a ring of 2) through its EFA share
        assert s.ns_per_unit_byte - s.tail_ns_per_unit_byte == pytest.approx(4 / t.efa_bytes_per_ns_per_chip)
        assert s.unit_fraction == pytest.approx(1 / 128)
    # the parts inside the nodes run at once on both nodes
    inside = [s for s in two.schedule.steps if not s.label.startswith("across")]
    assert all(s.latency_ns == t.hop_ns for s in inside)
    # the inside halves carry 2 chunks per unit (each rank holds one per node)
    assert all(s.unit_fraction == pytest.approx(2 / 128) for s in inside)
    # 4 nodes: 3 steps each way
    four = collective_time("all_reduce", 8, "trn2", nranks=256, nodes=4)
    assert sum(s.label.startswith("across") for s in four.schedule.steps) == 6


@pytest.mark.parametrize("name", ["trn2.48xlarge", "trn1.32xlarge", "trn2-ultraserver"])
def test_busbw_bounded_by_the_links(name):
    t = get_topology(name)
    per_chip = sum(2 * b for b in t.dim_link_bytes_per_ns)      # every link of a chip, out direction
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for k in range(3, 33, 3):
            c = collective_time(op, 2 ** k, t)
            assert 0 < c.busbw_bytes_per_ns <= per_chip, (op, 2 ** k, c.busbw_bytes_per_ns)


def test_bus_factors_are_nccom_tests():
    assert bus_factor("all_reduce", 64) == 2 * 63 / 64
    assert bus_factor("all_gather", 64) == bus_factor("reduce_scatter", 64) == bus_factor("all_to_all", 64) \
        == 63 / 64
    assert bus_factor("send_recv", 64) == bus_factor("permute", 64) == 1


def test_time_grows_with_size_and_latency_floor():
    t = get_topology("trn2")
    prev = 0
    for k in range(3, 33):
        c = collective_time("all_reduce", 2 ** k, t)
        assert c.time_ns >= c.schedule.latency_ns()
        assert c.time_ns >= prev * 0.5       # algorithm switches may make a larger size faster, never wildly
        prev = c.time_ns
    small = collective_time("all_reduce", 8, t)
    # the CC core's trigger and first DMA start, the entry handshake (one hop); mesh: reduce-scatter 2 steps, gather 2
    assert small.time_ns == pytest.approx(t.target.dma_fixed_ns + t.hop_ns + 4 * t.hop_ns, rel=1e-3)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown machine"):
        get_topology("trn9")
    with pytest.raises(ValueError, match="exceed"):
        collective_time("all_reduce", 8, "trn2", nranks=65)
    with pytest.raises(ValueError, match="unknown collective"):
        collective_time("all_shuffle", 8, "trn2")
    with pytest.raises(ValueError, match="does not apply"):
        collective_time("all_reduce", 8, "trn2", nranks=64, group=range(0, 64, 4), algorithm="kangaring")
    with pytest.raises(ValueError, match="distinct ranks"):
        collective_time("all_reduce", 8, "trn2", nranks=4, group=[0, 0])
    with pytest.raises(ValueError, match="LNC=3"):
        get_topology("trn2", lnc=3)
