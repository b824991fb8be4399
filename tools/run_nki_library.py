#!/usr/bin/env python3
"""Run AWS nki-library's own pytest suite in simulation mode against trnsim, and write a ranked report.

    python tools/run_nki_library.py --snapshot /path/to/nki-library -j 2 --every 10

The snapshot is used read-only: pytest runs from a temporary directory with the snapshot's ``src`` and root on
``PYTHONPATH``, no cache and no bytecode written.  ``--test-mode simulation`` makes the harness import
``nki_cpu_simulator`` (shipped with trnsim, an alias of trnsim's ``nki``).  Harness imports that need AWS
infrastructure or are display-only (``aws_embedded_metrics``, ``fabric2``, ``paramiko``, ``neuron_dtypes``,
``pytest_html``, ``plotext``, ``allpairspy``) come from ``tests/support/nki_library/standins`` when they are not
installed (see the README there).  Results are recorded by ``tests/support/nki_library/trnsim_nkilib_plugin.py``.

Outputs ``<out>.json`` and ``<out>.md`` (default ``conformance/reports/nki-library``): passed / runnable positive
tests, numeric mismatches, per kernel family, failures ranked by cause with counts, negative tests, skips.
Exit status 0 when the run completed (whatever the pass rate), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SUPPORT = os.path.join(REPO, "tests", "support", "nki_library")
STANDINS = os.path.join(SUPPORT, "standins")
DEFAULT_SNAPSHOT = os.environ.get("NKI_LIBRARY_PATH", "")
DEFAULT_OUT = os.path.join(REPO, "conformance", "reports", "nki-library")
GOLDEN_DEFECTS = os.path.join(SUPPORT, "golden_defects.json")

def _load_sibling(name):
    # tools/ is not a package: the split-out part is loaded by path, as the tests load this file
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_mem = _load_sibling("nkilib_memory")
family, GIB, RSS_LIMIT_GIB = _mem.family, _mem.GIB, _mem.RSS_LIMIT_GIB
rss_summary, render_rss, capped_tests, killed_where, record_killed = (
    _mem.rss_summary, _mem.render_rss, _mem.capped_tests, _mem.killed_where, _mem.record_killed)



def phase_times():
    """tests/support/nki_library/phase_times.py (the plugin's timing of a test's phases, and their summary)."""
    if SUPPORT not in sys.path:
        sys.path.insert(0, SUPPORT)
    import phase_times as mod
    return mod


def attach_phases(recs, lines):
    """The plugin's phase lines (``<results>.phases``) into each test's record (the call's, or the setup's of a
    test skipped there): ``wall_s``, ``phase_s`` and, for a process's first test, ``before_first_test_s``."""
    by_id = {}
    for r in recs:
        if r.get("when") in ("setup", "call") and (r["nodeid"] not in by_id or r["when"] == "call"):
            by_id[r["nodeid"]] = r
    for ln in lines:
        r = by_id.get(ln["nodeid"])
        if r is not None:
            r.update({k: ln[k] for k in ("wall_s", "phase_s", "cpu_s", "before_first_test_s",
                                         "peak_rss_phase_bytes") if k in ln})


def time_summary(recs):
    """Where the recorded tests' time went (None when the run recorded no phases: ``--phases``)."""
    lines = [r for r in recs if r.get("phase_s") is not None]
    if not lines:
        return None
    outcome = {r["nodeid"]: r["outcome"] for r in recs if r.get("when") in ("setup", "call")}
    return phase_times().summarize(lines, outcome)


def golden_defects(path=GOLDEN_DEFECTS):
    """{nodeid: entry} of mismatches traced to a defective golden (data in tests/support/nki_library)."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return {d["nodeid"]: d for d in json.load(f)["defects"]}


def snapshot_commit(path, given):
    if given:
        return given
    if os.path.isdir(os.path.join(path, ".git")):
        try:
            return subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return os.environ.get("NKI_LIBRARY_COMMIT", "unknown")


def standin_path(tmp):
    """A directory holding links to the stand-ins of the modules that are not installed (installed ones win)."""
    import importlib.util
    d = os.path.join(tmp, "standins")
    os.makedirs(d)
    used = []
    for name in sorted(os.listdir(STANDINS)):
        if name.startswith((".", "_")):
            continue
        if importlib.util.find_spec(name) is None:
            os.symlink(os.path.join(STANDINS, name), os.path.join(d, name))
            used.append(name)
    return d, used


_NUM = re.compile(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?(e[-+]?\d+)?")
_PATH = re.compile(r"/[\w./-]+/([\w.-]+\.py)")


def cause_key(rec):
    msg = (rec.get("message") or "").strip().splitlines()
    first = msg[0] if msg else ""
    first = _PATH.sub(r"\1", first)
    first = _NUM.sub("N", first)
    first = re.sub(r"'[^']{25,}'", "'...'", first)
    return f"{rec.get('type', '?')}: {first[:160]}"


# Failures of the snapshot's harness in simulation mode itself (not of the simulator), by a pattern of the message.
HARNESS_LIMITS = (
    ("PerRankLazyInputGenerator", "the harness's simulation path takes one input dict; per-rank (collective) "
                                  "inputs are not simulated (test/utils/simulation_setup.py)"),
    ("_x4') to dtype('float", "the harness's simulation path converts each output to its golden's dtype "
                              "(np.asarray(output, dtype=golden.dtype), test/utils/simulation_setup.py); a packed MX "
                              "output whose golden is a float32 view of its bits cannot be (hardware mode reads the "
                              "output's bytes instead)"),
    ("nki.compiler.frontend", "the test is marked trace-only/compile-only: it needs the Neuron compiler's tracer"),
    ("nki.compiler.backends", "the test is marked trace-only/compile-only: it needs the Neuron compiler"),
    ("nki.compiler.ncc_driver", "the test is marked trace-only/compile-only: it needs the Neuron compiler"),
)


# Errors in the snapshot's own kernel code, which fail the same way on any platform: (message, the kernel frames the
# error is raised at, why).  Matched on both, so that no other error with the same message is excused.
SNAPSHOT_KERNEL_DEFECTS = (
    ("'module' object is not callable", tuple(f"nkilib/core/qkv/qkv_cte.py:{n} " for n in (676, 683, 1917, 1924)),
     "the snapshot's kernel calls a module: qkv_cte.py's `from ..utils import stream_shuffle_broadcast` binds the "
     "submodule (core/utils/__init__.py defines nothing), and lines 676, 683, 1917 and 1924 call it (any platform)"),
    ("'NoneType' object has no attribute 'dtype'",
     ("nkilib/core/mlp/mlp_tkg/gate_up_projection_mx_shard_H.py:325 ",),
     "the snapshot's kernel allocates its bias tile with `dtype=gate_up_bias.dtype` (gate_up_projection_mx_shard_H.py "
     "line 325) also when the test gives no bias (`bi-0`), so `None.dtype` raises (moe_block_tkg MODEL_WIP tests "
     "with MX weights; any platform)"),
)


# Calls of a snapshot kernel with arguments it does not take, by the snapshot's test (the same TypeError on any
# platform, raised at the call before any kernel line runs): (message, the test file, why).  Matched on the message,
# the test file and a record with no kernel frame.
SNAPSHOT_CALL_DEFECTS = (
    ("qkv() got an unexpected keyword argument 'is_input_swizzled'", "integration/nkilib/core/qkv/test_qkv_cte.py::",
     "the snapshot's test passes `is_input_swizzled` (a parameter of qkv_cte.py's `qkv_cte`) to the top-level "
     "`qkv` kernel of qkv.py, whose signature has no such parameter (test_qkv_cte_mx_bf16_static_dequant; any "
     "platform)"),
)


def is_mismatch(r):
    """The harness's output validator compared the kernel's outputs with the goldens and they differ."""
    return "ValidationException" in r.get("chain", []) and r.get("type") == "AssertionError"


def not_simulated(r):
    """Why a failed positive test never put the simulator to the test (None if it did): a known harness
    limitation, or an error raised by the snapshot's test code or golden reference with no trnsim frame and no
    ``nki`` name in it (a test that breaks before the kernel runs, or whose torch reference fails)."""
    msg = r.get("message") or ""
    for pat, why in HARNESS_LIMITS:
        if pat in msg:
            return why
    for pat, frame, why in SNAPSHOT_KERNEL_DEFECTS:
        if msg == pat and (r.get("kernel_frame") or "").startswith(frame):
            return why
    for pat, test_file, why in SNAPSHOT_CALL_DEFECTS:
        if msg == pat and r.get("nodeid", "").startswith(test_file) and not r.get("kernel_frame"):
            return why
    chain = r.get("chain", [])
    if (r.get("trnsim_frame") or "nki" in msg.lower() or "trnsim" in msg.lower()
            or r.get("type") in ("Killed", "ResidentMemoryExceeded")):
        return None             # killed or stopped by the memory cap while it ran: it counts against the test
    if "InferenceException" not in chain and not is_mismatch(r):
        if "ValidationException" in chain:
            return "the test's golden reference failed (outside the simulator)"
        return "the test failed before its kernel ran (snapshot test code)"
    return None


def classify(recs, golden=None):
    """Per-test records (last phase wins for failures) -> summary dict.  ``golden``: {nodeid: entry} of
    mismatches traced to the test's golden (still counted as mismatches, listed apart with the reason)."""
    golden = golden_defects() if golden is None else golden
    tests = {}
    collect_errors = []
    for r in recs:
        if r["when"] == "collect":
            if r["nodeid"] not in {c["nodeid"] for c in collect_errors}:     # each xdist worker reports it
                collect_errors.append(r)
            continue
        cur = tests.get(r["nodeid"])
        if cur is None or r["outcome"] in ("failed", "error") or (cur["outcome"] == "passed"
                                                                  and r["outcome"] == "skipped"):
            if cur is not None and cur["outcome"] == "failed" and r["outcome"] != "failed":
                continue
            tests[r["nodeid"]] = r
    fam = collections.defaultdict(lambda: collections.Counter())
    causes = collections.defaultdict(list)
    outside = collections.defaultdict(list)
    neg_causes = collections.defaultdict(list)
    skips = collections.Counter()
    mismatches = []
    for nid, r in sorted(tests.items()):
        f = family(nid)
        neg = bool(r.get("negative"))
        if r["outcome"] == "skipped":
            fam[f]["skipped"] += 1
            skips[_NUM.sub("N", (r.get("message") or "").split("\n")[0])[:120]] += 1
            continue
        if neg:
            fam[f]["negative"] += 1
            if r["outcome"] == "passed":
                fam[f]["negative_passed"] += 1
            else:
                neg_causes[cause_key(r)].append(nid)
            continue
        if r["outcome"] != "passed":
            why = not_simulated(r)
            if why:
                fam[f]["not_simulated"] += 1
                outside[why + " -- " + cause_key(r)].append(nid)
                continue
        fam[f]["runnable"] += 1
        if r["outcome"] == "passed":
            fam[f]["passed"] += 1
        elif is_mismatch(r):
            fam[f]["mismatch"] += 1
            mismatches.append(nid)
            causes["numeric mismatch: " + cause_key(r)].append(nid)
        else:
            fam[f]["failed"] += 1
            causes[cause_key(r)].append(nid)
    tot = collections.Counter()
    for c in fam.values():
        tot.update(c)
    frames = {}
    for r in tests.values():
        k = cause_key(r)
        if k not in frames and (r.get("trnsim_frame") or r.get("kernel_frame")):
            frames[k] = {"trnsim": r.get("trnsim_frame"), "kernel": r.get("kernel_frame")}
    ranked = sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return {
        "tests": len(tests), "runnable": tot["runnable"], "passed": tot["passed"], "mismatches": tot["mismatch"],
        "failed": tot["failed"], "skipped": tot["skipped"], "negative": tot["negative"],
        "negative_passed": tot["negative_passed"],
        "families": {f: dict(c) for f, c in sorted(fam.items())},
        "causes": [{"cause": k, "count": len(v), "examples": v[:3],
                    "where": frames.get(k.removeprefix("numeric mismatch: "))} for k, v in ranked],
        "not_simulated": tot["not_simulated"],
        "not_simulated_causes": [{"cause": k, "count": len(v), "examples": v[:3]}
                                 for k, v in sorted(outside.items(), key=lambda kv: -len(kv[1]))],
        "negative_failures": [{"cause": k, "count": len(v), "examples": v[:3]}
                              for k, v in sorted(neg_causes.items(), key=lambda kv: -len(kv[1]))],
        "mismatch_tests": mismatches,
        "mismatches_golden": [dict(golden[n], nodeid=n) for n in mismatches if n in golden],
        "skips": [{"reason": k, "count": n} for k, n in skips.most_common()],
        "collect_errors": [{"file": r["nodeid"], "message": r.get("message", "")} for r in collect_errors],
        "rss": rss_summary(recs),
        "time": time_summary(recs),
    }


def _pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def _made_line(rep):
    """The trnsim commit and date the report was made at (older reports: from the git history, so marked)."""
    line = f"Made with trnsim at commit {rep.get('trnsim_commit', 'unknown')} on {rep.get('made', 'unknown')}."
    return line + (f" ({rep['trnsim_commit_note']})" if rep.get("trnsim_commit_note") else "")


def render_md(rep):
    s = rep["summary"]
    out = [f"# nki-library in simulation mode against trnsim",
           "",
           f"Snapshot: aws-neuron/nki-library at commit `{rep['snapshot_commit']}` (Apache-2.0), run from "
           f"`{rep['snapshot']}` with `--test-mode simulation --platform-target {rep['platform']}`.",
           f"Command: `{rep['command']}`",
           _made_line(rep),
           f"Selection: every {rep['every']}th collected test"
           + (f" from offset {rep['offset']}" if rep.get("offset") else "") + (f", at most {rep['limit']}" if rep['limit'] else "")
           + f" ({s['tests']} tests); {rep['jobs']} worker(s); {rep['wall_s']:.0f} s wall."
           + ((f" **Partial run**: pytest was ended by signal {rep['crashed_signal']} (9: most often the "
               "out-of-memory killer); only the tests that finished are counted (`--resume` runs the rest)."
               if rep.get("crashed_signal") else
               " **Partial run**: stopped at the time budget; only the tests that finished are counted.")
              if rep.get("partial") else "")
           + (f" pytest was started again {rep['restarts']} time(s) after a test ended it (recorded as killed)."
              if rep.get("restarts") else "")
           + (f" Resumed from `{rep['resumed_from']}`: its records are counted with this run's."
              if rep.get("resumed_from") else "")
           + (f" Resident memory capped at {rep['max_memory_gib']:g} GiB per test process (`--max-memory`): a test "
              "above it fails with ResidentMemoryExceeded (a MemoryError), one that keeps allocating 1 GiB past it "
              "is ended and recorded as killed." if rep.get("max_memory_gib") else "")
           + (f" The {rep['retried']} test(s) the cap stopped ran once more afterwards, one at a time, capped at "
              f"{rep['retry_memory_gib']:g} GiB (`--retry-memory`); their records are the retry's."
              if rep.get("retried") else ""),
           *(["", "**Kernels not simulated** (`--stub-kernels`): a stand-in returned the golden's values as each "
               "kernel's outputs (tests/support/nki_library/sim_stub.py). Only the memory figures of this report "
               "mean something: they are the harness's own; its outcomes say nothing about trnsim. A test stopped "
               "\"inside trnsim's simulate call\" was stopped in the stand-in, which builds the golden.", ""]
             if rep.get("stub_kernels") else []),
           f"Stand-ins used (not installed here): {', '.join(rep['standins']) or 'none'} "
           f"(tests/support/nki_library/standins).",
           "",
           "## Figures",
           "",
           "| | count |",
           "|---|---|",
           f"| runnable positive tests (collected, not skipped, not negative) | {s['runnable']} |",
           f"| passed (outputs equal to their goldens within the harness tolerances) | {s['passed']} "
           f"({_pct(s['passed'], s['runnable'])}) |",
           f"| numeric mismatches | {s['mismatches']}"
           + (f" ({len(s.get('mismatches_golden', []))} traced to the test's golden, below)"
              if s.get("mismatches_golden") else "") + " |",
           f"| other failures (refusals, missing APIs, errors) | {s['failed']} |",
           f"| negative tests (kernel must refuse) passed / run | {s['negative_passed']} / {s['negative']} |",
           f"| failed outside the simulator (harness limits, snapshot test errors; listed below) | "
           f"{s['not_simulated']} |",
           f"| skipped by the harness | {s['skipped']} |",
           f"| test files that failed to import | {len(s['collect_errors'])} |",
           "",
           "## Per kernel family",
           "",
           "| family | runnable | passed | mismatches | failed | negative passed/run | outside | skipped |",
           "|---|---|---|---|---|---|---|---|"]
    for f, c in s["families"].items():
        out.append(f"| {f} | {c.get('runnable', 0)} | {c.get('passed', 0)} | {c.get('mismatch', 0)} | "
                   f"{c.get('failed', 0)} | {c.get('negative_passed', 0)}/{c.get('negative', 0)} | "
                   f"{c.get('not_simulated', 0)} | {c.get('skipped', 0)} |")
    out += ["", "## Failures of positive tests, ranked by cause", ""]
    if not s["causes"]:
        out.append("None.")
    for i, c in enumerate(s["causes"], 1):
        where = c.get("where") or {}
        loc = "; ".join(f"{k}: `{v}`" for k, v in where.items() if v)
        note = rep.get("notes", {}).get(c["cause"])
        out.append(f"{i}. **{c['count']}** x `{c['cause']}`" + (f" ({loc})" if loc else "")
                   + (f"  \n   {note}" if note else "") + f"  \n   e.g. `{c['examples'][0]}`")
    if s.get("mismatches_golden"):
        out += ["", "## Mismatches traced to the test's golden (counted above as mismatches)", ""]
        for g in s["mismatches_golden"]:
            out.append(f"- `{g['nodeid']}`: {g['reason']} (evidence: {g['evidence']})")
    if s["not_simulated_causes"]:
        out += ["", "## Positive tests that failed outside the simulator (not counted as runnable)", ""]
        for c in s["not_simulated_causes"]:
            out.append(f"- **{c['count']}** x {c['cause']}, e.g. `{c['examples'][0]}`")
    if s["negative_failures"]:
        out += ["", "## Negative tests that did not end as the harness expects", ""]
        for c in s["negative_failures"]:
            out.append(f"- **{c['count']}** x `{c['cause']}`, e.g. `{c['examples'][0]}`")
    if s["collect_errors"]:
        out += ["", "## Test files that failed to import", ""]
        for c in s["collect_errors"]:
            out.append(f"- `{c['file']}`: {c['message']}")
    out += render_rss(s.get("rss"))
    out += phase_times().render(s.get("time"))
    out += phase_times().render_profile(s.get("profile"))
    if s["skips"]:
        out += ["", "## Skipped by the harness", ""]
        for c in s["skips"]:
            out.append(f"- {c['count']} x {c['reason']}")
    return "\n".join(out) + "\n"


def _count_lines(path):
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for ln in f if ln.strip())


XDIST_MAX_RESTARTS = 2000   # workers xdist may start again in one run (-j > 1) after the memory cap ended one
MAX_RESTARTS = 50      # pytest started again at most this many times in one run after a test ended it


def build_parser():
    p = argparse.ArgumentParser(prog="run_nki_library.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snapshot", default=DEFAULT_SNAPSHOT,
                   help="nki-library checkout (default: $NKI_LIBRARY_PATH)")
    p.add_argument("--snapshot-commit", default=None,
                   help="commit of the snapshot, for the report (default: git rev-parse, else $NKI_LIBRARY_COMMIT)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="pytest-xdist workers (default 1: no xdist)")
    p.add_argument("--every", type=int, default=1, help="keep every N-th collected test (sorted node ids)")
    p.add_argument("--offset", type=int, default=0,
                   help="start the every-N-th selection at this collected test (0 <= offset < every); another "
                        "offset draws a disjoint sample")
    p.add_argument("--limit", type=int, default=0, help="keep at most this many of those")
    p.add_argument("--platform", default="trn2", help="--platform-target given to the harness (default trn2)")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    p.add_argument("--out", default=DEFAULT_OUT, help="report path without extension (.md and .json are written)")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temporary run directory (pytest output)")
    p.add_argument("--time-budget", type=float, default=0,
                   help="stop pytest after this many seconds and report the tests that finished (marked partial)")
    p.add_argument("--keep-outputs", action="store_true",
                   help="keep the harness's per-test output directories (its copies of every input, some of them "
                        "GBs); by default the harness deletes each after its test (--force-local-cleanup)")
    p.add_argument("--max-memory", type=float, default=0, metavar="GIB",
                   help="cap each pytest process's resident memory at this many GiB: a test above it fails with "
                        "ResidentMemoryExceeded (a MemoryError) and the run goes on; one still allocating 1 GiB "
                        "past it is ended (recorded as killed) and pytest starts again on the tests not yet run "
                        "(tests/support/nki_library/rss_cap.py); 0: no cap")
    p.add_argument("--retry-memory", type=float, default=0, metavar="GIB",
                   help="after the run, run the tests the --max-memory cap stopped once more, one at a time in one "
                        "pytest process, capped at this many GiB (a test whose own inputs or golden need more than "
                        "a two-worker cap allows still runs, alone, within the machine); 0: no retry")
    p.add_argument("--phases", action="store_true",
                   help="record where each test's time goes (harness phases, the simulate call) and report it")
    p.add_argument("--stub-kernels", action="store_true",
                   help="memory measurement only: no kernel is simulated; a stand-in returns the golden's values "
                        "as the outputs (tests/support/nki_library/sim_stub.py), so each test's peak is the "
                        "harness's own (its inputs, golden and comparison); outcomes say nothing about trnsim")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="run each simulate call under cProfile, statistics in DIR; the report ranks trnsim's "
                        "functions per family (slows the simulate calls)")
    p.add_argument("--resume", default=None,
                   help="a results.jsonl of an earlier run of the same selection (kept with --keep-tmp): its tests "
                        "are not run again, its records are counted with this run's, and it is rewritten with both")
    p.add_argument("--records", default=None, metavar="FILE",
                   help="write every test's record (this run's and --resume's) to FILE, gzip-compressed when it ends "
                        "in .gz, machine paths replaced: commit it beside the report, and a later run on another "
                        "machine goes on from it with --resume FILE")
    p.add_argument("--results", default=None,
                   help="write the report from a results.jsonl of an earlier run (kept with --keep-tmp) instead of "
                        "running pytest")
    p.add_argument("paths", nargs="*", default=["test/integration"],
                   help="test paths relative to the snapshot (default test/integration)")
    return p


def run(args, argv):
    if not args.snapshot:
        print("run_nki_library: no nki-library checkout: give --snapshot PATH or set NKI_LIBRARY_PATH", file=sys.stderr)
        return 2
    snap = os.path.abspath(args.snapshot)
    if not os.path.isfile(os.path.join(snap, "test", "conftest.py")):
        print(f"run_nki_library: {snap} is not an nki-library checkout (no test/conftest.py)", file=sys.stderr)
        return 2
    if args.resume and not os.path.isfile(args.resume):
        print(f"run_nki_library: --resume {args.resume}: no such file", file=sys.stderr)
        return 2
    if args.results and not os.path.isfile(args.results):
        print(f"run_nki_library: --results {args.results}: no such file", file=sys.stderr)
        return 2
    for v, what in ((args.jobs, "-j"), (args.every, "--every")):
        if v < 1:
            print(f"run_nki_library: {what} must be >= 1, got {v}", file=sys.stderr)
            return 2
    if not 0 <= args.offset < args.every:
        print(f"run_nki_library: --offset must be in [0, --every={args.every}), got {args.offset}", file=sys.stderr)
        return 2
    if args.limit < 0 or args.time_budget < 0 or args.max_memory < 0 or args.retry_memory < 0:
        print("run_nki_library: --limit, --time-budget, --max-memory and --retry-memory must be >= 0", file=sys.stderr)
        return 2
    if args.retry_memory and args.max_memory and args.retry_memory <= args.max_memory:
        print(f"run_nki_library: --retry-memory {args.retry_memory:g} must be above --max-memory "
              f"{args.max_memory:g} (the retry gives the stopped tests more room)", file=sys.stderr)
        return 2
    missing = [q for q in args.paths if not os.path.exists(os.path.join(snap, q.split("::")[0]))]
    if missing and not args.results:
        print(f"run_nki_library: no such test path in {snap}: {', '.join(missing)} (paths are relative to the "
              f"snapshot, e.g. test/integration/nkilib/core/topk)", file=sys.stderr)
        return 2
    missing = missing_harness_requirements()
    if missing and not args.results:
        print(f"run_nki_library: nki-library's test harness imports {', '.join(missing)}, not installed here: "
              f"pip install {' '.join(missing)}", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="trnsim-nkilib-")
    try:
        sdir, used = standin_path(tmp)
        results = os.path.join(tmp, "results.jsonl")
        # the child is its own pytest run: drop an enclosing pytest-xdist worker's markers (run from a test)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")) and k != "PYTEST_ADDOPTS"}
        # one BLAS/OpenMP thread per test process: the harness's goldens and trnsim's tile matmuls are small, and
        # threads fighting over the cores made single tests 10-50x slower (qkv_cte 65 s -> 3.8 s measured)
        env.setdefault("OMP_NUM_THREADS", "1")
        # the harness draws the shapes of its ranged and coverage tests at random while it collects, seeded from
        # NEURON_PYTHONHASHSEED, which its conftest sets to 0 only in pytest-xdist workers: without it a run with
        # one worker collects other test ids at every start, so --every picks another sample, and a restart (after
        # the memory cap) or --resume runs tests the first start never had.  The harness's own value, always.
        env.setdefault("NEURON_PYTHONHASHSEED", "0")
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env["PYTHONPATH"] = os.pathsep.join([sdir, SUPPORT, os.path.join(snap, "src"), snap]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if args.phases or args.profile:
            env["TRNSIM_NKILIB_PHASES"] = "1"
        if args.profile:
            env["TRNSIM_NKILIB_PROFILE"] = os.path.abspath(args.profile)
        if args.stub_kernels:
            env["TRNSIM_NKILIB_STUB_KERNELS"] = "1"
        if args.max_memory:
            env["TRNSIM_NKILIB_MAX_RSS"] = str(int(args.max_memory * GIB))
        env.update(PYTHONDONTWRITEBYTECODE="1", TRNSIM_NKILIB_RESULTS=results,
                   TRNSIM_NKILIB_EVERY=str(args.every), TRNSIM_NKILIB_LIMIT=str(args.limit),
                   TRNSIM_NKILIB_OFFSET=str(args.offset))
        cmd = [sys.executable, "-m", "pytest", *[os.path.join(snap, p) for p in args.paths],
               "--test-mode", "simulation", "--platform-target", args.platform,
               "--output-directory", os.path.join(tmp, "out"), "-p", "trnsim_nkilib_plugin",
               "-p", "no:cacheprovider", "--continue-on-collection-errors", "-q", "-o", "log_level=WARNING", "--no-header", "-rN", "--tb=no",
               "-o", f"artifacts_dir={os.path.join(tmp, 'artifacts')}"]
        cmd += ["-n", str(args.jobs) if args.jobs > 1 else "0"]   # the harness's conftest needs xdist loaded
        if args.jobs > 1:
            # xdist replaces a worker the memory cap ended, but by default only 4 per worker in a whole run; the
            # sample of benchmarks/nki-library-time.md ended 3 processes in 68 tests (hundreds in the whole suite)
            cmd += ["--max-worker-restart", str(XDIST_MAX_RESTARTS)]     # (xdist: 4 per worker by default)
        if not args.keep_outputs:
            cmd += ["--force-local-cleanup"]     # the harness's own option: each test's output directory removed
        if args.keyword:
            cmd += ["-k", args.keyword]
        t0 = time.time()
        partial = False
        crashed = None
        output = ""
        restarts = 0
        earlier = []
        if args.resume:
            earlier = read_records(args.resume)
            done = os.path.join(tmp, "done.txt")
            with open(done, "w") as f:
                f.write("\n".join(r["nodeid"] for r in earlier if r.get("when") != "collect"))
            env["TRNSIM_NKILIB_DONE"] = done
        if args.results:
            results = args.results

        def drive(cmd, env, res, skip):
            """pytest run, and started again after a test ended it, until every selected test is recorded in ``res``
            (or the time budget ends): ``(output, partial, signal of the last crash or None, restarts)``.  ``skip``:
            node ids never to run again (an earlier run's)."""
            output, partial, crashed, restarts = "", False, None, 0
            while True:
                n_before = _count_lines(res)
                left = (args.time_budget - (time.time() - t0)) if args.time_budget else None
                proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
                try:
                    out, _ = proc.communicate(timeout=max(left, 1.0) if left is not None else None)
                except subprocess.TimeoutExpired:
                    partial = True
                    os.killpg(proc.pid, 15)            # pytest and its xdist workers (their own session)
                    out, _ = proc.communicate()
                output += out
                if partial or proc.returncode >= 0:
                    return output, partial, crashed, restarts
                # ended by a signal (SIGKILL: the memory cap's hard limit, the plugin after a test the cap stopped
                # kept its memory, or the kernel's out-of-memory killer): the test that was running is recorded as
                # killed, and pytest starts again on the tests not yet recorded (if this start recorded any)
                crashed = -proc.returncode
                killed = record_killed(res, crashed)
                if (not killed and _count_lines(res) <= n_before) or restarts >= MAX_RESTARTS:
                    return output, True, crashed, restarts   # no progress to build on: the rest did not run
                restarts += 1
                done = os.path.join(tmp, "done.txt")
                now = {r["nodeid"] for r in read_records(res)}
                with open(done, "w") as f:
                    f.write("\n".join(sorted(now | skip)))
                env["TRNSIM_NKILIB_DONE"] = done
                crashed = None

        retried, retry_results = [], results + ".retry"
        if not args.results:
            output, partial, crashed, restarts = drive(
                cmd, env, results, {r["nodeid"] for r in earlier if r.get("when") != "collect"})
            if args.retry_memory and not partial and os.path.isfile(results):
                retried = capped_tests(earlier + read_records(results))
            if retried:
                # the tests the cap stopped, once more: one process, one test at a time, the larger cap
                only = os.path.join(tmp, "only.txt")
                with open(only, "w") as f:
                    f.write("\n".join(retried))
                renv = {k: v for k, v in env.items() if k != "TRNSIM_NKILIB_DONE"}
                renv.update(TRNSIM_NKILIB_ONLY=only, TRNSIM_NKILIB_RESULTS=retry_results,
                            TRNSIM_NKILIB_MAX_RSS=str(int(args.retry_memory * GIB)))
                rcmd = [a for a in cmd if a != "--max-worker-restart" and a != str(XDIST_MAX_RESTARTS)]
                rcmd[rcmd.index("-n") + 1] = "0"
                out, partial, crashed, more = drive(rcmd, renv, retry_results, set())
                output += out
                restarts += more
        wall = time.time() - t0
        recs = list(earlier)
        for res in (results, retry_results):             # a retried test's records come after its first ones
            if os.path.exists(res):
                recs += read_records(res)
        recs = list({(r["nodeid"], r.get("when")): r for r in recs}.values())   # a test (or file) once: the latest
        for r in recs:
            if r["nodeid"] in set(retried):
                r["retried_max_memory_gib"] = args.retry_memory
        phases = []
        for res in (results, retry_results):
            if os.path.exists(res + ".phases"):
                with open(res + ".phases") as f:
                    phases += [json.loads(ln) for ln in f if ln.strip()]
        if phases:
            attach_phases(recs, phases)
        if args.resume and not args.results:
            write_records(args.resume, recs, snap, tmp)      # the resumed file now holds both runs
        if args.records:
            write_records(args.records, recs, snap, tmp)
        if not recs:
            print(output[-4000:], file=sys.stderr)
            print("run_nki_library: pytest recorded no test", file=sys.stderr)
            return 1
        summary = classify(recs)
        if args.profile:
            summary["profile"] = phase_times().profile_summary(args.profile)
        from conformance.report import provenance
        made = provenance()                 # the trnsim commit and date this report is made at
        rep = {"trnsim_commit": made["commit"], "made": made["made"], "snapshot": os.path.basename(snap), "snapshot_commit": snapshot_commit(snap, args.snapshot_commit),
               "platform": args.platform, "every": args.every, "offset": args.offset, "limit": args.limit, "jobs": args.jobs,
               "command": "python tools/run_nki_library.py " + " ".join(
                   "<snapshot>" if a in (args.snapshot, snap) else _shown(a) for a in argv),   # no machine's paths
               "standins": used, "max_memory_gib": args.max_memory or None, "wall_s": wall, "partial": partial,
               "crashed_signal": crashed, "restarts": 0 if args.results else restarts,
               "resumed_from": _shown(args.resume) if args.resume else args.resume, "summary": summary,
               "records": _shown(args.records) if args.records else None,
               "retry_memory_gib": args.retry_memory or None, "retried": len(retried),
               "stub_kernels": bool(args.stub_kernels),
               "tail": output.strip().splitlines()[-1:] if output.strip() else []}
        from trnsim.fileio import atomic_write, atomic_write_json
        os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
        atomic_write_json(args.out + ".json", rep, indent=1)
        with atomic_write(args.out + ".md") as f:
            f.write(render_md(rep))
        s = summary
        print(f"nki-library @ {rep['snapshot_commit']}: {s['passed']} / {s['runnable']} runnable positive tests "
              f"passed ({_pct(s['passed'], s['runnable'])}), {s['mismatches']} numeric mismatches, "
              f"{s['failed']} other failures, negative {s['negative_passed']}/{s['negative']}, "
              f"{s['skipped']} skipped, {len(s['collect_errors'])} files not importable; "
              f"report {args.out}.md ({wall:.0f} s)")
        return 0
    finally:
        if args.keep_tmp:
            print(f"run directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def read_records(path):
    """The records of a results file (JSON lines; gzip-compressed when its name ends in .gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def write_records(path, recs, snap, tmp):
    """``recs`` into ``path`` atomically (gzip when it ends in .gz; fixed header time, so the same records give the
    same bytes), the snapshot's, the run directory's and the repository's paths in messages shown as ``<snapshot>``,
    ``<run>`` and ``<trnsim>``."""
    from trnsim.fileio import atomic_write
    places = sorted(((snap, "<snapshot>"), (tmp, "<run>"), (REPO, "<trnsim>")), key=lambda p: -len(p[0]))

    def clean(r):
        m = r.get("message")
        if isinstance(m, str):
            for place, name in places:
                m = m.replace(place, name)
            r = dict(r, message=m)
        return r
    text = "".join(json.dumps(clean(r)) + "\n" for r in recs).encode("utf-8")
    with atomic_write(path, "wb") as f:
        f.write(gzip.compress(text, mtime=0) if path.endswith(".gz") else text)


def _shown(arg):
    """A command-line argument as a report shows it: an absolute path inside the repository relative to it, one
    outside (a run directory, a results file) as ``<outside>/`` and its file name, so that no machine's paths go into
    a committed report."""
    if not os.path.isabs(arg):
        return arg
    if os.path.commonpath([os.path.abspath(arg), REPO]) == REPO:
        return os.path.relpath(arg, REPO)
    return "<outside>/" + os.path.basename(arg)


# third-party packages nki-library's own harness (test/conftest.py, test/utils/) imports at start-up and that no
# stand-in replaces here (distribution name for pip beside each)
HARNESS_REQUIREMENTS = {"boto3": "boto3", "botocore": "botocore", "attr": "attrs",
                        "scipy": "scipy"}   # scipy: test/integration/nkilib/utils/test_kernel_common.py


def missing_harness_requirements():
    import importlib.util
    return [dist for mod, dist in HARNESS_REQUIREMENTS.items() if importlib.util.find_spec(mod) is None]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    return run(args, argv)


if __name__ == "__main__":
    sys.exit(main())
