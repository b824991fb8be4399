"""Every committed report says which trnsim commit and date it was made at, and the report writers stamp both."""

import datetime
import json
import re
import subprocess
from pathlib import Path

import pytest

from conformance import report

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "conformance" / "reports"
HASH = re.compile(r"\b[0-9a-f]{40}\b")


def _git(*args):
    try:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _commit_of(doc):
    """The commit a JSON report records: ``meta.commit`` (conformance sweeps) or ``trnsim_commit`` (nki-library)."""
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    return meta.get("commit") or doc.get("trnsim_commit"), meta.get("made") or doc.get("made")


def _reports(ext):
    return sorted(REPORTS.rglob(f"*.{ext}")) if REPORTS.is_dir() else []


def test_there_are_reports_to_check():
    assert len(_reports("json")) >= 8 and len(_reports("md")) >= 8


@pytest.mark.parametrize("path", _reports("json"), ids=lambda p: str(p.relative_to(REPORTS)))
def test_json_report_carries_a_commit_and_a_date(path):
    commit, made = _commit_of(json.loads(path.read_text()))
    assert commit and HASH.fullmatch(commit), \
        f"{path.relative_to(ROOT)}: no clean trnsim commit recorded (got {commit!r}); committed reports are made " \
        "from committed code"
    datetime.datetime.fromisoformat(made)
    if _git("rev-parse", "--is-shallow-repository") == "false":
        assert _git("cat-file", "-e", commit + "^{commit}") is not None, \
            f"{path.relative_to(ROOT)}: commit {commit} is not in this repository's history"


@pytest.mark.parametrize("path", _reports("md"), ids=lambda p: str(p.relative_to(REPORTS)))
def test_markdown_report_carries_the_commit_of_its_json(path):
    text = path.read_text()
    m = re.search(r"Made (?:with trnsim )?at commit ([0-9a-f]{40}) on (\S+?)\.?(?:\s|$)", text)
    assert m, f"{path.relative_to(ROOT)}: no 'Made at commit <40 hex> on <date>' line"
    twin = path.with_suffix(".json")
    if twin.exists():
        assert m.group(1) == _commit_of(json.loads(twin.read_text()))[0]


def test_writers_stamp_the_checkout_commit_and_the_date(tmp_path):
    head = _git("rev-parse", "HEAD")
    if head is None:
        pytest.skip("not a git checkout")
    rec = {"suite": "nki", "name": "nisa.x", "dtype": "float32", "mode": "numerics", "status": "pass",
           "counts": {"pass": 1}, "samples": 1, "detail": ""}
    report.write_json([rec], tmp_path / "r.json", {"suite": "nki"})
    report.write_markdown([rec], tmp_path / "r.md", meta={"suite": "nki"})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["meta"]["commit"].split("+")[0] == head          # +dirty when the checkout has local changes
    assert doc["meta"]["suite"] == "nki" and doc["generated"] == doc["meta"]["made"]
    when = datetime.datetime.fromisoformat(doc["meta"]["made"])
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 600
    assert f"Made at commit {head}" in (tmp_path / "r.md").read_text()


def test_provenance_outside_a_checkout(tmp_path):
    assert report.provenance(root=tmp_path)["commit"] == "unknown (not a git checkout)"
