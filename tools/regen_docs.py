#!/usr/bin/env python3
"""Regenerate every figure the docs quote from trnsim's own output, so that no figure in a doc goes stale.

    python tools/regen_docs.py            # rewrite the generated sections in place (about a minute)
    python tools/regen_docs.py --check    # write nothing; exit 1 naming each stale section

A generated section is marked in the Markdown (the markers are invisible when rendered)::

    <!-- gen: KEY -->...<!-- /gen -->

and its text is what the producer ``KEY`` below makes: a fenced block of a command's output, or one figure
inside a sentence.  ``docs/estimates.md`` is generated whole (``python -m trnsim.cost.table``).  Every run is
made with the defaults (the environment's ``NEURON_PLATFORM_TARGET_OVERRIDE``, ``TRNSIM_*`` and ``NKI_*``
switches are removed, except the cost cache's), in a temporary folder.

Run it after any change to timing, the cost model or the collectives, and commit what it changed:
``tests/test_guides.py::test_generated_doc_figures_are_current`` fails until the docs match the code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python tools/regen_docs.py"

# the documents scanned for markers, and those generated whole
MARKED = ("README.md", "docs/guides/*.md")
WHOLE = {"docs/estimates.md": "estimates"}

_MARK = re.compile(r"(<!-- gen: ([\w.-]+) -->)(.*?)(<!-- /gen -->)", re.S)


# switches that change no figure (where the persistent cost cache lives, whether it is used) are kept
_KEEP = ("TRNSIM_COST_CACHE", "TRNSIM_CACHE_DIR")


def _env():
    env = {k: v for k, v in os.environ.items()
           if k in _KEEP or (not k.startswith(("TRNSIM_", "NKI_", "PYTEST", "COV"))
                             and k != "NEURON_PLATFORM_TARGET_OVERRIDE")}
    env.update(TRNSIM_PROGRESS="0", PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _run(argv, cwd, check=True):
    r = subprocess.run([sys.executable, *argv], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=900)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def _block(text, lang="text"):
    return f"\n```{lang}\n{text.rstrip()}\n```\n"


class Runs:
    """The commands whose output the docs quote, each run once (lazily) in a temporary folder."""

    def __init__(self, work):
        self.work = Path(work)
        self._cache = {}
        self._estimates = None

    def start_estimates(self):
        """The cost table takes the longest: start it first, in the background."""
        if self._estimates is None:
            out = self.work / "estimates.md"
            self._estimates = (subprocess.Popen([sys.executable, "-m", "trnsim.cost.table", "--out", str(out)],
                                                cwd=self.work, env=_env(), stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, text=True), out)

    def estimates(self):
        self.start_estimates()
        proc, out = self._estimates
        stdout, stderr = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"python -m trnsim.cost.table failed (exit {proc.returncode}):\n{stderr}")
        return out.read_text()

    def demo(self):
        """``trnsim demo``'s timing summary: from its title line to the line before the trace path."""
        if "demo" not in self._cache:
            r = _run(["-m", "trnsim", "demo", "--out", "out", "--no-plot"], self.work)
            lines = r.stdout.splitlines()
            start = next(i for i, ln in enumerate(lines) if ln.startswith("trnsim profile:"))
            end = next(i for i, ln in enumerate(lines) if ln.startswith("  trace:"))
            self._cache["demo"] = "\n".join(lines[start:end])
        return self._cache["demo"]

    def demo_row(self, engine, column):
        """A figure of the demo's engine table: ``column`` 0 = active %, 1 = critical path %."""
        for ln in self.demo().splitlines():
            parts = ln.split()
            if parts and parts[0] == engine and len(parts) >= 3:
                return float(parts[1 + column])
        raise RuntimeError(f"trnsim demo printed no engine row {engine!r}:\n{self.demo()}")

    def profile_mismatch(self):
        """The one-line error of ``trnsim profile`` given a parameter name the kernel does not have."""
        if "mismatch" not in self._cache:
            d = self.work / "mismatch"
            d.mkdir(exist_ok=True)
            shutil.copy(ROOT / "examples" / "my_kernels.py", d / "my_kernels.py")
            r = _run(["-m", "trnsim", "profile", "my_kernels.py::matmul", "--arg", "a=512x256", "--arg",
                      "b=512x1024"], d, check=False)
            if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 1:
                raise RuntimeError(f"expected a one-line usage error (exit 2), got exit {r.returncode}:\n{r.stderr}")
            self._cache["mismatch"] = r.stderr.strip()
        return self._cache["mismatch"]


def _peak_tflops():
    """The Tensor Engine peak per core of each target, as the MFU line divides by it."""
    from trnsim.targets import get_target
    by = {}
    for name in ("trn1", "trn2", "trn3"):
        by.setdefault(round(get_target(name).tensor_bf16_flops_per_core / 1e12), []).append(name)
    parts = [f"{v} TFLOPS per core on {'/'.join(names)}" if i == 0 else f"{v} on {'/'.join(names)}"
             for i, (v, names) in enumerate(sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[1])))]
    return ", ".join(parts)


# KEY -> producer(runs) -> the text between the markers
PRODUCERS = {
    "demo-summary": lambda r: _block(r.demo()),
    "demo-dma-active": lambda r: f"{r.demo_row('dma', 0):.0f}%",
    "demo-dma-critical": lambda r: f"{r.demo_row('dma', 1):.0f}%",
    "demo-tensor-active": lambda r: f"{r.demo_row('tensor', 0):.0f}%",
    "peak-tflops": lambda r: _peak_tflops(),
    "profile-mismatch-error": lambda r: _block(r.profile_mismatch()),
    "estimates": lambda r: r.estimates(),
}


def marked_files(root=ROOT):
    out = []
    for pattern in MARKED:
        out += sorted(root.glob(pattern))
    return out


def regenerate(text, produce, where="<text>"):
    """``text`` with every marked section's content replaced by ``produce(key)``; an unknown key is an error
    naming the file."""
    def sub(m):
        key = m.group(2)
        if key not in PRODUCERS:
            raise KeyError(f"{where}: unknown generated section {key!r} (known: {', '.join(sorted(PRODUCERS))})")
        return m.group(1) + produce(key) + m.group(4)
    return _MARK.sub(sub, text)


def sections(text):
    """``{key: content}`` of the marked sections of ``text``."""
    return {m.group(2): m.group(3) for m in _MARK.finditer(text)}


def run(check=False, root=ROOT, log=print):
    """Regenerate (or with ``check`` only compare) every generated doc; returns the stale ``(path, key)``."""
    stale = []
    with tempfile.TemporaryDirectory(prefix="trnsim-regen-") as work:
        runs = Runs(work)
        runs.start_estimates()
        cache = {}

        def produce(key):
            if key not in cache:
                cache[key] = PRODUCERS[key](runs)
            return cache[key]
        docs = [(p, None) for p in marked_files(root)] + [(root / rel, key) for rel, key in WHOLE.items()]
        for path, whole in docs:
            old = path.read_text() if path.exists() else ""
            rel = path.relative_to(root)
            new = produce(whole) if whole else regenerate(old, produce, str(rel))
            if new == old:
                continue
            if whole:
                stale.append((str(rel), whole))
            else:
                was = sections(old)
                stale += [(str(rel), k) for k, v in sections(new).items() if was.get(k) != v]
            if not check:
                from trnsim.fileio import atomic_write
                with atomic_write(str(path), "w") as f:
                    f.write(new)
                log(f"updated {rel}")
    return stale


def main(argv=None):
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare only: exit 1 naming each stale section")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    stale = run(check=a.check)
    if a.check and stale:
        print("stale generated doc sections (run `" + COMMAND + "` and commit):")
        for path, key in stale:
            print(f"  {path}: {key}")
        return 1
    if not stale:
        print("every generated doc section is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
