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


def test_the_kernel_list_follows_the_snapshot_layout(tmp_path, capsys):
    (tmp_path / "src" / "nki_samples").mkdir(parents=True)
    assert runner.kernels_for(str(tmp_path)) is runner.KERNELS_NEW        # 6905a68 and later: no reference/
    assert runner.main(["--snapshot", str(tmp_path), "--list"]) == 0
    names = capsys.readouterr().out.split()
    assert "tutorial/mxfp_matmul" in names and "contributed/maxpooling" in names
    assert not any(n.startswith("unit/") for n in names)
    (tmp_path / "src" / "nki_samples" / "reference").mkdir()
    assert runner.kernels_for(str(tmp_path)) is runner.KERNELS             # the legacy layout (7af4e4d)
    assert "reference/double_row_matmul" in [k[0] for k in runner.KERNELS]


def test_profile_mode_refuses_a_name_it_does_not_profile(tmp_path, capsys):
    (tmp_path / "src" / "nki_samples").mkdir(parents=True)
    assert runner.main(["--snapshot", str(tmp_path), "--profile", "--only", "nothing/like/this"]) == 2
    assert "names no profiled kernel" in capsys.readouterr().err


def test_every_listed_kernel_has_a_profile_row():
    prof = {p[0] for p in runner.PROFILES}
    missing = [k[0] for k in runner.KERNELS + runner.KERNELS_NEW if k[0] not in prof]
    # the MX matmul tutorial (through torch_xla) and the pipelined attention (a 16k-only kernel launched at
    # import) have no profile row; double_row_matmul's unit test row is profiled as reference/double_row_matmul
    assert sorted(set(missing)) == ["contributed/pipelined_attention", "tutorial/mxfp_matmul",
                                    "unit/double_row_matmul"]


def test_profile_report_counts_kernels_whose_runs_all_succeed(tmp_path):
    ok = {"ok": True, "seconds": 1.0, "simulated": "9.3 us"}
    recs = [{"name": "tutorial/rmsnorm", "runs": {f"k:{t}:{m}": ok for t in ("trn1", "trn2")
                                                   for m in ("shape-only", "full")}},
            {"name": "unit/x", "runs": {"k:trn1:full": {"ok": False, "seconds": 1.0, "detail": "E Boom | x"}}},
            {"name": "tutorial/gone", "missing": True, "runs": {}}]
    runner.write_profile_report(recs, str(tmp_path / "r-profiles"), "7af4e4d", 2.0)
    doc = json.loads((tmp_path / "r-profiles.json").read_text())
    assert doc["profiled"] == 1
    md = (tmp_path / "r-profiles.md").read_text()
    assert "**1 / 2 kernels profile without a refusal**" in md and "9.3 us / 9.3 us" in md and "Boom / x" in md


def test_a_kernel_of_a_later_target_is_profiled_there_only(tmp_path):
    """double_row_matmul uses nc_matmul's double_row mode (trn2 on): its row lists trn2 runs only, and the report
    says so instead of showing a trn1 refusal."""
    assert runner.PROFILE_ONLY_ON["reference/double_row_matmul"] == ("trn2",)
    assert any(p[0] == "reference/double_row_matmul" for p in runner.PROFILES)
    ok = {"ok": True, "seconds": 1.0, "simulated": "784.6 us"}
    recs = [{"name": "reference/double_row_matmul", "runs": {f"k:trn2:{m}": ok for m in ("shape-only", "full")}}]
    runner.write_profile_report(recs, str(tmp_path / "r-profiles"), "7af4e4d", 2.0)
    md = (tmp_path / "r-profiles.md").read_text()
    assert "**1 / 1 kernels profile without a refusal**" in md
    assert "(trn1: not profiled) / 784.6 us" in md and "double_row_matmul on trn2 only" in md


def test_a_kernel_process_above_the_memory_cap_is_killed_and_named(tmp_path):
    """run_capped kills a process tree that passes the resident cap and says so; below it, the run completes
    with its peak resident size measured."""
    import os
    import sys
    grow = ("import time\nx = bytearray(400 * 2**20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
            "time.sleep(30)\nprint('done')")
    rc, out, peak, why = runner.run_capped([sys.executable, "-c", grow], str(tmp_path), dict(os.environ), 60,
                                           150 * 2 ** 20)
    assert why == "memory" and rc != 0 and peak > 150 * 2 ** 20 and "done" not in out
    rc, out, peak, why = runner.run_capped([sys.executable, "-c", "print('small')"], str(tmp_path),
                                           dict(os.environ), 60, 2 ** 30)
    assert why is None and rc == 0 and "small" in out
    rc, out, peak, why = runner.run_capped([sys.executable, "-c", "import time; time.sleep(30)"], str(tmp_path),
                                           dict(os.environ), 1, 0)
    assert why == "timeout"


def test_unit_counts_from_the_summary_or_the_progress_of_a_killed_run():
    assert runner.unit_counts("....\n4 passed, 1 failed in 3.2s\n") == {"tests_passed": 4, "tests_failed": 1}
    # killed before the summary: the progress characters say how far it got
    assert runner.unit_counts("..........F.                                   [ 75%]\n..") == \
        {"tests_passed": 13, "tests_failed": 1}
    assert runner.unit_counts("") == {"tests_passed": 0, "tests_failed": 0}
