"""Functional collectives against float64 references; `trnsim nccom-test` output and options."""

import io

import numpy as np
import pytest

from trnsim.collectives import functional as F
from trnsim.collectives.nccom import build_parser, main, parse_size, rows, sizes
from trnsim.collectives.algorithms import bus_factor


def _ranks(n=4, shape=(8, 6), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _ in range(n)]


def test_all_reduce_matches_float64():
    xs = _ranks()
    ref = np.sum(np.stack(xs).astype(np.float64), axis=0)
    for out in F.all_reduce(xs):
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    mx = F.all_reduce(xs, "max")[2]
    np.testing.assert_array_equal(mx, np.max(np.stack(xs), axis=0))


def test_gather_scatter_alltoall_permute():
    xs = _ranks(4, (8, 3))
    g = F.all_gather(xs)
    np.testing.assert_array_equal(g[3], np.concatenate(xs))
    rs = F.reduce_scatter(xs)
    tot = np.sum(np.stack(xs).astype(np.float64), axis=0)
    for r in range(4):
        np.testing.assert_allclose(rs[r], tot[2 * r:2 * r + 2], rtol=1e-6, atol=1e-6)
    a2a = F.all_to_all(xs)
    for i in range(4):
        np.testing.assert_array_equal(a2a[i], np.concatenate([xs[r][2 * i:2 * i + 2] for r in range(4)]))
    pm = F.permute(xs, [(0, 1), (1, 2), (2, 3), (3, 0)])
    np.testing.assert_array_equal(pm[1], xs[0])
    np.testing.assert_array_equal(F.broadcast(xs, root=2)[0], xs[2])


def test_mismatch_names_the_ranks():
    xs = _ranks(4)
    xs[2] = xs[2][:4]
    with pytest.raises(F.CollectiveMismatch, match=r"ranks \[2\]"):
        F.all_reduce(xs)
    ys = _ranks(3)
    ys[1] = ys[1].astype(np.float16)
    with pytest.raises(F.CollectiveMismatch, match=r"ranks \[1\].*float16"):
        F.all_gather(ys)
    with pytest.raises(F.CollectiveMismatch, match="does not split"):
        F.reduce_scatter(_ranks(3, (4, 2)))


def test_parse_sizes_like_nccom_test():
    assert parse_size("2kb") == 2048 and parse_size("1MB") == 1 << 20 and parse_size("32M") == 32 << 20
    assert parse_size("8") == 8 and parse_size("4G") == 4 << 30
    assert sizes(8, 32, stepfactor=2) == [8, 16, 32]
    assert sizes(8, 16, stepbytes=4) == [8, 12, 16]


def _run(argv):
    out = io.StringIO()
    rc = main(build_parser().parse_args(argv), out)
    return rc, out.getvalue()


def test_table_columns_and_bus_bandwidth():
    rc, text = _run(["-r", "64", "-b", "8", "-e", "4G", "-f", "4", "-d", "fp32", "allr"])
    assert rc == 0
    head, *lines = text.splitlines()
    assert head.startswith("# trnsim nccom-test (simulated): trn2.48xlarge") and "64 ranks on 16 chips" in head
    assert lines[0].split() == ["size(B)", "count(elems)", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)"]
    body = [ln.split() for ln in lines[1:-1]]
    assert len(body) == len(sizes(8, 4 << 30, stepfactor=4))
    for size, count, typ, t, algbw, busbw in body:
        assert int(count) * 4 == int(size) and typ == "fp32"
        assert float(busbw) == pytest.approx(float(algbw) * 2 * 63 / 64, abs=0.02)
    assert lines[-1].startswith("Avg bus bandwidth:")
    avg = float(lines[-1].split()[-1].replace("GB/s", ""))
    assert avg == pytest.approx(np.mean([float(b[5]) for b in body]), abs=0.01)


def test_rows_algbw_is_decimal_gb_per_s_of_size_over_time():
    """One unit: GB/s = 10^9 B/s = bytes per ns, as the Python API's busbw_bytes_per_ns and the topologies."""
    from trnsim.collectives import collective_time
    for op in ("all_gather", "reduce_scatter", "send_recv"):
        for m, cnt, dt, t_us, algbw, busbw, algo, bound, floor in rows(op, [1 << 20, 1 << 28], "trn2", 64,
                                                                        "bf16"):
            assert algbw == pytest.approx(m / (t_us * 1e-6) / 1e9)
            assert busbw == pytest.approx(algbw * bus_factor(op, 64))
            assert busbw == pytest.approx(collective_time(op, m, "trn2", nranks=64).busbw_bytes_per_ns)
            assert busbw <= bound and 0 < floor < t_us


def test_check_and_errors():
    rc, text = _run(["-r", "8", "-b", "1kb", "-e", "64kb", "-f", "8", "-d", "fp32", "--check", "redsct"])
    assert rc == 0 and "failed" not in text
    rc, text = _run(["-r", "4", "-b", "1kb", "-e", "1kb", "-d", "fp32", "--check", "alltoall"])
    assert rc == 0 and "failed" not in text
    rc, _ = _run(["-r", "1000", "allr"])
    assert rc == 2


def test_multi_node_and_plot(tmp_path):
    png = tmp_path / "busbw.png"
    rc, text = _run(["-r", "128", "-N", "2", "-b", "1M", "-e", "64M", "-f", "8", "allg", "--show-algorithm",
                     "--plot", str(png), "--compare", "trn2-ultraserver,trn3"])
    assert rc == 0 and "hierarchical" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_subcommand():
    from trnsim.cli import main as cli_main
    assert cli_main(["nccom-test", "-r", "2", "allr"]) == 0
