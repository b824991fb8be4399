"""benchmarks/hw_counts.py: the error figures it reports, the reading of the counts, the skip without a snapshot,
and (with a snapshot of nki-library and the harness's imports) one configuration timed through AWS's harness."""

import importlib.util
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
hw = pytest.importorskip("benchmarks.hw_counts")

SNAPSHOT = os.environ.get("NKI_LIBRARY_PATH", "")


def test_error_figures():
    mae, sf, s = hw.error_figures([2.0, 2.0, 2.0])
    assert (mae, s) == (1.0, 2.0) and sf == pytest.approx(0.0)
    mae, sf, s = hw.error_figures([1.0, 2.0, 4.0])
    assert mae == 1.0 and s == 2.0 and sf == pytest.approx(1.0)        # median |ln(r / 2)| = ln 2
    mae, sf, s = hw.error_figures([0.9, 1.0, 1.2, 1.1])
    assert mae == pytest.approx(0.1) and s == pytest.approx(1.05)
    devs = sorted(abs(math.log(r / 1.05)) for r in (0.9, 1.0, 1.2, 1.1))
    assert sf == pytest.approx(math.exp((devs[1] + devs[2]) / 2) - 1)
    assert hw.error_figures([]) == (None, None, None)


def test_hardware_count_reading():
    assert hw.hardware_ps(203e7) == 2.03e9
    assert hw.hardware_ps((336e7, 263e7)) == 3.36e9          # the first of a pair
    assert hw.hardware_ps((None, None)) is None and hw.hardware_ps(None) is None


def test_report_from_records(tmp_path):
    recs = [{"nodeid": "f.py::C::test_attention_cte_no_cp_unit[a]", "lnc": 2,
             "params": {"bs": 1, "seqlen_q": 128, "seqlen_kv": 128, "d": 64, "dtype": "bfloat16",
                        "causal_mask": True, "tpbSgCyclesSum": 4e6},
             "trnsim_ns": 6000.0, "instructions": 10, "busy_ns": {"tensor": 100.0}, "critical": {},
             "findings": ["x"], "roofline_ns": 1000.0},
            {"nodeid": "f.py::C::test_attention_cte_no_cp_unit[b]", "lnc": 2,
             "params": {"tpbSgCyclesSum": (2e6, None)}, "error": "CapacityError: too big"}]
    rep = hw.build_report(recs, "abc", 1.0, before=[dict(recs[0], trnsim_ns=60000.0)])
    row = rep["rows"][0]
    assert row["hardware_ns"] == 4000.0 and row["ratio"] == 1.5 and row["before_ratio"] == 15.0
    assert rep["refused"] == 1 and rep["timed"] == 1 and rep["median_abs_error"] == 0.5
    assert rep["hardware_over_roofline"]["min"] == 4.0
    md = hw.render_md(rep)
    assert "refused" in md and "1.50" in md and "15.00" in md


def test_skips_without_snapshot(tmp_path, capsys):
    assert hw.main(["--snapshot", str(tmp_path / "none"), "--out", str(tmp_path / "r")]) == 0
    assert "skipped" in capsys.readouterr().out
    assert not (tmp_path / "r.json").exists()


@pytest.mark.skipif(not os.path.isfile(os.path.join(SNAPSHOT, hw.TEST_FILE)), reason="no nki-library snapshot")
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("boto3", "attrs", "scipy")),
                    reason="nki-library's harness imports boto3, attrs, scipy")
def test_one_configuration_through_the_harness(tmp_path):
    out = tmp_path / "r"
    # seq 256, d 128, LNC=2, bf16, causal: the smallest development configuration (hardware 43e6 ps)
    assert hw.main(["--snapshot", SNAPSHOT, "--out", str(out),
                    "-k", "test_attention_cte_no_cp_vnc_unit and 2-1-256-256-128"]) == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["timed"] == 1 and rep["refused"] == 0
    row = rep["rows"][0]
    assert row["lnc"] == 2 and row["hardware_ns"] == 43e6 / 1000
    # the simulated time is at least the Tensor Engine's bound, and the hardware's too
    assert row["trnsim_ns"] >= row["roofline_ns"] > 0 and row["hardware_ns"] >= row["roofline_ns"]
