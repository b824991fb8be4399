"""The guides are tested as documentation: every code block of every guide under docs/ runs, in order, in a fresh
directory and a fresh interpreter per block, under ``TORCHNEURON_TARGET=sim``.

Conventions in a guide:
- a fenced block tagged ``python`` runs with the interpreter, one tagged ``bash`` runs with ``bash -e``;
- a block right after a line ``<!-- file: NAME -->`` is written to NAME instead (kernels and tests the next
  blocks use);
- a block right after ``<!-- needs: MODULE -->`` runs only where MODULE is installed (an optional extra, such as
  ``transformers``);
- a block right after ``<!-- skip: REASON -->`` is not run (something this machine cannot do); ``text``,
  ``console`` and untagged blocks are output shown to the reader and never run.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
_FENCE = re.compile(r"(?:<!--\s*(file|skip|needs):\s*(.*?)\s*-->\s*\n)?```(\w*)[^\n]*\n(.*?)\n```", re.S)


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
        if kind == "needs" and importlib.util.find_spec(arg) is None:
            continue
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{guide.name}: block failed:\n{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        ran += 1
    assert ran > 0, f"{guide.name} has no runnable block"


# -- the example kernels and the commands that time them ---------------------------------------------------------
ROOT = DOCS.parent
EXAMPLE = ROOT / "examples" / "my_kernels.py"


def test_kernel_prototyping_guide_shows_the_shipped_example_file():
    """The guide writes my_kernels.py from a block: that block is examples/my_kernels.py, byte for byte."""
    blocks = [code for kind, arg, lang, code in guide_blocks(DOCS / "guides" / "kernel-prototyping.md")
              if kind == "file" and arg == "my_kernels.py"]
    assert len(blocks) == 1
    assert blocks[0] + "\n" == EXAMPLE.read_text(), \
        "docs/guides/kernel-prototyping.md's my_kernels.py block differs from examples/my_kernels.py"


def _profile_commands():
    """Every ``trnsim profile examples/my_kernels.py...`` command of README.md (code spans and blocks, trailing
    ``# comments`` dropped) and of ``trnsim --help`` / ``trnsim profile --help``."""
    from trnsim.cli import _EPILOGS, build_parser
    texts = [(ROOT / "README.md").read_text(), _EPILOGS["profile"], build_parser().epilog]
    found = []
    for text in texts:
        for m in re.finditer(r"trnsim profile [^`\n#]*", text):
            cmd = m.group(0).strip()
            if cmd not in found:
                found.append(cmd)
    return found


def test_readme_and_help_name_only_the_shipped_example_kernels():
    cmds = _profile_commands()
    assert len(cmds) >= 3, cmds
    for c in cmds:
        assert c.split()[2].startswith("examples/my_kernels.py::"), c


@pytest.mark.parametrize("cmd", _profile_commands() if DOCS.is_dir() else [])
def test_readme_and_help_profile_commands_run(cmd, tmp_path):
    """Each command runs as written, from a folder holding examples/ as the repository does."""
    import shlex
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV"))}
    env.update(MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1", TRNSIM_PROGRESS="0")
    argv = shlex.split(cmd)
    r = subprocess.run([sys.executable, "-m", "trnsim", *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"{cmd}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    assert "total time" in r.stdout and "trace:" in r.stdout


# -- figures the docs quote from the code -------------------------------------------------------------------------
def _regen():
    import importlib.util
    spec = importlib.util.spec_from_file_location("regen_docs", ROOT / "tools" / "regen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_sections_are_found_and_every_producer_is_used():
    regen = _regen()
    used = set(regen.WHOLE.values())
    for path in regen.marked_files():
        used |= set(regen.sections(path.read_text()))
    assert used == set(regen.PRODUCERS), sorted(set(regen.PRODUCERS) ^ used)
    text = (DOCS / "guides" / "reading-a-profile.md").read_text()
    assert {"demo-summary", "demo-dma-active", "peak-tflops"} <= set(regen.sections(text))


def test_regeneration_replaces_a_stale_figure_and_only_it():
    regen = _regen()
    doc = "busy <!-- gen: demo-dma-active -->93%<!-- /gen --> of the time; 93% elsewhere stays\n"
    new = regen.regenerate(doc, lambda key: "89%")
    assert new == "busy <!-- gen: demo-dma-active -->89%<!-- /gen --> of the time; 93% elsewhere stays\n"
    with pytest.raises(KeyError, match="unknown generated section 'nope'"):
        regen.regenerate("<!-- gen: nope -->x<!-- /gen -->", lambda key: "y", "x.md")


def test_generated_doc_figures_are_current():
    """Every figure a doc quotes from trnsim's output (the demo's summary, the error of a mismatched --arg, the
    cost table of docs/estimates.md, ...) is what the code prints now."""
    regen = _regen()
    stale = regen.run(check=True)
    assert not stale, ("docs quote figures the code no longer prints: "
                       + ", ".join(f"{p} [{k}]" for p, k in stale)
                       + f"; regenerate them with `{regen.COMMAND}` and commit the result")
