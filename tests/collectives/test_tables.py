"""The collectives tables in docs/guides/collectives.md are the model's: a change that moves a figure fails here
until the tables are regenerated (python -m trnsim.collectives.tables --write docs/guides/collectives.md)."""

from pathlib import Path

import pytest

from trnsim.collectives import tables

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "collectives.md"


@pytest.mark.skipif(not GUIDE.is_file(), reason="no docs/ in this install")
def test_guide_tables_match_the_model():
    text = GUIDE.read_text(encoding="utf-8")
    assert tables.replace_section(text, tables.tables()) == text, \
        "stale: python -m trnsim.collectives.tables --write docs/guides/collectives.md"
    assert tables.main(["--check", str(GUIDE)]) == 0


def test_tables_cover_the_issue_rows_and_no_row_beats_its_bound():
    out = tables.tables()
    for machine, n in (("trn1.32xlarge", 2), ("trn1.32xlarge", 32), ("trn2.48xlarge", 64)):
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            assert f"**{op}, {n} ranks of {machine}**" in out
    rows = [ln.split("|")[1:-1] for ln in out.splitlines()
            if ln.startswith("| ") and ln.split("|")[1].strip().endswith(("KiB", "MiB", "GiB"))]
    assert len(rows) == 9 * 11
    for r in rows:
        busbw, bound, t_us, floor = (float(r[i].replace(",", "")) for i in (4, 5, 2, 8))
        assert busbw <= bound and t_us >= floor


def test_write_and_check(tmp_path):
    f = tmp_path / "g.md"
    f.write_text(f"intro\n{tables.BEGIN}\nold\n{tables.END}\nafter\n")
    assert tables.main(["--check", str(f)]) == 1
    assert tables.main(["--write", str(f)]) == 0
    assert tables.main(["--check", str(f)]) == 0
    text = f.read_text()
    assert text.startswith("intro\n") and text.endswith("after\n") and "old" not in text
    (tmp_path / "bad.md").write_text("no markers")
    assert tables.main(["--check", str(tmp_path / "bad.md")]) == 2
