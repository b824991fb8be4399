"""The guides are tested as documentation: every code block of every guide under docs/ runs, in order, in a fresh
directory and a fresh interpreter per block, under ``TORCHNEURON_TARGET=sim``.

Conventions in a guide:
- a fenced block tagged ``python`` runs with the interpreter, one tagged ``bash`` runs with ``bash -e``;
- a block right after a line ``<!-- file: NAME -->`` is written to NAME instead (kernels and tests the next
  blocks use);
- a block right after ``<!-- skip: REASON -->`` is not run (something this machine cannot do); ``text``,
  ``console`` and untagged blocks are output shown to the reader and never run.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
_FENCE = re.compile(r"(?:<!--\s*(file|skip):\s*(.*?)\s*-->\s*\n)?```(\w*)[^\n]*\n(.*?)\n```", re.S)


def guide_blocks(path):
    """``(kind, arg, lang, code)`` per fenced block of a Markdown file."""
    return [(m.group(1), m.group(2), m.group(3), m.group(4)) for m in _FENCE.finditer(path.read_text())]


# docs/guides/ only (docs/notes/ holds engineering notes); differential-testing.md has its own runner
# (tests/difftest/test_difftest_guide.py: its blocks share one folder and one interpreter's state)
GUIDES = sorted(p for p in (DOCS / "guides").glob("*.md") if p.name != "differential-testing.md") \
    if DOCS.is_dir() else []


def test_guides_exist():
    names = {p.name for p in GUIDES}
    for g in ("pytest-on-neuron.md", "kernel-prototyping.md", "reading-a-profile.md"):
        assert g in names


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: str(p.relative_to(DOCS)))
def test_guide_code_blocks_run(guide, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV"))}
    env.update(TORCHNEURON_TARGET="sim", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    ran = 0
    for kind, arg, lang, code in guide_blocks(guide):
        if kind == "file":
            (tmp_path / arg).write_text(code + "\n")
            continue
        if kind == "skip" or lang not in ("python", "bash"):
            continue
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{guide.name}: block failed:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        ran += 1
    assert ran > 0, f"{guide.name} has no runnable block"
