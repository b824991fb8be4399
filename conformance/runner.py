"""``trnsim conformance``: run the suites in parallel worker processes, resumably, and write the reports.

Each op's records are written to ``OUT/records/`` as soon as they are done (atomically), so an interrupted run
continues where it stopped; ``--fresh`` starts over.  The reports are ``OUT/report.json`` and ``OUT/report.md``.
Several runs may share ``OUT``: every file is written atomically, each run keeps its crash markers in a directory
of its own (``OUT/running/<pid>-<random>``), and the reports are written under a lock (``OUT/.lock``), so that the
JSON and Markdown reports left behind come from the same run.
The exit status is 1 when any group is a ``mismatch`` that ``known_mismatches.json`` does not explain (the CI
gate), 0 otherwise; explained mismatches are still reported as mismatches, with their cause.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

from trnsim.cliutil import OneLineParser, ProgressLine
from trnsim.fileio import FileWriteError, atomic_write, ensure_writable_dir

from . import report

__all__ = ["main", "run", "records_dir", "LAST_RUN"]

LAST_RUN = {}     # what the last run() did: ops read back from earlier records, ops run now


def records_dir(out):
    return os.path.join(out, "records")


def _params_tag(p):
    return hashlib.sha1(json.dumps(p, sort_keys=True).encode()).hexdigest()[:12]


def _record_path(out, suite, key, tag):
    safe = key.replace("/", "_")
    return os.path.join(records_dir(out), suite, f"{safe}.{tag}.json")


# -- worker side ------------------------------------------------------------------------------------------
def _init_worker():
    os.environ["TORCHNEURON_TARGET"] = "sim"
    import warnings
    warnings.simplefilter("ignore")
    import torch  # noqa: F401  (registers the neuron device through the torch.backends entry point)
    import trnsim.backend  # noqa: F401


def _run_ops_task(key, params, running_dir):
    from .ops_sweep import list_ops, op_key, run_op
    marker = os.path.join(running_dir, key.replace("/", "_"))
    with atomic_write(marker) as f:     # left behind if this process dies inside the op
        f.write(key)
    ops = [o for o in list_ops(key) if op_key(o) == key]
    if not ops:
        recs = [{"suite": "ops", "name": key, "dtype": "-", "mode": "forward", "status": "error",
                 "counts": {"error": 1}, "samples": 1, "detail": "no such OpInfo", "seconds": 0.0}]
    else:
        recs = run_op(ops[0], dtypes=params["dtypes"], modes=params["modes"], device=params["device"],
                      max_samples=params["max_samples"], timeout_s=params["timeout"])
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker)
    return key, recs


def _run_models_task(key, params, running_dir):
    import signal
    from .models_sweep import run_model
    marker = os.path.join(running_dir, key.replace("/", "_"))
    with atomic_write(marker) as f:
        f.write(key)

    def _alarm(signum, frame):
        raise TimeoutError(f"timeout after {params['timeout']:.0f} s")
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, params["timeout"])
    try:
        rec = run_model(key, device=params["device"])
    except TimeoutError as e:
        rec = {"suite": "models", "name": key, "dtype": "float32", "mode": "forward+backward", "status": "error",
               "detail": str(e), "fallbacks": {}, "ops": {}, "sim_us": 0.0, "worst_rel_err": 0.0}
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(marker)
    return key, [rec]


def _crash_record(key, params):
    if params.get("suite") == "models":
        return [{"suite": "models", "name": key, "dtype": "float32", "mode": "forward+backward", "status": "error",
                 "detail": "the worker process died inside this model (a crash in native code: abort or segfault)",
                 "fallbacks": {}, "ops": {}, "sim_us": 0.0, "worst_rel_err": 0.0}]
    return [{"suite": "ops", "name": key, "dtype": d, "mode": "forward", "status": "error", "counts": {"error": 1},
             "samples": 1, "detail": "the worker process died inside this op (a crash in native code: abort or "
             "segfault); rerun alone: python -m conformance --suite ops --ops " + key, "seconds": 0.0}
            for d in params["dtypes"]]


def _pool_round(keys, params, jobs, running_dir, on_done):
    """Run ``keys`` in a pool until done or a worker dies; returns ``(suspects, not_run)``: the keys that were
    running when a worker died, and those that never ran."""
    import glob
    for m in glob.glob(os.path.join(running_dir, "*")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(m)
    ctx = multiprocessing.get_context("spawn")
    done = set()
    broken = False
    with cf.ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=ctx, initializer=_init_worker) as ex:
        task = _run_models_task if params.get("suite") == "models" else _run_ops_task
        futs = {ex.submit(task, k, params, running_dir): k for k in keys}
        for fut in cf.as_completed(futs):
            k = futs[fut]
            try:
                _, recs = fut.result()
            except cf.process.BrokenProcessPool:
                broken = True
                continue
            done.add(k)
            on_done(k, recs)
    if not broken:
        return [], []
    suspects = []
    for m in glob.glob(os.path.join(running_dir, "*")):
        with contextlib.suppress(FileNotFoundError):
            with open(m, encoding="utf-8") as f:
                suspects.append(f.read())
            os.unlink(m)
    rest = [k for k in keys if k not in done and k not in suspects]
    return suspects, rest


def _own_running_dir(out, kind):
    """A directory for this run's crash markers only (``OUT/kind/<pid>-<random>``): runs sharing ``OUT`` never
    clear or read each other's markers."""
    parent = os.path.join(out, kind)
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent)


def _remove_running_dir(d):
    shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(OSError):      # the parent goes when no other run uses it
        os.rmdir(os.path.dirname(d))


@contextlib.contextmanager
def _out_lock(out):
    """Held while the reports are written, so that ``report.json`` and ``report.md`` come from the same run when
    several runs share ``out`` (each file is atomic on its own)."""
    try:
        from filelock import FileLock
    except ImportError:         # pragma: no cover - filelock comes with torch; without it each file is still atomic
        yield
        return
    with FileLock(os.path.join(out, ".lock")):
        yield


class _Progress:
    """Groups done, with their statuses so far: a bar on a terminal (``trnsim.cliutil.ProgressLine``), nothing in
    a pipe or a CI log (the summary line at the end says the same)."""

    def __init__(self, total, label, stream=None):
        self.total = total
        self.done = 0
        self.label = label
        self.line = ProgressLine(None, stream)
        self.counts = {}

    def step(self, name, records):
        self.done += 1
        for r in records:
            self.counts[r["status"]] = self.counts.get(r["status"], 0) + 1
        c = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        self.line.bar(self.done, self.total, self.label, f"{c + ' | ' if c else ''}{name[:30]}")
        if self.done >= self.total:
            self.line.clear()


def run(suite="all", dtypes=None, ops=None, out="conformance-report", jobs=2, modes=("forward", "backward"),
        max_samples=None, timeout=60.0, fresh=False, device="neuron", progress=True):
    """Run the suites; return all records (also kept under ``out/records``)."""
    from .ops_sweep import DEFAULT_DTYPES
    os.makedirs(records_dir(out), exist_ok=True)
    records = []
    if suite in ("ops", "all"):
        params = {"dtypes": list(dtypes or DEFAULT_DTYPES), "modes": list(modes), "device": device,
                  "max_samples": max_samples, "timeout": timeout}
        from .ops_sweep import list_ops, op_key
        keys = sorted({op_key(o) for o in list_ops(ops)})
        records.extend(_run_keyed(out, "ops", "running", keys, params, jobs, fresh, progress))
    if suite == "models":
        records.extend(_run_models(ops, out, jobs, timeout if timeout != 60.0 else 600.0, fresh, device, progress))
    if suite in ("nki", "all"):
        try:
            from .nki_suite import run_nki
        except ImportError as e:
            raise SystemExit(f"trnsim conformance: the NKI suite is not available ({e})") from None
        prog = _Progress(1, "nki") if progress else None
        cb = None
        if prog is not None:
            def cb(done, total, name):
                prog.total = total
                prog.done = done - 1
                prog.step(name, [])
        records.extend(run_nki(ops if suite == "nki" else None, list(dtypes) if dtypes else None, cb))
    return records


def _run_models(pattern, out, jobs, timeout, fresh, device, progress):
    try:
        from .models_sweep import list_models
        import transformers  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"trnsim conformance --suite models needs transformers (pip install -e '.[models]'): {e}")
    params = {"suite": "models", "device": device, "timeout": timeout,
              "transformers": transformers.__version__}
    return _run_keyed(out, "models", "running-models", list_models(pattern), params, jobs, fresh, progress)


def _run_keyed(out, kind, running_name, keys, params, jobs, fresh, progress):
    """Records of every key of one suite (``kind``, "ops" or "models"): read from ``out``'s records where a run
    with the same parameters left them (unless ``fresh``), the rest run in the worker pool; a key whose worker
    died is run alone, and one that dies alone gets a crash record."""
    tag = _params_tag(params)
    records, todo = [], []
    for k in keys:
        p = _record_path(out, kind, k, tag)
        if not fresh and os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                records.extend(json.load(f))
        else:
            todo.append(k)
    LAST_RUN.update({f"{kind}_from_records": len(keys) - len(todo), f"{kind}_run": len(todo)})
    prog = _Progress(len(todo), kind) if progress and todo else None
    running_dir = _own_running_dir(out, running_name)

    def on_done(k, recs):
        report.atomic_write(_record_path(out, kind, k, tag), json.dumps(recs))
        records.extend(recs)
        if prog:
            prog.step(k, recs)
    remaining = todo
    try:
        while remaining:
            suspects, remaining = _pool_round(remaining, params, jobs, running_dir, on_done)
            for k in suspects:          # run each suspect alone: the one that dies alone is the culprit
                again, _ = _pool_round([k], params, 1, running_dir, on_done)
                if again:
                    on_done(k, _crash_record(k, params))
    finally:
        _remove_running_dir(running_dir)
    return records


def _models_main(a, t0):
    from . import models_report
    baseline = models_report.load_models_json(a.baseline) if a.baseline else None
    records = run("models", None, a.models or a.ops, a.out, a.jobs, timeout=a.timeout, fresh=a.fresh)
    records.sort(key=lambda r: r["name"])
    import fnmatch
    entries = [e for e in report.load_known() if e.get("suite") == "models"]
    known = {}
    for r in records:
        for e in entries:
            if fnmatch.fnmatchcase(r["name"], e["name"]) and r["status"] in e.get("statuses", ["mismatch"]) and \
                    ("tied" not in e or bool(r.get("tied")) == e["tied"]) and r["name"] not in known and \
                    (not e.get("only_tied_differ") or set(r.get("differing", ["?"])) <= set(r.get("tied_names", []))) \
                    and (not e.get("requires") or r.get(e["requires"]) is True):
                known[r["name"]] = e
                r["cause"] = e["cause"]
    meta = report.with_provenance({"suite": "models", "models": a.models or a.ops or "all",
                                   "wall_s": round(time.perf_counter() - t0, 1),
                                   **{k: v for k, v in LAST_RUN.items() if k.startswith("models")}})
    with _out_lock(a.out):
        models_report.write_models_json(records, os.path.join(a.out, "models.json"), meta)
        models_report.write_models_markdown(records, os.path.join(a.out, "models.md"), baseline, meta,
                                            {k: v.get("cause", "") for k, v in known.items()})
    print(models_report.models_summary(records))
    if baseline is not None:
        reg, fix, _ = models_report.compare_models(records, baseline)
        print(f"against {a.baseline}: {len(reg)} regressions, {len(fix)} fixes")
    print(f"reports: {os.path.join(a.out, 'models.md')}, {os.path.join(a.out, 'models.json')}")
    bad = [r for r in records if r["status"] in ("mismatch", "error") and r["name"] not in known]
    for r in bad[:20]:
        print(f"  {r['name']}: {r['status']}: {r['detail'][:140]}")
    return 1 if bad and not a.no_fail else 0


_EXAMPLES = """examples:
  trnsim conformance --suite nki                              # every NKI instruction, about 10 s
  trnsim conformance --suite nki --ops 'nisa.tensor_*' --dtypes bfloat16
  trnsim conformance --suite ops --ops 'add,nn.functional.*' --dtypes float32 -j 2 --out my-report
  trnsim conformance --suite ops --baseline conformance/reports/report.json   # regressions and fixes
  trnsim conformance --suite models --models 'llama,qwen*' -j 2              # needs the models extra

Runs sharing --out are safe; an interrupted run continues where it stopped (--fresh starts over)."""


def main(argv=None):
    ap = OneLineParser(prog="trnsim conformance", epilog=_EXAMPLES,
                       description="PyTorch op and NKI instruction conformance of the simulated device")
    ap.add_argument("--suite", choices=("ops", "nki", "all", "models"), default="all",
                    help="all = ops and nki; models = the transformers causal-LM sweep (needs the models extra)")
    ap.add_argument("--models", default=None, help="with --suite models: fnmatch pattern(s) on model types")
    ap.add_argument("--dtypes", default=None, help="comma-separated, e.g. float32,bfloat16 (default: float32, "
                    "bfloat16, float16, int64, bool)")
    ap.add_argument("--ops", default=None, help="fnmatch pattern(s) on op names, comma-separated, e.g. 'add,nn.*'")
    ap.add_argument("--out", default="conformance-report", help="output directory (reports and resumable records)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--modes", default="forward,backward")
    ap.add_argument("--max-samples", type=int, default=None, help="at most this many samples per op x dtype")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per op x dtype x mode (models: per "
                    "architecture, default 600)")
    ap.add_argument("--baseline", default=None, help="a previous report.json to compare against")
    ap.add_argument("--fresh", action="store_true", help="ignore records of an earlier run in --out")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 even when a mismatch is found")
    a = ap.parse_args(argv)
    dtypes = [d.strip() for d in a.dtypes.split(",")] if a.dtypes else None
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in ("forward", "backward")]
    if bad:
        ap.error(f"--modes: unknown mode(s) {bad}; use forward and/or backward")
    try:
        ensure_writable_dir(a.out)
        ensure_writable_dir(records_dir(a.out))
    except FileWriteError as e:
        ap.error(f"--out: {e}")
    t0 = time.perf_counter()
    if a.suite == "models":
        return _models_main(a, t0)
    baseline = report.load_json(a.baseline) if a.baseline else None
    records = run(a.suite, dtypes, a.ops, a.out, a.jobs, modes, a.max_samples, a.timeout, a.fresh)
    records.sort(key=lambda r: (r["suite"], r["name"], r["dtype"], r["mode"]))
    unexplained = report.annotate_known(records, report.load_known())
    meta = report.with_provenance({"suite": a.suite, "ops": a.ops or "all",
                                   "dtypes": ",".join(dtypes) if dtypes else "default", "max_samples": a.max_samples,
                                   "wall_s": round(time.perf_counter() - t0, 1), **LAST_RUN})
    with _out_lock(a.out):
        report.write_json(records, os.path.join(a.out, "report.json"), meta)
        report.write_markdown(records, os.path.join(a.out, "report.md"), baseline, meta)
    line = report.summary_line(records)
    print(line)
    if baseline is not None:
        reg, fix, _ = report.compare(records, baseline)
        print(f"against {a.baseline}: {len(reg)} regressions, {len(fix)} fixes")
    print(f"reports: {os.path.join(a.out, 'report.md')}, {os.path.join(a.out, 'report.json')}")
    mism = [r for r in records if r["status"] == "mismatch"]
    if mism:
        print(f"{len(mism)} mismatch groups, {len(unexplained)} without a known cause"
              + "".join(f"\n  {r['name']} {r['dtype']} {r['mode']}: {r['detail'][:120]}" for r in unexplained[:20]))
    return 1 if unexplained and not a.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
