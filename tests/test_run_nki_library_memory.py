"""tools/run_nki_library.py's memory side: each test's peak resident memory (tests/support/nki_library/peak_rss.py),
the resident-memory cap (rss_cap.py), the records of killed tests, the report's memory section; and the multi-rank
path of nki-library's collective tests (multirank.py, trnsim.kernels.collectives.simulate_ranks).  None needs the
snapshot; the /proc measurements skip where /proc/self/clear_refs is not available (not Linux)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from suite_files import load_file

REPO = Path(__file__).resolve().parent.parent
SUPPORT = REPO / "tests" / "support" / "nki_library"


runner = load_file("run_nki_library_mem", REPO / "tools" / "run_nki_library.py")
peak_rss = load_file("peak_rss", SUPPORT / "peak_rss.py")
rss_cap = load_file("rss_cap", SUPPORT / "rss_cap.py")
multirank = load_file("multirank", SUPPORT / "multirank.py")

MiB = 2 ** 20
GiB = 2 ** 30


def _can_reset():
    return sys.platform.startswith("linux") and peak_rss.reset()


needs_proc = pytest.mark.skipif(not _can_reset(), reason="needs Linux /proc/self/clear_refs")


def _fake_snapshot(tmp_path, test_source):
    """A checkout shaped like nki-library's for the runner: a conftest taking the harness's options, and
    ``test/integration/test_fake.py`` holding ``test_source``."""
    snap = tmp_path / "snap"
    (snap / "test" / "integration").mkdir(parents=True)
    (snap / "test" / "conftest.py").write_text(
        "def pytest_addoption(parser):\n"
        "    for o in ('--test-mode', '--platform-target', '--output-directory'):\n"
        "        parser.addoption(o, default=None)\n"
        "    parser.addoption('--force-local-cleanup', action='store_true')\n")
    (snap / "test" / "integration" / "test_fake.py").write_text(test_source)
    return snap


# -- peak_rss ---------------------------------------------------------------------------------------------------
def test_peak_reads_vmhwm_after_a_reset_and_falls_back_to_the_lifetime_peak(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n")
    assert peak_rss.peak(True, str(status)) == (200 * MiB, "VmHWM")
    b, how = peak_rss.peak(False, str(status))          # no reset: only the process's lifetime peak is known
    assert how == "ru_maxrss" and b > 0
    assert peak_rss.reset(str(tmp_path / "no" / "clear_refs")) is False
    status.write_text("VmHWM:\t 1 MB\n")
    with pytest.raises(ValueError, match="unit 'MB'"):
        peak_rss.peak(True, str(status))


@needs_proc
def test_peak_after_reset_is_the_tests_own():
    a = np.ones(300 * MiB, dtype=np.uint8)            # touched: 300 MiB resident
    del a
    peak_rss.release_freed()
    m = peak_rss.TestMemory()
    small = m.record()["peak_rss_bytes"]
    b = np.ones(120 * MiB, dtype=np.uint8)
    big = m.record()["peak_rss_bytes"]
    del b
    assert big - small >= 110 * MiB                   # the 120 MiB allocated after the reset count
    assert big - small < 250 * MiB                    # the 300 MiB freed before it do not


@needs_proc
def test_simulate_bracket_attributes_what_the_call_added():
    peak_rss.release_freed()
    m = peak_rss.TestMemory()
    held = np.ones(100 * MiB, dtype=np.uint8)         # the harness's inputs, before the call
    with m.simulate():
        inside = np.ones(200 * MiB, dtype=np.uint8)   # what the simulate call allocates
        del inside
    after = np.ones(250 * MiB, dtype=np.uint8)        # the harness after the call (its golden)
    r = m.record()
    added = r["sim_peak_bytes"] - r["sim_rss_before_bytes"]
    assert 190 * MiB <= added < 260 * MiB, added / MiB
    assert r["sim_rss_before_bytes"] >= 100 * MiB
    # the test's peak covers before, during and after the call: at least held + after
    assert r["peak_rss_bytes"] >= r["sim_rss_before_bytes"] + 240 * MiB
    del held, after


def test_around_simulate_without_a_running_test_does_nothing():
    peak_rss.CURRENT = None
    with peak_rss.around_simulate():
        pass


# -- rss_cap ----------------------------------------------------------------------------------------------------
def test_cap_kills_above_the_hard_limit_and_names_the_test(tmp_path):
    reads = iter([1 * GiB, 7.5 * GiB])
    killed = []
    c = rss_cap.Cap(6 * GiB, killed_path=str(tmp_path / "r.killed"), hard_margin=GiB,
                    read=lambda: int(next(reads)), kill=lambda: killed.append(1))
    assert c.check() is None                            # no test running: nothing read
    c.start_test("t.py::test_big")
    assert c.check() is None                            # 1 GiB: under the cap
    assert c.check() == "kill" and killed == [1]
    nid, rss, cap = (tmp_path / "r.killed").read_text().strip().split("\t")
    assert (nid, int(rss), int(cap)) == ("t.py::test_big", int(7.5 * GiB), 6 * GiB)
    with pytest.raises(ValueError, match="must be > 0"):
        rss_cap.Cap(0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc/self/status")
def test_cap_interrupts_a_test_that_goes_above_it():
    # in a child: cap at its resident size + 150 MiB, then allocate 400 MiB in 10 MiB steps
    code = f"""
import sys, time
sys.path.insert(0, {str(SUPPORT)!r})
import numpy as np, rss_cap
c = rss_cap.Cap(rss_cap.vmrss_bytes() + 150 * 2 ** 20, poll_s=0.01)
assert c.install()
c.start_test("child::test")
held = []
try:
    for i in range(40):
        held.append(np.ones(10 * 2 ** 20, dtype=np.uint8))
        time.sleep(0.01)
    print("not interrupted")
except rss_cap.ResidentMemoryExceeded as e:
    print("interrupted at", len(held), "MiB x10:", e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("interrupted at"), r.stdout
    steps = int(r.stdout.split()[2])
    assert 14 <= steps < 40                             # stopped soon after 150 MiB, not at the end
    assert "above the runner's cap" in r.stdout


def test_record_killed_names_the_capped_test_and_the_oom_killed_one(tmp_path):
    res = tmp_path / "results.jsonl"
    res.write_text(json.dumps({"nodeid": "a", "when": "call", "outcome": "passed"}) + "\n")
    (tmp_path / "results.jsonl.started").write_text("a\nb\nc\n")
    (tmp_path / "results.jsonl.killed").write_text(f"b\t{7 * GiB}\t{6 * GiB}\n")
    assert runner.record_killed(str(res), 9) == ["b", "c"]
    recs = {r["nodeid"]: r for r in map(json.loads, res.read_text().splitlines())}
    assert "resident-memory cap" in recs["b"]["message"] and recs["b"]["peak_rss_bytes"] == 7 * GiB
    assert "out-of-memory killer" in recs["c"]["message"] and "peak_rss_bytes" not in recs["c"]
    assert runner.record_killed(str(res), 9) == []      # recorded once


def test_a_killed_test_says_where_it_was_relative_to_the_simulate_call(tmp_path):
    # the plugin's <results>.simcalls: no line (set-up), last "simulate" (inside trnsim), last "simulated" (golden)
    res = tmp_path / "results.jsonl"
    res.write_text("")
    (tmp_path / "results.jsonl.started").write_text("s\ni\no\n")
    (tmp_path / "results.jsonl.killed").write_text("".join(f"{n}\t{7 * GiB}\t{6 * GiB}\n" for n in "sio"))
    ev = [{"nodeid": "i", "event": "simulate", "rss_bytes": 3 * GiB, "input_bytes": 2 * GiB},
          {"nodeid": "o", "event": "simulate", "rss_bytes": 3 * GiB, "input_bytes": 2 * GiB},
          {"nodeid": "o", "event": "simulated", "rss_bytes": 3 * GiB, "sim_peak_bytes": 4 * GiB}]
    (tmp_path / "results.jsonl.simcalls").write_text("".join(json.dumps(e) + "\n" for e in ev) + '{"nodeid": "o", "ev')
    assert runner.record_killed(str(res), 9) == ["s", "i", "o"]
    recs = {r["nodeid"]: r for r in map(json.loads, res.read_text().splitlines())}
    assert recs["s"]["killed_in"] == "harness set-up" and "before the simulate call" in recs["s"]["message"]
    assert recs["i"]["killed_in"] == "simulate call"
    assert "3.00 GiB resident at the call, the harness's inputs 2.00 GiB" in recs["i"]["message"]
    assert recs["o"]["killed_in"] == "harness after the call" and "peak 4.00 GiB" in recs["o"]["message"]
    assert (recs["o"]["sim_rss_before_bytes"], recs["o"]["sim_peak_bytes"], recs["o"]["harness_input_bytes"]) == (
        3 * GiB, 4 * GiB, 2 * GiB)
    assert "sim_peak_bytes" not in recs["i"] and "sim_rss_before_bytes" not in recs["s"]
    over = {t["nodeid"]: t["peak_in"] for t in runner.rss_summary(list(recs.values()))["over_limit"]}
    assert over == {"s": "harness (harness set-up)", "i": "simulate call", "o": "harness (harness after the call)"}


def test_the_plugin_writes_where_each_test_is_around_its_simulate_call(tmp_path, monkeypatch):
    # the plugin imports the harness's simulator aliases when loaded, so its two small functions are taken out
    # of its source and run alone, with the globals they use
    import ast
    src = (SUPPORT / "trnsim_nkilib_plugin.py").read_text()
    tree = ast.parse(src)
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("_nbytes", "_sim_call_event")]
    assert len(fns) == 2 and 'event("simulate", input_bytes=' in src and 'event("simulated", ' in src
    ns = {"peak_rss": peak_rss, "_RESULTS": str(tmp_path / "r.jsonl"), "json": json, "os": os}
    exec(compile(ast.Module(body=fns, type_ignores=[]), "trnsim_nkilib_plugin.py", "exec"), ns)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "t.py::x (call)")
    assert ns["_nbytes"]({"a": np.zeros(10, np.float32), "b": 3}) == 40 and ns["_nbytes"](None) is None
    ns["_sim_call_event"]("simulate", input_bytes=40)
    line = json.loads((tmp_path / "r.jsonl.simcalls").read_text())
    assert (line["nodeid"], line["event"], line["input_bytes"]) == ("t.py::x", "simulate", 40)
    assert line["rss_bytes"] is None or line["rss_bytes"] > 0


# -- the report -------------------------------------------------------------------------------------------------
F = "integration/nkilib/core/{}/test_x.py::T::test[{}]"


def test_rss_summary_lists_tests_above_the_limit_and_the_peak_per_family():
    recs = [
        {"nodeid": F.format("qkv", 0), "when": "call", "outcome": "passed", "peak_rss_bytes": 7 * GiB,
         "peak_rss_how": "VmHWM", "sim_rss_before_bytes": 5 * GiB, "sim_peak_bytes": 6 * GiB},
        {"nodeid": F.format("qkv", 1), "when": "call", "outcome": "passed", "peak_rss_bytes": 1 * GiB,
         "peak_rss_how": "VmHWM"},
        {"nodeid": F.format("mlp", 0), "when": "call", "outcome": "failed", "peak_rss_bytes": 2 * GiB,
         "peak_rss_how": "ru_maxrss"},
        {"nodeid": F.format("mlp", 1), "when": "call", "outcome": "passed"},           # not measured
    ]
    m = runner.rss_summary(recs)
    assert m["measured"] == 3 and m["max_bytes"] == 7 * GiB
    assert [t["nodeid"] for t in m["over_limit"]] == [F.format("qkv", 0)]
    assert m["over_limit"][0]["sim_added_bytes"] == 1 * GiB
    assert m["families"]["core/qkv"]["over_limit"] == 1 and m["families"]["core/qkv"]["max_bytes"] == 7 * GiB
    assert m["families"]["core/mlp"]["max_sim_added_bytes"] is None
    md = "\n".join(runner.render_rss(m))
    assert "1 above 6 GiB" in md and "7.00 GiB | 5.00 GiB | 1.00 GiB | harness (before or after the call)" in md
    assert "lifetime peak (ru_maxrss)" in md           # the fallback is named
    s = runner.classify(recs, golden={})
    assert s["rss"]["measured"] == 3
    assert "## Peak resident memory per test" in runner.render_md(
        {"summary": s, "snapshot_commit": "c", "snapshot": "s", "platform": "trn2", "command": "x", "every": 1,
         "limit": 0, "jobs": 1, "wall_s": 1.0, "standins": []})


def test_a_test_stopped_by_the_cap_counts_as_a_failure_of_a_runnable_test():
    r = {"nodeid": F.format("qkv", 0), "when": "call", "outcome": "failed", "chain": ["ResidentMemoryExceeded"],
         "type": "ResidentMemoryExceeded", "message": "resident memory 6.1 GiB went above the runner's cap"}
    s = runner.classify([r], golden={})
    assert (s["runnable"], s["failed"], s["not_simulated"]) == (1, 1, 0)


# -- multi-rank -------------------------------------------------------------------------------------------------
class _PerRank:
    def __init__(self, fn):
        self.fn = fn

    def for_rank(self, r):
        return self.fn(r)


def test_rank_inputs_per_rank_generator_and_copied_shared_dict():
    x = np.arange(4.0)
    per = multirank.rank_inputs(_PerRank(lambda r: {"x.must_alias_input": x + r, "n": r}), 2)
    assert [p["n"] for p in per] == [0, 1] and np.array_equal(per[1]["x"], x + 1)
    shared = multirank.rank_inputs({"x": x, "k": 3}, 2)
    assert shared[0]["x"] is not shared[1]["x"] and shared[0]["x"] is not x      # each rank its own copy
    assert np.array_equal(shared[1]["x"], x) and shared[1]["k"] == 3


def test_named_outputs_follow_the_golden_order_and_dtypes():
    g = {"a": np.zeros(2, ml_dtypes.bfloat16), "b": np.zeros(3, np.float32)}
    out = multirank.named_outputs([np.ones(2, np.float32), np.arange(3)], g, 0)
    assert list(out) == ["a", "b"] and out["a"].dtype == ml_dtypes.bfloat16 and out["b"].dtype == np.float32
    with pytest.raises(RuntimeError, match="rank 1: the kernel returned 1 outputs"):
        multirank.named_outputs([np.ones(2)], g, 1)


def _gather_kernel():
    import trnsim
    trnsim.install_nki()
    import nki
    import nki.collectives as ncc
    import nki.isa as nisa
    import nki.language as nl

    def gather(x, n_ranks):
        """Each program gathers its own rows (program p: rows p*R/P..) from its own SBUF, as nki-library's
        allgather_sb2sb_tiled does at LNC 2."""
        R, K = x.shape
        P = nl.num_programs(axes=0) if nl.program_ndim() != 0 else 1
        p = nl.program_id(axis=0) if nl.program_ndim() != 0 else 0
        rows = R // P
        out = nl.ndarray((R, K * n_ranks), dtype=x.dtype, buffer=nl.shared_hbm)
        src = nl.ndarray((rows, K), dtype=x.dtype, buffer=nl.sbuf)
        dst = nl.ndarray((rows, K * n_ranks), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x[p * rows:(p + 1) * rows, :])
        ncc.all_gather(dsts=[dst], srcs=[src], replica_group=ncc.ReplicaGroup([list(range(n_ranks))]),
                       collective_dim=1)
        nisa.dma_copy(dst=out[p * rows:(p + 1) * rows, :], src=dst)
        return out
    return nki, gather


@pytest.mark.parametrize("lnc", [1, 2])
def test_simulate_ranks_joins_ranks_and_pairs_programs_at_lnc2(lnc, monkeypatch):
    from trnsim.kernels.collectives import simulate_ranks
    nki, gather = _gather_kernel()
    monkeypatch.setenv("NKI_NC_VERSION", "gen3")
    n = 4
    xs = [np.random.default_rng(r).standard_normal((128, 8)).astype(np.float32) for r in range(n)]
    outs = simulate_ranks(nki.cpu_simulate(gather)[lnc], [{"x": xs[r], "n_ranks": n} for r in range(n)])
    want = np.concatenate(xs, axis=1)
    assert len(outs) == n
    for o in outs:
        assert np.array_equal(np.asarray(o), want)


def test_simulate_ranks_refuses_more_ranks_than_the_machine_has(monkeypatch):
    from trnsim.kernels.collectives import machine_of, simulate_ranks
    nki, gather = _gather_kernel()
    monkeypatch.setenv("NKI_NC_VERSION", "gen2")
    k = nki.cpu_simulate(gather)[1]
    assert machine_of(k.target) == "trn1.32xlarge"
    with pytest.raises(ValueError, match="33 ranks, but a trn1.32xlarge has 32 logical cores at LNC 1"):
        simulate_ranks(k, [{"x": np.zeros((128, 8), np.float32), "n_ranks": 33}] * 33)
    with pytest.raises(ValueError, match="no ranks"):
        simulate_ranks(k, [])


def test_tracemalloc_diagnosis_names_the_largest_allocation_site_of_the_call(monkeypatch):
    import time
    monkeypatch.setenv("TRNSIM_NKILIB_TRACEMALLOC", "1")
    m = peak_rss.TestMemory()
    with m.simulate():
        a = np.ones(40 * MiB, dtype=np.uint8)
        time.sleep(1.2)                 # the tracer's thread snapshots at its next high (every 0.5 s)
        del a
    sites = getattr(m, "sites", None) if m.ok else None
    if not m.ok:
        pytest.skip("needs Linux /proc/self/clear_refs")
    assert sites and sites[0].startswith("traced high ")
    assert int(sites[1].split(" MiB")[0]) >= 39         # the 40 MiB array, largest site first


def test_runner_records_a_test_that_ended_pytest_and_runs_the_rest(tmp_path):
    """A fake checkout whose second test ends its process (as the cap's hard limit or the OOM killer would): the
    runner records it as killed, starts pytest again on the tests not yet recorded, and reports all three."""
    if runner.missing_harness_requirements():
        pytest.skip("the harness's requirements are not installed")
    snap = _fake_snapshot(tmp_path,
        "import os, signal\n"
        "def test_a(): pass\n"
        "def test_b_dies(): os.kill(os.getpid(), signal.SIGKILL)\n"
        "def test_c(): pass\n")
    out = tmp_path / "rep"
    assert runner.main(["--snapshot", str(snap), "--snapshot-commit", "fake", "--max-memory", "4",
                        "--out", str(out), "test/integration"]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["restarts"] == 1 and not rep["partial"]
    s = rep["summary"]
    assert (s["runnable"], s["passed"], s["failed"]) == (3, 2, 1)
    assert s["causes"][0]["cause"].startswith("Killed: pytest was ended by signal N")
    assert "<snapshot>" in rep["command"] and str(snap) not in rep["command"]
    assert s["rss"]["measured"] == 2                   # the two that ran to the end


@needs_proc
def test_release_freed_drops_the_last_failures_frames():
    def fails():
        big = np.ones(200 * MiB, dtype=np.uint8)      # noqa: F841 -- held by the frame of the traceback
        raise MemoryError("stopped")
    try:
        fails()
    except MemoryError:
        sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()    # as pytest keeps a failure
    holding = peak_rss._vmhwm_bytes(field="VmRSS")
    peak_rss.release_freed()
    assert sys.last_traceback is None
    assert holding - peak_rss._vmhwm_bytes(field="VmRSS") >= 190 * MiB     # the failed test's 200 MiB went


def _snapshot():
    from trnsim import config
    return config.nki_library_path or ""


@pytest.mark.skipif(not _snapshot() or not os.path.isdir(os.path.join(_snapshot(), "test")),
                    reason="needs an nki-library checkout (NKI_LIBRARY_PATH)")
def test_a_collective_test_runs_on_its_ranks_through_the_harness(tmp_path):
    out = tmp_path / "coll"
    code = runner.main(["--snapshot", _snapshot(), "--snapshot-commit", "test", "--max-memory", "6", "-k",
                        "test_all_gather and 2ranks_lnc2 or test_allgather_sb2sb_tiled and m128_k512_bf16_tp4_lnc2",
                        "--out", str(out), "test/integration/nkilib/experimental/collectives"])
    assert code == 0
    s = json.loads(out.with_suffix(".json").read_text())["summary"]
    assert (s["runnable"], s["passed"], s["not_simulated"]) == (2, 2, 0), (s["causes"], s["not_simulated_causes"])
    assert s["rss"]["measured"] == 2 and set(s["rss"]["how"]) <= {"VmHWM", "ru_maxrss"}


@needs_proc
def test_after_a_capped_test_that_keeps_its_memory_pytest_starts_again(tmp_path):
    """A test goes above the cap and its arrays stay referenced (a module global here; in the harness, what keeps
    its exception): it fails with ResidentMemoryExceeded, the plugin ends the process at its teardown, and the
    runner runs the next test in a new pytest instead of letting it start above the cap."""
    if runner.missing_harness_requirements():
        pytest.skip("the harness's requirements are not installed")
    snap = _fake_snapshot(tmp_path,
        "import time\n"
        "import numpy as np\n"
        "HELD = []\n"
        "def test_a_grows():\n"
        "    for i in range(150):\n"
        "        HELD.append(np.ones(20 * 2 ** 20, dtype=np.uint8))\n"
        "        time.sleep(0.02)\n"
        "def test_b():\n"
        "    pass\n")
    out = tmp_path / "rep"
    assert runner.main(["--snapshot", str(snap), "--snapshot-commit", "fake", "--max-memory", "1", "--out", str(out),
                        "test/integration"]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    s = rep["summary"]
    assert rep["restarts"] == 1 and not rep["partial"], rep
    assert (s["runnable"], s["passed"], s["failed"]) == (2, 1, 1)
    assert s["causes"][0]["cause"].startswith("ResidentMemoryExceeded")


def test_capped_tests_are_the_ones_whose_last_record_the_cap_stopped():
    recs = [{"nodeid": "a", "when": "call", "type": "ResidentMemoryExceeded"},
            {"nodeid": "b", "when": "call", "type": "Killed"},
            {"nodeid": "c", "when": "call", "outcome": "passed"},
            {"nodeid": "d", "when": "call", "type": "Killed"}, {"nodeid": "d", "when": "call", "outcome": "passed"},
            {"nodeid": "e", "when": "setup", "type": "Killed"},
            {"nodeid": "f", "when": "call", "type": "AssertionError"}]
    assert runner.capped_tests(recs) == ["a", "b"]


def test_retry_memory_must_be_above_max_memory(tmp_path, capsys):
    snap = tmp_path / "snap"
    (snap / "test").mkdir(parents=True)
    (snap / "test" / "conftest.py").write_text("")
    assert runner.main(["--snapshot", str(snap), "--max-memory", "6", "--retry-memory", "6",
                        "--out", str(tmp_path / "r")]) == 2
    assert "--retry-memory 6 must be above --max-memory 6" in capsys.readouterr().err


@needs_proc
def test_a_test_the_cap_stopped_runs_again_alone_with_the_retry_cap(tmp_path):
    """--retry-memory: the test that went above --max-memory runs once more afterwards, alone, under the larger
    cap, and passes there; the other test is not run again; the report says so."""
    if runner.missing_harness_requirements():
        pytest.skip("the harness's requirements are not installed")
    runs = tmp_path / "runs.txt"
    snap = _fake_snapshot(tmp_path,
        "import time\n"
        "import numpy as np\n"
        f"RUNS = {str(runs)!r}\n"
        "def test_a_grows():\n"
        "    held = []\n"
        "    for i in range(70):\n"
        "        held.append(np.ones(20 * 2 ** 20, dtype=np.uint8))\n"
        "        time.sleep(0.01)\n"
        "def test_b():\n"
        "    with open(RUNS, 'a') as f:\n"
        "        f.write('b\\n')\n")
    out = tmp_path / "rep"
    assert runner.main(["--snapshot", str(snap), "--snapshot-commit", "fake", "--max-memory", "1",
                        "--retry-memory", "3", "--out", str(out), "test/integration"]) == 0
    rep = json.loads((tmp_path / "rep.json").read_text())
    s = rep["summary"]
    assert rep["retried"] == 1 and not rep["partial"], rep
    assert (s["runnable"], s["passed"], s["failed"]) == (2, 2, 0), s
    assert runs.read_text() == "b\n"                    # test_b ran once: only the stopped test was retried
    md = (tmp_path / "rep.md").read_text()
    assert "ran once more afterwards, one at a time, capped at 3 GiB" in md
