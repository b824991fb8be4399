"""Where one nki-library test's wall time goes, for the runner's per-test record (``phase_s``).

With ``TRNSIM_NKILIB_PHASES=1`` the plugin wraps a few functions of the snapshot's harness (nothing else changes:
each wrapper calls the original and returns what it returns) and times them with ``time.perf_counter``.  The time
of a phase is *exclusive*: a phase entered inside another (the golden computed inside the validator) is taken out
of the outer one, so the phases of a test add up to its recorded time.  The phases:

- ``setup``: pytest's setup of the test (its fixtures, the plugin's release of freed memory before it);
- ``inputs``: the test function's own code before and around the harness (building the kernel's inputs and its
  arguments; whatever of the call is not in a phase below);
- ``golden``: the test's golden reference (``LazyGoldenGenerator.golden``, ``PerRankLazyGenerator.for_rank`` of a
  golden), torch/NumPy;
- ``input_dump``: the harness writing a copy of each input to its output directory (``__dump_kernel_inputs__``);
- ``simulate``: the harness's simulate call (``simulation_setup.simulate_kernel``: trnsim's ``cpu_simulate``),
  and the multi-rank path's per-rank simulation when the plugin runs one;
- ``outputs``: the harness converting the kernel's outputs to the goldens' dtypes and writing them
  (``run_simulator_inference`` outside the simulate call, ``_dump_output_tensors``);
- ``validate``: the harness's output validator (``_run_validation``), golden excluded;
- ``metrics``: the harness's metrics collection and emission after the test (``parse_artifacts``, ``emit``);
- ``teardown``: pytest's teardown (the harness's ``--force-local-cleanup`` of the output directory).

With ``TRNSIM_NKILIB_PROFILE=DIR`` each simulate call also runs under ``cProfile`` and its statistics are written
to ``DIR/<n>.prof`` (``<n>`` in the order the tests ran, the node id in ``DIR/index.jsonl``): the functions inside
trnsim's part.  The profiler's clock is each thread's CPU time (``time.thread_time``): a program of a multi-program
launch waiting for its turn, or the calling thread waiting for the programs, counts nothing.  The profiler slows the call (pure-Python code the most), so the phase times of such a run are not
the unprofiled ones.
"""

from __future__ import annotations

import functools
import json
import os
import time

PHASES = ("setup", "inputs", "golden", "input_dump", "simulate", "outputs", "validate", "metrics", "teardown")


class TestPhases:
    """Exclusive wall time per phase of the running test: a stack of open phases; entering one charges the time so
    far to the phase below it."""

    def __init__(self, clock=time.perf_counter, cpu_clock=time.process_time, on_boundary=None):
        self.clock = clock
        # called with the phase that was open (None: none) at every phase boundary: the plugin charges the
        # resident-memory peak since the last boundary to it (peak_rss.TestMemory.checkpoint)
        self.on_boundary = on_boundary
        self.cpu_clock = cpu_clock
        self.cpu = {}                 # CPU time (every thread of the process) per phase, inclusive
        self._cpu_open = {}
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.stack = []
        self.mark = None

    def enter(self, phase):
        if phase not in self.totals:
            raise ValueError(f"phase_times: unknown phase {phase!r}; the phases are {', '.join(PHASES)}")
        now = self.clock()
        if self.stack:
            self.totals[self.stack[-1]] += now - self.mark
        if self.on_boundary is not None:
            self.on_boundary(self.stack[-1] if self.stack else None)
        self.stack.append(phase)
        self.mark = now

    def leave(self, phase):
        if not self.stack or self.stack[-1] != phase:
            raise RuntimeError(f"phase_times: leaving {phase!r} but the open phases are {self.stack}")
        now = self.clock()
        self.totals[phase] += now - self.mark
        if self.on_boundary is not None:
            self.on_boundary(phase)
        self.stack.pop()
        self.mark = now

    def switch(self, phase):
        """Close the open phases and open ``phase`` (pytest's setup -> the call -> teardown)."""
        self.finish()
        self.enter(phase)

    def finish(self):
        while self.stack:
            self.leave(self.stack[-1])

    def record(self):
        return {k: round(v, 4) for k, v in self.totals.items() if v}

    def record_cpu(self):
        """CPU time of the process (all its threads) in the simulate call: against its wall time, what the call
        spent waiting (for a core of a loaded machine, or a program thread for its turn)."""
        return {k: round(v, 4) for k, v in self.cpu.items()}


CURRENT = None          # the running test's TestPhases (set by the plugin), or None outside a test


def enabled():
    return os.environ.get("TRNSIM_NKILIB_PHASES", "") not in ("", "0")


def timed(phase, fn):
    """``fn`` wrapped: its time charged to ``phase`` of the running test (when one runs)."""
    if getattr(fn, "_trnsim_phase", None) == phase:
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        cur = CURRENT
        if cur is None:
            return fn(*args, **kwargs)
        cur.enter(phase)
        c0 = cur.cpu_clock() if phase == "simulate" else None
        try:
            return fn(*args, **kwargs)
        finally:
            if c0 is not None:
                cur.cpu[phase] = cur.cpu.get(phase, 0.0) + cur.cpu_clock() - c0
            cur.leave(phase)
    wrapper._trnsim_phase = phase
    return wrapper


_PROFILE_N = [0]


def profiled(fn, nodeid_of):
    """``fn`` run under cProfile when ``TRNSIM_NKILIB_PROFILE`` names a directory (see the module docstring)."""
    out = os.environ.get("TRNSIM_NKILIB_PROFILE")
    if not out or profile_whole_test():
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import cProfile
        prof = cProfile.Profile(time.thread_time)
        threads = []
        with program_threads_profiled(threads):
            try:
                return prof.runcall(fn, *args, **kwargs)
            finally:
                dump_profile(prof, out, nodeid_of(), threads)
    return wrapper


class program_threads_profiled:
    """The programs of a multi-program launch run on their own threads (trnsim/machine/programs.py), which a
    profiler of the calling thread does not see: while this is entered each program thread runs under its own
    cProfile, appended to ``threads`` (merged into the call's statistics by :func:`dump_profile`)."""

    def __init__(self, threads):
        self.threads = threads
        self.orig = None

    def __enter__(self):
        from trnsim.machine.programs import Programs
        orig = self.orig = Programs.__dict__["_thread"]
        threads = self.threads

        def _thread(programs, p):
            import cProfile
            prof = cProfile.Profile(time.thread_time)
            threads.append(prof)
            prof.runcall(orig, programs, p)
        Programs._thread = _thread
        return self

    def __exit__(self, *exc):
        from trnsim.machine.programs import Programs
        Programs._thread = self.orig
        return False


def profile_whole_test():
    """``TRNSIM_NKILIB_PROFILE_WHOLE=1``: profile each whole test (setup to teardown) instead of its simulate call."""
    return os.environ.get("TRNSIM_NKILIB_PROFILE_WHOLE", "") not in ("", "0")


def dump_profile(prof, out, nodeid, threads=()):
    """The statistics of ``prof`` (and of the program threads' profilers) into ``out``, indexed by node id."""
    import pstats
    prof.disable()
    os.makedirs(out, exist_ok=True)
    n = _PROFILE_N[0] = _PROFILE_N[0] + 1
    name = f"{os.getpid()}-{n}.prof"
    st = pstats.Stats(prof)
    for t in threads:
        t.disable()
        st.add(t)
    st.dump_stats(os.path.join(out, name))      # a scratch file of this run, not a project file
    with open(os.path.join(out, "index.jsonl"), "a") as f:
        f.write(json.dumps({"prof": name, "nodeid": nodeid}) + "\n")


def install(Orchestrator, nodeid_of):
    """Wrap the harness's functions named in the module docstring (those the snapshot has)."""
    from test.utils import common_dataclasses as cd
    from test.utils import simulation_setup as ss
    ss.simulate_kernel = timed("simulate", profiled(ss.simulate_kernel, nodeid_of))
    ss.run_simulator_inference = timed("outputs", ss.run_simulator_inference)
    golden = getattr(cd.LazyGoldenGenerator, "golden", None)
    if isinstance(golden, property) and getattr(golden.fget, "_trnsim_phase", None) is None:
        cd.LazyGoldenGenerator.golden = property(timed("golden", golden.fget))
    if hasattr(cd, "PerRankLazyGoldenGenerator"):
        cls = cd.PerRankLazyGoldenGenerator
        cls.for_rank = timed("golden", cls.for_rank)
    for name, phase in (("__dump_kernel_inputs__", "input_dump"), ("__dump_per_rank_inputs__", "input_dump"),
                        ("_dump_output_tensors", "outputs"), ("_run_validation", "validate")):
        if hasattr(Orchestrator, name):
            setattr(Orchestrator, name, timed(phase, getattr(Orchestrator, name)))
    try:
        from test.utils import metrics_collector as mc
    except ImportError:
        mc = None
    for cls in (getattr(mc, "MetricsCollector", None), getattr(mc, "NoopMetricsCollector", None)):
        if cls is not None and "parse_artifacts" in vars(cls):
            cls.parse_artifacts = timed("metrics", cls.parse_artifacts)


# ---- the runner's side: the records of a run -> where its time went ----

def family_of(nodeid):
    """The kernel family of a node id (``core/attention``), as the runner's report groups them."""
    parts = nodeid.split("::")[0].split("/")
    if "nkilib" not in parts:
        return parts[0] if parts else "?"
    rest = parts[parts.index("nkilib") + 1:-1]
    return "/".join(rest[:2]) if rest else parts[-1]


def summarize(lines, outcome_of=None):
    """Phase lines (``<results>.phases``) -> totals per phase, the per-family split, and the time before the first
    test of each pytest process (collection and imports).  ``outcome_of``: {nodeid: outcome} to split the tests
    that ran from those the harness skipped."""
    outcome_of = outcome_of or {}
    by_id = {}
    starts = []
    for ln in lines:
        by_id[ln["nodeid"]] = ln                # a test once: the latest line (a resumed run)
        if ln.get("before_first_test_s") is not None:
            starts.append(ln["before_first_test_s"])
    tot = dict.fromkeys(PHASES, 0.0)
    fams = {}
    kinds = {}
    for nid, ln in by_id.items():
        kind = "skipped" if outcome_of.get(nid) == "skipped" else "ran"
        k = kinds.setdefault(kind, {"tests": 0, "wall_s": 0.0})
        k["tests"] += 1
        k["wall_s"] += ln["wall_s"]
        f = fams.setdefault(family_of(nid), {"tests": 0, "wall_s": 0.0, **dict.fromkeys(PHASES, 0.0),
                                             "simulate_cpu": 0.0})
        f["simulate_cpu"] += ln.get("cpu_s", {}).get("simulate", 0.0)
        f["tests"] += 1
        f["wall_s"] += ln["wall_s"]
        for p, v in ln.get("phase_s", {}).items():
            tot[p] += v
            f[p] += v
    return {"tests": len(by_id), "wall_s": sum(ln["wall_s"] for ln in by_id.values()), "phase_s": tot,
            "simulate_cpu_s": sum(f["simulate_cpu"] for f in fams.values()),
            "kinds": kinds, "families": dict(sorted(fams.items())), "process_starts_s": starts}


def render(m):
    """Markdown of :func:`summarize`."""
    if not m or not m["tests"]:
        return []
    w = m["wall_s"] or 1.0
    out = ["", "## Where the time goes", "",
           f"{m['tests']} tests, {m['wall_s']:.0f} s inside tests (pytest's setup, call and teardown of each)"
           + (f"; before the first test of each pytest process (collection, imports): "
              + ", ".join(f"{s:.0f} s" for s in m["process_starts_s"]) if m["process_starts_s"] else "") + ".",
           ""]
    for kind, k in sorted(m["kinds"].items()):
        out.append(f"- {kind}: {k['tests']} tests, {k['wall_s']:.0f} s ({k['wall_s'] / max(k['tests'], 1):.2f} s "
                   "per test)")
    out += ["", "| phase | s | share |", "|---|---:|---:|"]
    for p in PHASES:
        out.append(f"| {p} | {m['phase_s'][p]:.1f} | {100 * m['phase_s'][p] / w:.1f}% |")
    out += ["", f"CPU time of the process (all threads) in the simulate calls: {m.get('simulate_cpu_s', 0.0):.1f} s "
            f"of their {m['phase_s']['simulate']:.1f} s wall (the rest: waiting for a core, or program threads "
            "handing the turn to each other).", ""]
    out += ["| family | tests | s | " + " | ".join(PHASES) + " | simulate CPU s / wall s |",
            "|---|---:|---:|" + "---:|" * (len(PHASES) + 1)]
    for fam, f in m["families"].items():
        fw = f["wall_s"] or 1.0
        out.append(f"| {fam} | {f['tests']} | {f['wall_s']:.0f} | "
                   + " | ".join(f"{100 * f[p] / fw:.0f}%" for p in PHASES)
                   + f" | {f.get('simulate_cpu', 0.0):.1f} / {f['simulate']:.1f} |")
    return out


def area_of(filename):
    """The part of trnsim (or what else) a profiled function's file belongs to."""
    f = filename.replace(os.sep, "/")
    if "/trnsim/" in f:
        sub = f.split("/trnsim/", 1)[1].split("/")
        return "trnsim/" + (sub[0] if len(sub) > 1 else sub[0].removesuffix(".py"))
    if "/numpy/" in f or filename.startswith("<built-in method numpy") or "numpy" in filename:
        return "numpy"
    if "/ml_dtypes/" in f:
        return "ml_dtypes"
    if "/torch/" in f:
        return "torch"
    if "/_pytest/" in f or "/pluggy/" in f:
        return "pytest"
    if "/nkilib_src/" in f or "/src/nkilib/" in f:
        return "nki-library kernels"
    if "/test/" in f:
        return "nki-library tests and harness"
    if "/numba/" in f:
        return "numba"
    if f.startswith("~") or f.startswith("<"):
        return "builtins"
    return "other"


def profile_summary(prof_dir, top=12):
    """The cProfile statistics of a run's simulate calls (``TRNSIM_NKILIB_PROFILE``) -> per family: the calls'
    total time, the self time per area (trnsim's packages, NumPy, builtins) and the functions with the most self
    time."""
    import pstats
    index = os.path.join(prof_dir, "index.jsonl")
    if not os.path.exists(index):
        return {}
    with open(index) as f:
        entries = [json.loads(ln) for ln in f if ln.strip()]
    fams = {}
    for e in entries:
        st = pstats.Stats(os.path.join(prof_dir, e["prof"])).stats
        fam = fams.setdefault(family_of(e["nodeid"]), {"calls": 0, "total_s": 0.0, "areas": {}, "funcs": {}})
        fam["calls"] += 1
        for (fn, line, name), (cc, nc, tt, ct, callers) in st.items():
            fam["total_s"] += tt
            a = area_of(fn)
            fam["areas"][a] = fam["areas"].get(a, 0.0) + tt
            key = f"{fn.split('/trnsim/', 1)[-1] if '/trnsim/' in fn else os.path.basename(fn)}:{line} {name}"
            fam["funcs"][key] = fam["funcs"].get(key, 0.0) + tt
    for fam in fams.values():
        fam["areas"] = dict(sorted(fam["areas"].items(), key=lambda kv: -kv[1]))
        fam["funcs"] = sorted(fam["funcs"].items(), key=lambda kv: -kv[1])[:top]
    return fams


def render_profile(fams):
    """Markdown of :func:`profile_summary`."""
    if not fams:
        return []
    out = ["", "## Inside the simulate calls (cProfile, self time)", "",
           "Each thread's CPU time, under the profiler (which slows pure-Python code the most); per family, the share of each area and the "
           "functions with the most self time.", ""]
    for name, f in sorted(fams.items(), key=lambda kv: -kv[1]["total_s"]):
        tot = f["total_s"] or 1.0
        areas = ", ".join(f"{a} {100 * v / tot:.0f}%" for a, v in list(f["areas"].items())[:6])
        out += [f"### {name}: {f['calls']} calls, {f['total_s']:.1f} s", "", f"Areas: {areas}.", "",
                "| function | self s | share |", "|---|---:|---:|"]
        out += [f"| `{k}` | {v:.2f} | {100 * v / tot:.1f}% |" for k, v in f["funcs"]]
        out.append("")
    return out
