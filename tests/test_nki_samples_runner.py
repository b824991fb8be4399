"""tools/run_nki_samples.py: its usage errors and the report it writes (the runs themselves need a snapshot of
aws-neuron/nki-samples, which CI does not have: ``NKI_SAMPLES_PATH``)."""

import importlib.util
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("run_nki_samples", os.path.join(ROOT, "tools", "run_nki_samples.py"))
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


def test_refuses_a_folder_that_is_not_a_snapshot(tmp_path, capsys):
    assert runner.main(["--snapshot", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "not an nki-samples checkout" in capsys.readouterr().err


def test_unknown_kernel_name_is_refused(tmp_path, capsys):
    (tmp_path / "src" / "nki_samples").mkdir(parents=True)
    assert runner.main(["--snapshot", str(tmp_path), "--only", "nothing/like/this"]) == 2
    assert "names no kernel" in capsys.readouterr().err


def test_report_counts_outcomes_and_carries_the_commit(tmp_path):
    recs = [{"name": "tutorial/softmax", "kind": "main", "outcome": "match", "seconds": 1.0},
            {"name": "unit/resize_nearest", "kind": "unit", "outcome": "error", "seconds": 2.0, "tests_passed": 0,
             "tests_failed": 3, "detail": "E NkiValidationError: index | x"}]
    runner.write_report(recs, str(tmp_path / "r"), "7af4e4d", 3.0)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["counts"] == {"match": 1, "mismatch": 0, "error": 1, "timeout": 0}
    md = (tmp_path / "r.md").read_text()
    assert "**1 / 2 match**" in md and "0 passed, 3 failed" in md and "index / x" in md
    m = re.search(r"Made at commit (\S+) on (\S+) ", md)
    assert m and m.group(1) == doc["meta"]["commit"]


@pytest.mark.skipif(not os.path.isdir(os.path.join(os.environ.get("NKI_SAMPLES_PATH", "/nonexistent"), "src")),
                    reason="no nki-samples snapshot (set NKI_SAMPLES_PATH)")
def test_a_tutorial_matches_through_its_own_driver(tmp_path):
    assert runner.main(["--snapshot", os.environ["NKI_SAMPLES_PATH"], "--only", "tutorial/rmsnorm",
                        "--out", str(tmp_path / "r")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [k["outcome"] for k in doc["kernels"]] == ["match"]
