"""pytest plugin loaded by ``tools/run_nki_library.py`` into nki-library's own test run (``-p plugin``).

It does two things and changes nothing else in the harness:

- ``import nki`` works before the harness's conftest is loaded (see below);
- sampling: with ``TRNSIM_NKILIB_EVERY=N`` only every N-th collected test (in sorted node-id order, so every xdist
  worker keeps the same ones) is kept, starting at the ``TRNSIM_NKILIB_OFFSET``-th (default 0; another offset
  draws a disjoint sample), and with ``TRNSIM_NKILIB_LIMIT=M`` at most M of those; the node ids listed in the
  file ``TRNSIM_NKILIB_DONE`` (the runner's ``--resume``) are left out, and with ``TRNSIM_NKILIB_ONLY`` (its
  ``--retry-memory``) only the node ids that file lists are kept;
- recording: for each test, its outcome, whether it is a negative case (a parameter ``is_negative_test_case``),
  and for a failure the innermost exception of the chain (type, message, and the deepest frame in trnsim and in
  the snapshot's sources), written as JSON lines to ``TRNSIM_NKILIB_RESULTS`` by the controlling process;
- a resident-memory cap (``TRNSIM_NKILIB_MAX_RSS`` bytes, the runner's ``--max-memory``): ``rss_cap``;
- time (with ``TRNSIM_NKILIB_PHASES=1``): each test's wall time split into the harness's phases and trnsim's
  simulate call (``phase_times``), written as JSON lines to ``<results>.phases`` by the process that ran the test;
- where a test ended by the memory cap was (``<results>.simcalls``: before, inside or after the simulate call, with
  the resident size and the harness's input bytes at the call);
- a measurement mode (``TRNSIM_NKILIB_STUB_KERNELS=1``, the runner's ``--stub-kernels``): ``sim_stub`` stands in
  for trnsim's simulate call, so a test's peak is the harness's alone;
- memory: each test's peak resident set size (``peak_rss_bytes``, from setup to the end of its call), measured in
  the process that ran it by ``peak_rss`` (``peak_rss_how``: ``VmHWM`` for the test's own peak, ``ru_maxrss`` when
  only the worker's lifetime peak can be read).
"""

from __future__ import annotations

import json
import re
import os
import traceback

import pytest

# The harness's conftest imports ``nki.isa`` at module level, before it switches to simulation mode (with AWS's
# packages installed that import finds the real ``nki``).  Importing ``nki_cpu_simulator`` here (the plugin loads
# before conftest files) installs trnsim's ``nki`` aliases, as ``NKI_SIMULATOR=1`` with the start hook would.
import nki_cpu_simulator  # noqa: F401,E402
import nkilib_sampling  # noqa: E402  (this folder, on the child's path)
import multirank  # noqa: E402  (this folder)
import peak_rss  # noqa: E402  (this folder)
import phase_times  # noqa: E402  (this folder)
import rss_cap  # noqa: E402  (this folder)
import sim_stub  # noqa: E402  (this folder)


def _install_missing_harness_modules():
    """Modules the snapshot's tests import that are not in the published snapshot or not public: the harness's
    ``scripts/remote_lock_scripts.py`` (core locks on remote hosts) and ``perf_analysis_private.py`` (hardware trace
    analysis), imported by ``test/utils`` at start, and the Neuron compiler's ``neuronxcc.starfish.support.dtype``
    (a host ``static_cast``), imported by the MX tests of ``test_qkv_cte.py``.  Register the stand-ins of this
    folder under those names (with any missing parent packages), unless the name can be imported already."""
    import importlib
    import importlib.util
    import sys
    import types
    for name, standin in (("test.utils.scripts.remote_lock_scripts", "remote_lock_scripts"),
                          ("test.utils.perf_analysis_private", "perf_analysis_private"),
                          ("neuronxcc.starfish.support.dtype", "neuronxcc_starfish_dtype")):
        try:
            if importlib.util.find_spec(name) is not None:
                continue
        except ImportError:
            pass
        try:
            mod = importlib.import_module(standin)
        except ImportError:     # the dtype stand-in needs ``neuron_dtypes`` (installed, or linked by the runner)
            continue
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in sys.modules:
                try:
                    importlib.import_module(parent)
                except ImportError:
                    pkg = types.ModuleType(parent)
                    pkg.__path__ = []
                    sys.modules[parent] = pkg
                    if i > 1:
                        setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], pkg)
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], mod)
        sys.modules[name] = mod


_install_missing_harness_modules()


def pytest_sessionstart(session):
    """The snapshot's ``Orchestrator`` reads ``self._compiled_kernel`` after every inference, but sets it only when
    it compiles, which simulation mode skips: every simulated test would end in an AttributeError after its kernel
    ran.  Give the class the attribute (``None``: no compiled kernel, outputs keep their Python names), unless the
    snapshot already has it.

    The other change: a test with ``collective_ranks > 1`` runs on that many simulated ranks, each with its own
    inputs, joined by trnsim's collectives, its outputs written per rank where the harness's validator reads them
    (``multirank.py``); the snapshot's simulation path has no multi-rank branch."""
    try:
        from test.utils.exceptions import InferenceException
        from test.utils.test_orchestrator import Orchestrator
    except ImportError:
        return
    if not hasattr(Orchestrator, "_compiled_kernel"):
        Orchestrator._compiled_kernel = None
    if sim_stub.enabled():              # before the measuring wrappers, so they bracket the stand-in
        from test.utils import common_dataclasses, simulation_setup
        sim_stub.install(simulation_setup, common_dataclasses)
    multirank.install(Orchestrator, InferenceException)
    _measure_simulate_calls()
    if phase_times.enabled():
        phase_times.install(Orchestrator, lambda: os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0])
        multirank.simulate_all_ranks = phase_times.timed("simulate", multirank.simulate_all_ranks)


def _measure_simulate_calls():
    """Bracket the harness's simulate call (``simulation_setup.simulate_kernel``, which only calls
    ``nki.cpu_simulate``) for the memory attribution of ``peak_rss``; the call itself is unchanged."""
    try:
        from test.utils import simulation_setup
    except ImportError:
        return
    inner = simulation_setup.simulate_kernel
    if getattr(inner, "_trnsim_measured", False):
        return

    def simulate_kernel(*args, **kwargs):
        kernel_input = kwargs.get("kernel_input", args[1] if len(args) > 1 else None)
        _sim_call_event("simulate", input_bytes=_nbytes(kernel_input))
        with peak_rss.around_simulate():
            out = inner(*args, **kwargs)
        sim = getattr(peak_rss.CURRENT, "sim", None) or {}
        _sim_call_event("simulated", sim_peak_bytes=sim.get("peak"))
        return out
    simulate_kernel._trnsim_measured = True
    simulation_setup.simulate_kernel = simulate_kernel


def _nbytes(kernel_input):
    """Bytes of the arrays the harness hands the simulate call (its generated inputs)."""
    if not isinstance(kernel_input, dict):
        return None
    return sum(int(getattr(v, "nbytes", 0) or 0) for v in kernel_input.values())


def _sim_call_event(event, **fields):
    """Where a test is relative to its simulate call, appended (and flushed) to ``<results>.simcalls`` as it
    happens: a test the memory cap or the out-of-memory killer ends leaves no record of its own, and the runner
    reads these lines to say whether it was ended in the harness's set-up (no line), inside trnsim's simulate call
    (last line ``simulate``) or after it, in the harness's golden and comparison (last line ``simulated``), with
    the resident size at each point."""
    if not _RESULTS:
        return
    nodeid = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    rec = {"nodeid": nodeid, "event": event, "rss_bytes": peak_rss.rss_now(), **fields}
    with open(_RESULTS + ".simcalls", "a") as f:
        f.write(json.dumps(rec) + "\n")

_RESULTS = os.environ.get("TRNSIM_NKILIB_RESULTS")


def pytest_collection_modifyitems(session, config, items):
    every, offset, limit, done, only = nkilib_sampling.from_env()
    if every <= 1 and not limit and not offset and not done and only is None:
        return
    keep = nkilib_sampling.keep([it.nodeid for it in items], every, offset, limit, done, only)
    deselected = [it for i, it in enumerate(items) if i not in keep]
    items[:] = [it for i, it in enumerate(items) if i in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """With ``TRNSIM_NKILIB_PROFILE=DIR``: pytest's collection of the suite (importing the test files, the
    harness's parametrization) profiled too, into ``DIR/collection-<pid>.prof``."""
    out = os.environ.get("TRNSIM_NKILIB_PROFILE")
    if not out:
        yield
        return
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        os.makedirs(out, exist_ok=True)
        prof.dump_stats(os.path.join(out, f"collection-{os.getpid()}.prof"))   # a scratch file of the run


def pytest_collection_finish(session):
    """Move what collection built (thousands of test items, their parameters, the harness's modules) out of the
    cycle collector's reach (``gc.freeze``): it stays alive for the whole session anyway, and otherwise every full
    collection walks it again -- the ``gc.collect()`` before each test (``peak_rss.release_freed``) and the
    collector's own full passes while a kernel runs (see benchmarks/nki-library-time.md)."""
    import gc
    gc.collect()
    gc.freeze()


def _negative(item):
    spec = getattr(item, "callspec", None)
    if spec is not None:
        if spec.params.get("is_negative_test_case") is True:
            return True
        for v in spec.params.values():
            if getattr(v, "is_negative_test_case", False) is True:
                return True
    return False


def _frame(tb_frames, needle):
    for fs in reversed(tb_frames):
        if needle in fs.filename.replace(os.sep, "/"):
            return f"{fs.filename.split(needle, 1)[1]}:{fs.lineno} {fs.name}"
    return None


def _root(exc):
    chain = [exc]
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        chain.append(nxt)
        exc = nxt
    return chain


_CAP = None         # the resident-memory cap of this process (rss_cap.Cap), when TRNSIM_NKILIB_MAX_RSS is set


def pytest_configure(config):
    global _CAP, _SESSION_T0
    if _SESSION_T0 is None:
        import time
        _SESSION_T0 = time.perf_counter()
    cap = int(os.environ.get("TRNSIM_NKILIB_MAX_RSS", "0") or 0)
    if cap > 0 and _CAP is None:
        c = rss_cap.Cap(cap, killed_path=(_RESULTS + ".killed") if _RESULTS else None)
        if c.install():
            _CAP = c


_PHASES_FILE = (_RESULTS + ".phases") if _RESULTS else None
_SESSION_T0 = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``TRNSIM_NKILIB_PHASES=1``: the test's phases (``phase_times``), one JSON line after its teardown; the
    first test's line also has the time from pytest's configuration to that test (collection and imports)."""
    global _SESSION_T0
    if not (phase_times.enabled() and _PHASES_FILE):
        yield
        return
    import time
    t0 = time.perf_counter()
    since_start = None
    if _SESSION_T0 is not None:
        since_start, _SESSION_T0 = t0 - _SESSION_T0, None
    phase_times.CURRENT = item._trnsim_phases = phase_times.TestPhases(on_boundary=_charge_memory)
    item._trnsim_phases.enter("setup")
    prof, threads, hook = None, [], None
    if os.environ.get("TRNSIM_NKILIB_PROFILE") and phase_times.profile_whole_test():
        import cProfile
        hook = phase_times.program_threads_profiled(threads).__enter__()
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
    try:
        yield
    finally:
        if prof is not None:
            hook.__exit__(None, None, None)
            phase_times.dump_profile(prof, os.environ["TRNSIM_NKILIB_PROFILE"], item.nodeid, threads)
        item._trnsim_phases.finish()
        phase_times.CURRENT = None
        rec = {"nodeid": item.nodeid, "pid": os.getpid(), "wall_s": round(time.perf_counter() - t0, 4),
               "phase_s": item._trnsim_phases.record(), "cpu_s": item._trnsim_phases.record_cpu()}
        if since_start is not None:
            rec["before_first_test_s"] = round(since_start, 3)
        mem = getattr(item, "_trnsim_memory", None)
        if mem is not None and mem.phases:
            rec["peak_rss_phase_bytes"] = dict(mem.phases)
        with open(_PHASES_FILE, "a") as f:
            f.write(json.dumps(rec) + "\n")


def _charge_memory(phase):
    """At each phase boundary: the resident peak since the last one, charged to the phase that was open."""
    mem = peak_rss.CURRENT
    if mem is not None:
        mem.checkpoint(phase)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The test's call is its ``inputs`` phase, less the harness's phases inside it; what follows is teardown."""
    ph = getattr(item, "_trnsim_phases", None)
    if ph is not None:
        ph.switch("inputs")
    yield
    if ph is not None:
        ph.switch("teardown")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Free what earlier tests left and reset the process's peak RSS before the test's fixtures are built (its
    inputs and goldens count); the resident-memory cap starts watching the test."""
    peak_rss.release_freed()
    item._trnsim_memory = peak_rss.CURRENT = peak_rss.TestMemory()
    if _CAP is not None:
        _CAP.start_test(item.nodeid)


def pytest_runtest_teardown(item):
    if _CAP is not None:
        _CAP.end_test()
        if _CAP.fired:
            # the test was stopped by the cap and its result is recorded; if what it held is not given back (a
            # reference kept somewhere in the harness), the next tests would start above the cap: end this
            # process, and the runner starts pytest again on the tests not yet run
            peak_rss.release_freed()
            rss = rss_cap.vmrss_bytes()
            if rss is not None and rss > _CAP.cap // 2:
                os.kill(os.getpid(), 9)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    info = {"negative": _negative(item)}
    mem = getattr(item, "_trnsim_memory", None)
    if mem is not None and (call.when == "call" or (call.when == "setup" and rep.failed)):
        info.update(mem.record())
    if call.excinfo is not None and rep.failed:
        chain = _root(call.excinfo.value)
        root = chain[-1]
        frames = traceback.extract_tb(root.__traceback__)
        info.update({
            "chain": [type(e).__name__ for e in chain],
            "type": type(root).__name__,
            "message": str(root)[:600],
            "trnsim_frame": _frame(frames, "/trnsim/"),
            "kernel_frame": _frame(frames, "/nkilib_src/"),
        })
    rep.user_properties.append(("trnsim_nkilib", json.dumps(info)))


def pytest_runtest_logstart(nodeid, location):
    """Each test as it starts, in ``<results>.started``: if pytest is killed (the out-of-memory killer), the
    runner names the tests that started and never reported."""
    if _RESULTS and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(_RESULTS + ".started", "a") as f:
            f.write(nodeid + "\n")


def pytest_runtest_logreport(report):
    if not _RESULTS or report.when not in ("setup", "call", "teardown"):
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.when != "call" and not (report.failed or report.skipped):
        return
    info = {}
    for k, v in report.user_properties:
        if k == "trnsim_nkilib":
            info = json.loads(v)
    rec = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "duration": round(report.duration, 3), **info}
    if report.skipped and isinstance(report.longrepr, tuple):
        rec["message"] = str(report.longrepr[2])[:300]
    with open(_RESULTS, "a") as f:
        f.write(json.dumps(rec) + "\n")


def pytest_collectreport(report):
    if not _RESULTS or not report.failed or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    text = str(report.longrepr)
    last = [ln for ln in text.splitlines() if ln.startswith("E ")]
    message = last[-1][1:].strip() if last else text[-300:]
    where = _syntax_error_site(last)
    if where:
        message += f" ({where})"
    with open(_RESULTS, "a") as f:
        f.write(json.dumps({"nodeid": report.nodeid, "when": "collect", "outcome": "error",
                            "message": message[:600]}) + "\n")


def _syntax_error_site(lines):
    """For a file that does not parse (a SyntaxError or IndentationError, which Python reports with a ``File "...",
    line N`` line of its own): that file and line, relative to the snapshot (from its ``src/`` or ``test/``), so the
    report names the module at fault, which is often not the test file pytest was importing."""
    for ln in reversed(lines):
        m = re.search(r'File "([^"]+)", line (\d+)', ln)
        if m:
            path = m.group(1).replace(os.sep, "/")
            cut = max(path.rfind("/src/"), path.rfind("/test/"))
            return f"{path[cut + 1:] if cut >= 0 else os.path.basename(path)}:{m.group(2)}"
    return None
