"""Collectives as the runtime runs them: no simulated busbw above the physical bound of its path, the runtime's
fixed costs per collective and per step, on-chip reduction charged its HBM traffic; one name per machine and one
bandwidth unit in every command."""

import io

import pytest

from trnsim.collectives import TOPOLOGIES, Placement, collective_time, get_topology
from trnsim.collectives.bounds import physical_bound
from trnsim.collectives.topology import MACHINE_ALIASES, machine_name

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SIZES = [KiB << (2 * k) for k in range(11)]          # 1 KiB, 4 KiB, ..., 1 GiB


def _cases():
    for name, t in TOPOLOGIES.items():
        per_chip = t.logical_cores_per_chip
        for n in sorted({2, per_chip, 2 * per_chip, t.ranks}):
            yield name, 1, n
    yield "trn1.32xlarge", 2, 64          # two instances over EFA
    yield "trn2.48xlarge", 2, 128


@pytest.mark.parametrize("name,nodes,n", list(_cases()))
def test_no_busbw_above_the_physical_bound(name, nodes, n):
    t = get_topology(name, nodes=nodes)
    p = Placement(t, n)
    for op in OPS:
        for size in SIZES:
            c = collective_time(op, size, t, nranks=n)
            b = physical_bound(op, c.size, p, range(n))
            assert c.busbw_bytes_per_ns <= b.busbw_bytes_per_ns * (1 + 1e-12), (op, size, c.algorithm, b.limit)
            # and never below the runtime's fixed-cost floor
            assert c.time_ns >= c.schedule.latency_ns() > 0


def test_bound_values_from_the_paths():
    # 2 ranks on one trn1 chip: all-reduce reads both inputs and writes both outputs (4 S) at 820 GB/s
    trn1 = get_topology("trn1")
    b = physical_bound("all_reduce", GiB, Placement(trn1, 2), range(2))
    assert b.limit == "HBM" and b.busbw_bytes_per_ns == pytest.approx(820 / 4)
    # 32 ranks over the 16 chips of a trn1.32xlarge: each chip moves 2 (n - r) C over its 384 GB/s NeuronLink
    b = physical_bound("all_reduce", GiB, Placement(trn1, 32), range(32))
    assert b.busbw_bytes_per_ns == pytest.approx(GiB * 2 * 31 / 32 / max(2 * 30 / 32 * GiB / 384, 4 * GiB / 820))
    # one rank per trn2 chip: the chip's 1,024 GB/s of NeuronLink (4 links, 256 GB/s each way)
    trn2 = get_topology("trn2")
    b = physical_bound("all_gather", GiB, Placement(trn2, 64), range(0, 64, 4))
    assert b.limit == "NeuronLink" and b.busbw_bytes_per_ns == pytest.approx(1024)
    # across two instances: each node's EFA (16 chips x 200 Gbps)
    two = get_topology("trn2", nodes=2)
    b = physical_bound("all_to_all", GiB, Placement(two, 128), range(128))
    assert b.limit == "EFA" and b.time_ns == pytest.approx(64 * 64 * (GiB / 128) / (16 * 200 / 8))


def test_the_issue_case_stays_below_its_bounds():
    """issue 30: a 2-rank 1 GiB all-reduce at 579 GB/s.  On trn1 both ranks share one chip: HBM-bound at
    820 / 4 GB/s; on trn2 (the default machine) 2,900 / 4."""
    for name, hbm in (("trn1", 820), ("trn2", 2900)):
        c = collective_time("all_reduce", GiB, name, nranks=2)
        assert c.busbw_bytes_per_ns <= hbm / 4
        # every HBM byte of both ranks' reads and writes is charged: at least 2 S read and 2 S written
        hbm_units = sum(sum(u for r, u in s.loads if r[0] == "hbm") * s.unit_fraction for s in c.schedule.steps)
        assert hbm_units >= 4


def test_fixed_costs_per_collective_and_per_step():
    t = get_topology("trn1")
    c = collective_time("all_reduce", KiB, t, nranks=2)
    assert c.algorithm == "mesh" and len(c.schedule.steps) == 2 and [s.latency_ns for s in c.schedule.steps] \
        == [t.hop_ns] * 2
    labels = dict(c.schedule.fixed)
    assert labels == {"CC core trigger and first DMA start": 1300.0, "entry handshake between CC cores": 1500.0}
    assert c.schedule.latency_ns() == pytest.approx(1300 + 1500 + 2 * 1500)
    assert c.time_ns > c.schedule.latency_ns()
    # across instances the handshake and the cross-node steps pay the EFA hop
    two = collective_time("all_gather", KiB * 128, "trn2", nranks=128, nodes=2)
    assert dict(two.schedule.fixed)["entry handshake between CC cores"] == get_topology("trn2").efa_hop_ns
    # a one-rank "collective" moves nothing and costs nothing
    assert collective_time("all_reduce", KiB, t, nranks=1).time_ns == 0


def test_reduction_charges_hbm_and_its_engine():
    """A reducing step reads its operands: HBM and the DMA engines of the reducing rank see every read."""
    t = get_topology("trn2")
    ag = collective_time("all_gather", 256 * MiB, t, nranks=64, group=range(0, 64, 4), algorithm="ring")
    rs = collective_time("reduce_scatter", 256 * MiB, t, nranks=64, group=range(0, 64, 4), algorithm="ring")
    s_ag, s_rs = ag.schedule.steps[0], rs.schedule.steps[0]
    dma = lambda s: max(u for r, u in s.loads if r[0] == "dma")        # noqa: E731
    hbm = lambda s: max(u for r, u in s.loads if r[0] == "hbm")        # noqa: E731
    assert dma(s_rs) == 2 * dma(s_ag) and hbm(s_rs) == pytest.approx(1.5 * hbm(s_ag))
    assert s_rs.tail_ns_per_unit_byte > 0 and s_ag.tail_ns_per_unit_byte == 0
    assert rs.time_ns > ag.time_ns


def test_one_name_per_machine_in_every_command():
    from trnsim.cost.estimator import INSTANCES, instance_name
    assert set(INSTANCES) == set(TOPOLOGIES)
    assert set(MACHINE_ALIASES.values()) <= set(TOPOLOGIES)
    for alias, name in MACHINE_ALIASES.items():
        assert machine_name(alias) == name == instance_name(alias) == machine_name(alias.upper())
        assert get_topology(alias) is TOPOLOGIES[name]
    assert machine_name("trn2u.48xlarge") == "trn2-ultraserver"
    with pytest.raises(ValueError, match="unknown machine 'trn7'.*trn2u.48xlarge = trn2-ultraserver"):
        machine_name("trn7")
    with pytest.raises(ValueError, match="instance 'trn7'"):
        instance_name("trn7")
    # nccom-test takes --instance as well as --topology, estimate --topology as well as --instance
    from trnsim.collectives.nccom import build_parser, main
    out = io.StringIO()
    assert main(build_parser().parse_args(["-r", "256", "-b", "1M", "-e", "1M", "--instance", "trn2u.48xlarge",
                                           "allg"]), out) == 0
    assert out.getvalue().startswith("# trnsim nccom-test (simulated): trn2-ultraserver")
    from trnsim.cost.cli import build_parser as est_parser
    for spelling in ("trn2u.48xlarge", "trn2-ultraserver", "TRN2U"):
        a = est_parser().parse_args(["--model", "llama3-8b", "--topology", spelling])
        assert a.instance == "trn2-ultraserver"


def test_nccom_units_are_labelled_decimal_gb_per_s():
    from trnsim.collectives.nccom import build_parser, main
    out = io.StringIO()
    main(build_parser().parse_args(["-r", "32", "-b", "1G", "-e", "1G", "--topology", "trn1", "--show-bound",
                                    "allr"]), out)
    head, cols, row, avg = out.getvalue().splitlines()
    assert "GB/s = 10^9 B/s" in head and "32 ranks on 16 chips" in head
    assert cols.split()[4:8] == ["algbw(GB/s)", "busbw(GB/s)", "bound(GB/s)", "floor(us)"]
    size, _, _, t_us, algbw, busbw, bound, floor = row.split()
    c = collective_time("all_reduce", GiB, "trn1", nranks=32)
    assert float(algbw) == pytest.approx(GiB / c.time_ns, abs=0.01)          # bytes per ns = GB/s
    assert float(busbw) <= float(bound)
    assert float(floor) == pytest.approx(c.schedule.latency_ns() / 1e3, abs=0.05)
