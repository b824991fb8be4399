"""The conformance reports: summary line, Markdown table, baseline comparison, resumable records."""

import json
import os

import pytest

from conformance import report


def rec(name, dtype, status, n=4, mode="forward", suite="ops", detail=""):
    return {"suite": suite, "name": name, "dtype": dtype, "mode": mode, "status": status, "counts": {status: n},
            "samples": n, "detail": detail, "seconds": 0.01}


RECS = [rec("add", "float32", "native"), rec("add", "bfloat16", "native"),
        rec("erfinv", "float32", "fallback", 2), rec("nn.functional.gelu", "float32", "mismatch", 1,
                                                      detail="output 0: worst at [3]: got 1.5, expected 1.25"),
        rec("linalg.svd", "float32", "error", 3, detail="RuntimeError: boom"),
        rec("bernoulli", "float32", "skip", 0, detail="random by nature"),
        rec("nisa.tensor_tensor", "bfloat16", "pass", 10, mode="numerics", suite="nki")]


def test_summary_line_counts_samples():
    line = report.summary_line(RECS)
    # ops: 4+4+2+1+3 = 14 samples (the skip group has 0)
    assert line.startswith("ops 5 x 2 dtypes (forward), 14 samples: native 57.1%, fallback 14.3%, mismatch 7.1%, "
                           "error 21.4%, skip 0.0% (+1 groups skipped whole)")
    assert "nki 1 x 1 dtypes (numerics), 10 samples: pass 100.0%" in line


def test_markdown_lists_failures_first_and_coverage(tmp_path):
    p = tmp_path / "r.md"
    report.write_markdown(RECS, str(p))
    text = p.read_text()
    assert text.index("## Mismatches and errors") < text.index("## PyTorch ops: coverage")
    assert text.index("nn.functional.gelu | float32 | forward | mismatch") < text.index("linalg.svd | float32")
    assert "| add | Y | bfloat16, float32 |" in text
    assert "| erfinv | CPU_FALLBACK |  | float32 |" in text
    assert "| torch.nn.functional | 1 | 0 | 0 | 1 | 0 |" in text
    assert "| torch.linalg | 1 | 0 | 0 | 1 | 0 |" in text


def test_compare_regressions_and_fixes(tmp_path):
    old = [rec("add", "float32", "native"), rec("erfinv", "float32", "mismatch"), rec("abs", "float32", "native")]
    new = [rec("add", "float32", "fallback"), rec("erfinv", "float32", "fallback"), rec("neg", "float32", "native")]
    reg, fix, ch = report.compare(new, old)
    assert reg == [(("ops", "add", "float32", "forward"), "native", "fallback")]
    assert fix == [(("ops", "erfinv", "float32", "forward"), "mismatch", "fallback")]
    assert (("ops", "abs", "float32", "forward"), "native", "removed") in ch
    assert (("ops", "neg", "float32", "forward"), "added", "native") in ch
    p = tmp_path / "old.json"
    report.write_json(old, str(p))
    assert report.load_json(str(p)) == old
    md = tmp_path / "r.md"
    report.write_markdown(new, str(md), baseline=report.load_json(str(p)))
    assert "1 regressions, 1 fixes" in md.read_text()


def test_load_json_refuses_other_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"records": []}))
    with pytest.raises(ValueError, match="not a trnsim conformance report"):
        report.load_json(str(p))


def test_atomic_write_leaves_no_temp(tmp_path):
    p = tmp_path / "sub" / "f.txt"
    report.atomic_write(str(p), "hello")
    assert p.read_text() == "hello"
    assert os.listdir(p.parent) == ["f.txt"]


def test_known_mismatches_carry_their_cause(tmp_path):
    known = report.load_known()
    assert known and all(k["status"] in ("verified", "inferred") and k["cause"] for k in known)
    recs = [rec("nn.functional.silu", "float16", "mismatch", mode="backward"), rec("add", "float32", "mismatch")]
    left = report.annotate_known(recs, known)
    assert left == [recs[1]]
    assert "composite backward" in recs[0]["cause"] and recs[0]["status"] == "mismatch"
    p = tmp_path / "r.md"
    report.write_markdown(recs, str(p))
    text = p.read_text()
    assert "(verified) on the neuron device" in text and "**not yet explained**" in text


def test_missing_known_mismatches_file_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="known-mismatches file .*missing"):
        report.load_known(str(tmp_path / "known_mismatches.json"))
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"format": "something-else", "entries": []}))
    with pytest.raises(ValueError, match="not a trnsim known-mismatches file"):
        report.load_known(str(p))
