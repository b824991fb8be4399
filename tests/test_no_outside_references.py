"""Every fact and document the repository cites is in the repository: no tracked text file refers to files outside
it (the ``shared/`` folder beside the checkout, ``../shared``, absolute ``/work/`` paths of the machine it was
written on).  Hardware facts live in docs/hardware.md, the architecture in docs/ARCHITECTURE.md."""

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ``shared/`` as a path start (not ``hbm_shared/``), optionally after ``../``; or an absolute path under /work
OUTSIDE = re.compile(r"(?<![\w.-])(?:\.\./)*shared/|(?<![\w.])/work/")


def outside_references(text):
    return [m.group(0) for m in OUTSIDE.finditer(text)]


def _tracked():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p]


def test_the_pattern_finds_each_kind_and_nothing_else():
    assert outside_references("see shared/hardware.md and ../shared/DESIGN.md, /work/ext/nki-library") == [
        "shared/", "../shared/", "/work/"]
    assert outside_references("machine/hbm_shared/x.py, docs/hardware.md, a_shared/, /tmp/work/y") == []


def test_no_tracked_text_file_refers_outside_the_repository():
    hits = []
    for rel in _tracked():
        if rel == "tests/test_no_outside_references.py":
            continue
        path = os.path.join(ROOT, rel)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:            # listed but absent (a deletion not yet committed)
            continue
        if b"\0" in data[:8192]:
            continue                # binary
        text = data.decode("utf-8", errors="replace")
        for i, line in enumerate(text.splitlines(), 1):
            for ref in outside_references(line):
                hits.append(f"{rel}:{i}: {ref} in {line.strip()[:100]}")
    assert len(hits) == 0, "references to files outside the repository:\n" + "\n".join(hits)


def _slug(heading):
    """GitHub's anchor of a Markdown heading."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def test_citations_of_in_repo_documents_resolve():
    """``docs/....md#anchor`` in code, tests and docs names an existing document and one of its headings."""
    cite = re.compile(r"(docs/[\w/.-]+\.md)(?:#([\w-]+))?")
    bad = []
    for rel in _tracked():
        if not rel.endswith((".py", ".md", ".json", ".toml", ".txt")) or rel == "tests/test_no_outside_references.py":
            continue
        try:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        for m in cite.finditer(text):
            doc, anchor = m.group(1), m.group(2)
            path = os.path.join(ROOT, doc)
            if not os.path.isfile(path):
                bad.append(f"{rel}: {m.group(0)}: no such document")
                continue
            if anchor:
                with open(path, encoding="utf-8") as f:
                    heads = {_slug(h) for h in re.findall(r"^#+ (.*)$", f.read(), re.M)}
                if anchor not in heads:
                    bad.append(f"{rel}: {m.group(0)}: no heading with that anchor")
    assert not bad, "\n".join(bad)
