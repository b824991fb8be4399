#!/usr/bin/env python3
"""trnsim's kernel time against AWS's recorded hardware counts (the attention CTE development set, issue 29).

    python benchmarks/hw_counts.py [--snapshot PATH (default: $NKI_LIBRARY_PATH)] [--out benchmarks/reports/hw-counts]

nki-library's attention CTE tests (``test/integration/nkilib/core/attention/test_attention_cte.py``) carry, per
configuration, the time AWS measured on a Trainium2 as the parameter ``tpbSgCyclesSum`` (neuron-profile's
``TpbSgCyclesSum``, read as picoseconds: docs/guides/hardware-counts.md says why).  This script runs those tests
from a fetched snapshot through AWS's own harness in simulation mode (pytest, ``--test-mode simulation``,
``--platform-target trn2``, the stand-ins and plugin of ``tools/run_nki_library.py``), and replaces one function of
the harness, ``test.utils.simulation_setup.simulate_kernel``, by a shape-only timing of the same call: the kernel
the harness launches, with its inputs, its LNC (``kernel[lnc]``, one program per physical core) and its target
(``NKI_NC_VERSION``).  No numerics run and no output is validated; the test is then reported as skipped "timed".

Written: ``<out>.json`` and ``<out>.md``: per configuration the hardware time, trnsim's time, their ratio, the
per-engine busy time, and for the worst ratios the Timeline's top findings; the median absolute error and the
scale-free error (defined in the guide).  Without the snapshot it says so and exits 0 (CI has none).

Only the development set is read: the test functions of ``test_attention_cte.py`` named in ``DEV_FUNCTIONS``.
Other families' counts (rmsnorm_quant, MLP, ...) are held out and never run here.

The same file is the pytest plugin loaded into the harness's run (``-p benchmarks.hw_counts``); its hooks only
act when ``TRNSIM_HW_COUNTS_RESULTS`` is set.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_SNAPSHOT = os.environ.get("NKI_LIBRARY_PATH", "")
DEFAULT_OUT = os.path.join(REPO, "benchmarks", "reports", "hw-counts")
TEST_FILE = "test/integration/nkilib/core/attention/test_attention_cte.py"
# every test function of the file whose configurations carry a tpbSgCyclesSum (the context-parallel and sweep
# functions carry none, or a "qor" figure of another meaning)
DEV_FUNCTIONS = ("test_attention_cte_no_cp_unit", "test_attention_cte_no_cp_vnc_apc_klr_unit",
                 "test_attention_cte_no_cp_vnc_unit", "test_attention_cte_no_cp_vnc_gqa_unit",
                 "test_attention_cte_no_cp_vnc_barometer_unit")
PS_PER_NS = 1000.0
WORST = 5           # configurations whose findings the report lists


# ---------------------------------------------------------------------------------------------------------------
# the plugin (runs inside the harness's pytest process)

_RESULTS = os.environ.get("TRNSIM_HW_COUNTS_RESULTS")
_CURRENT = {}


def hardware_ps(value):
    """The recorded count of one configuration, or None.  A pair ``(a, b)`` holds the measured count first (the
    second, smaller or None, is a goal the test file sets for some configurations); read as picoseconds."""
    if isinstance(value, (tuple, list)):
        value = value[0] if value else None
    if value is None:
        return None
    return float(value)


def pytest_collection_modifyitems(session, config, items):
    if not _RESULTS:
        return
    keep, drop = [], []
    for it in items:
        spec = getattr(it, "callspec", None)
        fn = getattr(it, "originalname", None) or it.name.split("[")[0]
        ok = (fn in DEV_FUNCTIONS and spec is not None
              and hardware_ps(spec.params.get("tpbSgCyclesSum")) is not None)
        (keep if ok else drop).append(it)
    items[:] = keep
    if drop:
        config.hook.pytest_deselected(items=drop)


def pytest_sessionstart(session):
    if not _RESULTS:
        return
    import test.utils.simulation_setup as sim_setup
    sim_setup.simulate_kernel = _timed_simulate_kernel


def pytest_runtest_setup(item):
    if _RESULTS:
        _CURRENT.clear()
        _CURRENT["nodeid"] = item.nodeid
        _CURRENT["params"] = {k: _jsonable(v) for k, v in item.callspec.params.items()}


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    return getattr(v, "__name__", None) or str(v)


def _timed_simulate_kernel(kernel_func, kernel_input, lnc_count):
    """Stands in for the harness's ``simulate_kernel``: the same kernel, inputs and LNC, run shape-only and
    scheduled; the record goes to the results file and the test ends as skipped."""
    import pytest

    import trnsim
    from trnsim.profiler.findings import findings
    target = os.environ.get("NKI_NC_VERSION") or None
    cleaned = {k.removesuffix(".must_alias_input"): v for k, v in kernel_input.items()}
    t0 = time.time()
    override = os.environ.get("TRNSIM_HW_COUNTS_LNC")
    rec = dict(_CURRENT, lnc=int(lnc_count), target=target)
    if override:                 # diagnostic (--lnc): another LNC than the harness's
        rec.update(harness_lnc=int(lnc_count), lnc=int(override))
        lnc_count = int(override)
    try:
        prof = trnsim.profile(kernel_func, grid=int(lnc_count), target=target, execute=False)(**cleaned)
    except Exception as e:      # a refusal is a result: the report lists it
        rec.update(error=f"{type(e).__name__}: {str(e)[:400]}", wall_s=round(time.time() - t0, 1))
        _write(rec)
        raise
    tl = prof.timeline
    busy = {}
    for (c, e), v in tl.busy_ns().items():
        busy[e] = max(busy.get(e, 0.0), v)          # the busiest core's figure per engine
    flops = sum(f for f, e in zip(tl.flops, tl.engine) if e == "tensor")
    # the Tensor Engine's bound: its flops at the dense BF16 rate on every launched core (a lower bound of the
    # kernel's time whatever its dtype: fp32 runs slower, fp8 is not used here)
    roofline_ns = flops / (tl.target.tensor_bf16_flops_per_core * tl.ncores) * 1e9
    rec.update(trnsim_ns=tl.total_ns, instructions=len(tl), busy_ns=busy, tensor_flops=flops,
               ncores=tl.ncores, roofline_ns=roofline_ns,
               top_lines=_top_lines(tl),
               critical=tl.critical_path_share(), findings=findings(tl, limit=4),
               wall_s=round(time.time() - t0, 1))
    _write(rec)
    pytest.skip("hw_counts: timed")


def _top_lines(tl, n=6):
    """The kernel source lines with the most engine time (summed over cores), per line: engine, count, ms, bytes."""
    agg = {}
    for e, w, loc, nb in zip(tl.engine, tl.work, tl.loc, tl.nbytes):
        k = (e, f"{os.path.basename(loc[0])}:{loc[1]}" if loc else "?")
        a = agg.setdefault(k, [0, 0.0, 0])
        a[0] += 1
        a[1] += w
        a[2] += nb or 0
    top = sorted(agg.items(), key=lambda kv: -kv[1][1])[:n]
    return [{"engine": e, "line": ln, "count": c, "ms": w / 1e6, "bytes": b} for (e, ln), (c, w, b) in top]


def _write(rec):
    with open(_RESULTS, "a") as f:
        f.write(json.dumps(rec) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# the driver

def config_label(p):
    """A short name of one configuration from its test parameters."""
    keys = [("vnc_degree", "lnc"), ("bs", "bs"), ("bs_kv", "bskv"), ("seqlen_q", "q"), ("seqlen_kv", "kv"),
            ("prior_len", "prior"), ("prior_used_len", "used"), ("d", "d")]
    parts = [f"{short}{p[k]}" for k, short in keys if k in p and p[k] is not None]
    parts.append(str(p.get("dtype", "")).replace("float", "f").replace("bf16", "bf16"))
    for k, short in (("causal_mask", "causal"), ("tp_q", "tpq"), ("tp_k", "tpk"), ("tp_out", "tpo"),
                     ("sink", "sink")):
        if p.get(k):
            parts.append(short)
    if p.get("sliding_window"):
        parts.append(f"swa{p['sliding_window']}")
    return " ".join(parts)


def error_figures(ratios):
    """``(median |r - 1|, scale-free error, best scale)`` of ratios r = trnsim / hardware.  The scale-free error
    is median |ln(r / s)| with s the median ratio (the single scale factor that minimises the median of
    |ln(r / s)|... up to ties), reported as exp(.) - 1, a relative error."""
    if not ratios:
        return None, None, None
    mae = statistics.median(abs(r - 1.0) for r in ratios)
    s = statistics.median(ratios)
    sf = math.exp(statistics.median(abs(math.log(r / s)) for r in ratios)) - 1.0
    return mae, sf, s


def build_report(recs, commit, wall_s, before=None, before_label="an earlier run"):
    """The report's dict from the plugin's records; ``before``: records of an earlier run (another trnsim) whose
    times are shown beside, by node id."""
    prev = {r["nodeid"]: r for r in (before or []) if "trnsim_ns" in r}
    rows = []
    for r in recs:
        p = r.get("params", {})
        hw = hardware_ps(p.get("tpbSgCyclesSum"))
        row = {"nodeid": r["nodeid"], "function": r["nodeid"].split("::")[-1].split("[")[0],
               "config": config_label(p), "lnc": r.get("lnc"), "hardware_ns": hw / PS_PER_NS if hw else None}
        if "error" in r:
            row["error"] = r["error"]
        else:
            row.update(trnsim_ns=r["trnsim_ns"], ratio=r["trnsim_ns"] / (hw / PS_PER_NS),
                       instructions=r["instructions"], busy_ns=r["busy_ns"], critical=r["critical"],
                       roofline_ns=r.get("roofline_ns"), top_lines=r.get("top_lines"),
                       findings=r["findings"], wall_s=r.get("wall_s"))
        if r["nodeid"] in prev and hw:
            row["before_ns"] = prev[r["nodeid"]]["trnsim_ns"]
            row["before_ratio"] = row["before_ns"] / (hw / PS_PER_NS)
        rows.append(row)
    ratios = [x["ratio"] for x in rows if "ratio" in x]
    mae, sf, scale = error_figures(ratios)
    b_ratios = [x["before_ratio"] for x in rows if "before_ratio" in x]
    b_mae, b_sf, b_scale = error_figures(b_ratios)
    over = [x["hardware_ns"] / x["roofline_ns"] for x in rows if x.get("roofline_ns")]
    per_fn = {}
    for fn in DEV_FUNCTIONS:
        rs = [x["ratio"] for x in rows if x["function"] == fn and "ratio" in x]
        if rs:
            m, f, sc = error_figures(rs)
            per_fn[fn] = {"configurations": len(rs), "median_ratio": sc, "median_abs_error": m,
                          "scale_free_error": f}
    worst = sorted((x for x in rows if "ratio" in x), key=lambda x: -abs(math.log(x["ratio"])))[:WORST]
    overridden = sorted({r["lnc"] for r in recs if "harness_lnc" in r})
    return {"snapshot_commit": commit, "test_file": TEST_FILE, "functions": list(DEV_FUNCTIONS),
            "lnc_override": overridden[0] if overridden else None,
            "configurations": len(rows), "timed": len(ratios),
            "refused": sum(1 for x in rows if "error" in x),
            "median_abs_error": mae, "scale_free_error": sf, "median_ratio": scale,
            "before": {"median_abs_error": b_mae, "scale_free_error": b_sf, "median_ratio": b_scale,
                       "timed": len(b_ratios), "label": before_label} if b_ratios else None,
            "hardware_over_roofline": {"min": min(over), "median": statistics.median(over), "max": max(over)}
            if over else None,
            "per_function": per_fn, "worst": [x["nodeid"] for x in worst], "rows": rows, "wall_s": round(wall_s, 1)}


def _ms(ns):
    return f"{ns / 1e6:.3f}"


def render_md(rep):
    out = [f"# trnsim time against AWS's recorded hardware counts (attention CTE development set)", "",
           f"nki-library @ {rep['snapshot_commit']}, `{rep['test_file']}`, functions "
           + ", ".join(f"`{f}`" for f in rep["functions"]) + ".  Produced by `python benchmarks/hw_counts.py` "
           "(docs/guides/hardware-counts.md); hardware time = `tpbSgCyclesSum` read as picoseconds.", ""]
    if rep.get("lnc_override"):
        out += [f"**Diagnostic run: every configuration launched with LNC={rep['lnc_override']}, not the "
                "harness's LNC** (`--lnc`).", ""]
    if rep["median_abs_error"] is not None:
        out += [f"- configurations: {rep['configurations']} ({rep['timed']} timed, {rep['refused']} refused)",
                f"- median ratio trnsim / hardware: {rep['median_ratio']:.2f}",
                f"- median absolute error: {100 * rep['median_abs_error']:.1f}%",
                f"- scale-free error: {100 * rep['scale_free_error']:.1f}%"]
        b = rep.get("before")
        if b:
            out.append(f"- before ({b.get('label', 'an earlier run')}): median ratio "
                       f"{b['median_ratio']:.2f}, median absolute error {100 * b['median_abs_error']:.1f}%, "
                       f"scale-free {100 * b['scale_free_error']:.1f}% ({b['timed']} configurations)")
        h = rep.get("hardware_over_roofline")
        if h:
            out.append(f"- hardware time (as picoseconds) over the Tensor Engine roofline of the kernel's matmuls "
                       f"(bf16 rate, all launched cores): min {h['min']:.2f}, median {h['median']:.2f}, "
                       f"max {h['max']:.2f}")
        out.append("")
    if rep.get("per_function"):
        out += ["| function | configurations | median ratio | median abs error | scale-free error |",
                "|---|---|---|---|---|"]
        for fn, v in rep["per_function"].items():
            out.append(f"| {fn} | {v['configurations']} | {v['median_ratio']:.2f} | "
                       f"{100 * v['median_abs_error']:.1f}% | {100 * v['scale_free_error']:.1f}% |")
        out.append("")
    out += ["| function | configuration | LNC | hardware ms | TE roofline ms | before ms | before ratio | "
            "trnsim ms | ratio | busiest engine (ms) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for x in rep["rows"]:
        fn = x["function"].replace("test_attention_cte_", "")
        if "error" in x:
            out.append(f"| {fn} | {x['config']} | {x['lnc']} | {_ms(x['hardware_ns'])} | | | | refused | | "
                       f"{x['error'][:120]} |")
            continue
        b = {e: v for e, v in x["busy_ns"].items()}
        top = max(b.items(), key=lambda kv: kv[1]) if b else ("", 0.0)
        roof = _ms(x["roofline_ns"]) if x.get("roofline_ns") else ""
        bef = (_ms(x["before_ns"]), f"{x['before_ratio']:.2f}") if "before_ns" in x else ("", "")
        out.append(f"| {fn} | {x['config']} | {x['lnc']} | {_ms(x['hardware_ns'])} | {roof} | {bef[0]} | "
                   f"{bef[1]} | {_ms(x['trnsim_ns'])} | {x['ratio']:.2f} | {top[0]} {_ms(top[1])} |")
    out += ["", "## Worst configurations (|ln ratio| largest): the Timeline's findings", ""]
    by_id = {x["nodeid"]: x for x in rep["rows"]}
    for nid in rep["worst"]:
        x = by_id[nid]
        busy = ", ".join(f"{e} {_ms(v)}" for e, v in sorted(x["busy_ns"].items(), key=lambda kv: -kv[1]))
        out += [f"### {x['config']} (ratio {x['ratio']:.2f})", "", f"- busy per engine (ms, busiest core): {busy}"]
        out += [f"- {f}" for f in x["findings"]] + [""]
    return "\n".join(out) + "\n"


def snapshot_commit(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("NKI_LIBRARY_COMMIT", "unknown")


def run_harness(snap, results, keyword=None, timeout=None, lnc=None):
    """Run the harness's pytest on the development set with this file as a plugin; records go to ``results``."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import run_nki_library as rnl
    tmp = tempfile.mkdtemp(prefix="trnsim-hwcounts-")
    sdir, _ = rnl.standin_path(tmp)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")) and k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([sdir, rnl.SUPPORT, REPO, os.path.join(snap, "src"), snap]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(PYTHONDONTWRITEBYTECODE="1", TRNSIM_HW_COUNTS_RESULTS=results, NKILIB_SIMULATION_RUN_ALL="1",
               TRNSIM_PROGRESS="0")
    if lnc:
        env["TRNSIM_HW_COUNTS_LNC"] = str(lnc)
    kexpr = " or ".join(DEV_FUNCTIONS)
    if keyword:
        kexpr = f"({kexpr}) and ({keyword})"
    cmd = [sys.executable, "-m", "pytest", os.path.join(snap, TEST_FILE), "--test-mode", "simulation",
           "--platform-target", "trn2", "--output-directory", os.path.join(tmp, "out"),
           "-p", "trnsim_nkilib_plugin", "-p", "benchmarks.hw_counts", "-p", "no:cacheprovider", "-q",
           "-o", "log_level=WARNING", "--no-header", "-rN", "--tb=line", "-n", "0", "--force-local-cleanup",
           "-o", f"artifacts_dir={os.path.join(tmp, 'artifacts')}", "-k", kexpr]
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
    return proc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n  python benchmarks/hw_counts.py\n"
                                        "  python benchmarks/hw_counts.py -k 'no_cp_unit and 16384' --out /tmp/hw")
    ap.add_argument("--snapshot", default=DEFAULT_SNAPSHOT, help="nki-library checkout (default: $NKI_LIBRARY_PATH)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="report path without extension (default %(default)s)")
    ap.add_argument("-k", dest="keyword", default=None, help="narrow the configurations (pytest -k expression)")
    ap.add_argument("--results", default=None, help="build the report from an earlier run's JSON lines")
    ap.add_argument("--before", default=None, help="records of an earlier run (JSON lines) to show beside")
    ap.add_argument("--before-label", default="an earlier run", help="what --before's records are (for the report)")
    ap.add_argument("--lnc", type=int, choices=(1, 2), default=None,
                    help="diagnostic: launch every configuration with this LNC instead of the harness's")
    args = ap.parse_args(argv)
    snap = os.path.abspath(args.snapshot)
    if not args.results and not os.path.isfile(os.path.join(snap, TEST_FILE)):
        print(f"hw_counts: no nki-library snapshot at {snap} (no {TEST_FILE}): nothing to compare, skipped")
        return 0
    t0 = time.time()
    if args.results:
        results = args.results
    else:
        results = os.path.join(tempfile.mkdtemp(prefix="trnsim-hwcounts-res-"), "results.jsonl")
        open(results, "w").close()
        proc = run_harness(snap, results, args.keyword, lnc=args.lnc)
        if proc.returncode not in (0, 5) and not os.path.getsize(results):
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
            return 1
    with open(results) as f:
        recs = [json.loads(ln) for ln in f if ln.strip()]
    before = None
    if args.before:
        with open(args.before) as f:
            before = [json.loads(ln) for ln in f if ln.strip()]
    rep = build_report(recs, snapshot_commit(snap), time.time() - t0, before, args.before_label)
    from trnsim.fileio import atomic_write, atomic_write_json
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    atomic_write_json(args.out + ".json", rep, indent=1)
    with atomic_write(args.out + ".md") as f:
        f.write(render_md(rep))
    if rep["median_abs_error"] is None:
        print(f"hw_counts: no configuration timed ({rep['refused']} refused); records in {results}")
        return 1
    print(f"hw_counts @ {rep['snapshot_commit']}: {rep['timed']} timed, {rep['refused']} refused; median ratio "
          f"{rep['median_ratio']:.2f}, median abs error {100 * rep['median_abs_error']:.1f}%, scale-free "
          f"{100 * rep['scale_free_error']:.1f}%  (records {results})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
