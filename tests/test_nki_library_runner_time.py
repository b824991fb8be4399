"""tools/run_nki_library.py --phases / --profile: the per-test phase times (tests/support/nki_library/phase_times.py),
their summary in the report, and the profile of program threads (no nki-library checkout needed)."""

import json
import pstats
from pathlib import Path

import numpy as np
import pytest
from suite_files import load_file

REPO = Path(__file__).resolve().parent.parent
SUPPORT = REPO / "tests" / "support" / "nki_library"


pt = load_file("phase_times_under_test", SUPPORT / "phase_times.py")
runner = load_file("run_nki_library_time", REPO / "tools" / "run_nki_library.py")


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_phases_are_exclusive_and_add_up():
    clk = FakeClock()
    ph = pt.TestPhases(clock=clk)
    ph.enter("setup")
    clk.t = 1.0
    ph.switch("inputs")             # setup 1 s
    clk.t = 3.0
    ph.enter("validate")            # inputs 2 s so far
    clk.t = 4.0
    ph.enter("golden")              # validate 1 s so far; the golden inside it is not the validator's
    clk.t = 9.0
    ph.leave("golden")              # golden 5 s
    clk.t = 9.5
    ph.leave("validate")            # validate 1.5 s
    clk.t = 10.0
    ph.switch("teardown")           # inputs 2.5 s
    clk.t = 10.25
    ph.finish()
    rec = ph.record()
    assert rec == {"setup": 1.0, "inputs": 2.5, "validate": 1.5, "golden": 5.0, "teardown": 0.25}
    assert sum(rec.values()) == 10.25


def test_phases_refuse_unknown_or_unbalanced():
    ph = pt.TestPhases()
    with pytest.raises(ValueError, match="unknown phase 'compile'"):
        ph.enter("compile")
    ph.enter("setup")
    with pytest.raises(RuntimeError, match="leaving 'golden' but the open phases are \\['setup'\\]"):
        ph.leave("golden")


def test_timed_charges_the_running_test_only():
    clk = FakeClock()

    def work(x):
        clk.t += x
        return x * 2
    f = pt.timed("golden", work)
    assert pt.timed("golden", f) is f               # wrapping twice charges once
    assert f(3) == 6                                # no test running: just the call
    pt.CURRENT = ph = pt.TestPhases(clock=clk)
    try:
        ph.enter("inputs")
        assert f(2) == 4
        ph.finish()
    finally:
        pt.CURRENT = None
    assert ph.record() == {"golden": 2.0}
    g = pt.timed("simulate", work)
    pt.CURRENT = ph = pt.TestPhases(clock=clk, cpu_clock=clk)
    try:
        ph.enter("inputs")
        g(1.5)
        ph.finish()
    finally:
        pt.CURRENT = None
    assert ph.record() == {"simulate": 1.5} and ph.record_cpu() == {"simulate": 1.5}


def _lines():
    fam = "integration/nkilib/core/{}/test_x.py::T::t[{}]"
    return [
        {"nodeid": fam.format("qkv", 0), "wall_s": 10.0, "before_first_test_s": 120.0,
         "phase_s": {"setup": 0.5, "inputs": 2.5, "golden": 3.0, "simulate": 4.0}},
        {"nodeid": fam.format("qkv", 1), "wall_s": 0.5, "phase_s": {"setup": 0.5}},
        {"nodeid": fam.format("mlp", 0), "wall_s": 6.0, "phase_s": {"setup": 1.0, "simulate": 5.0}},
        {"nodeid": fam.format("mlp", 0), "wall_s": 2.0, "phase_s": {"setup": 0.0, "simulate": 2.0},
         "cpu_s": {"simulate": 1.5}},                                                               # resumed: latest
    ]


def test_summarize_splits_by_phase_family_and_outcome():
    ids = [ln["nodeid"] for ln in _lines()]
    m = pt.summarize(_lines(), {ids[0]: "passed", ids[1]: "skipped", ids[2]: "passed"})
    assert m["tests"] == 3 and m["wall_s"] == 12.5
    assert m["phase_s"]["simulate"] == 6.0 and m["phase_s"]["setup"] == 1.0 and m["phase_s"]["golden"] == 3.0
    assert m["kinds"] == {"ran": {"tests": 2, "wall_s": 12.0}, "skipped": {"tests": 1, "wall_s": 0.5}}
    assert m["families"]["core/qkv"]["tests"] == 2 and m["families"]["core/qkv"]["simulate"] == 4.0
    assert m["families"]["core/mlp"]["wall_s"] == 2.0
    assert m["process_starts_s"] == [120.0]
    md = "\n".join(pt.render(m))
    assert "| simulate | 6.0 | 48.0% |" in md
    assert "| core/qkv | 2 | 10 | 10% | 24% | 29% | 0% | 38% |" in md
    assert "| core/mlp | 1 | 2 | 0% | 0% | 0% | 0% | 100% | 0% | 0% | 0% | 0% | 1.5 / 2.0 |" in md
    assert "in the simulate calls: 1.5 s of their 6.0 s wall" in md
    assert "before the first test of each pytest process (collection, imports): 120 s" in md


def test_runner_attaches_phases_to_the_tests_records_and_summarizes():
    ids = [ln["nodeid"] for ln in _lines()]
    recs = [{"nodeid": ids[0], "when": "call", "outcome": "passed"},
            {"nodeid": ids[1], "when": "setup", "outcome": "skipped"},
            {"nodeid": ids[2], "when": "call", "outcome": "failed"},
            {"nodeid": "integration/nkilib/core/mlp/test_y.py", "when": "collect", "outcome": "error"}]
    runner.attach_phases(recs, _lines())
    assert recs[0]["phase_s"]["golden"] == 3.0 and recs[0]["before_first_test_s"] == 120.0
    assert recs[1]["wall_s"] == 0.5
    assert recs[2]["wall_s"] == 2.0                  # the latest line of a test
    assert "phase_s" not in recs[3]
    t = runner.time_summary(recs)
    assert t["kinds"]["skipped"]["tests"] == 1 and t["tests"] == 3
    assert runner.time_summary([{"nodeid": "x", "when": "call", "outcome": "passed"}]) is None


def _spin(n):
    s = 0
    for i in range(n):
        s += i
    return s


def test_profile_sees_program_threads(tmp_path, monkeypatch):
    """A two-program launch runs its programs on threads: their functions are in the simulate call's profile."""
    from trnsim.machine.programs import Programs
    orig = Programs.__dict__["_thread"]

    from trnsim.targets import get_target

    class Core:
        programs = program = None
        target = get_target("trn2")

    def launch():
        progs = Programs([Core(), Core()])
        return progs.run([lambda: _spin(2000), lambda: _spin(3000)])
    monkeypatch.setenv("TRNSIM_NKILIB_PROFILE", str(tmp_path))
    monkeypatch.delenv("TRNSIM_NKILIB_PROFILE_WHOLE", raising=False)
    f = pt.profiled(launch, lambda: "integration/nkilib/core/attention/test_a.py::t[0]")
    assert f() == [_spin(2000), _spin(3000)]
    assert Programs.__dict__["_thread"] is orig                      # restored
    idx = [json.loads(ln) for ln in (tmp_path / "index.jsonl").read_text().splitlines()]
    assert idx[0]["nodeid"].endswith("test_a.py::t[0]")
    st = pstats.Stats(str(tmp_path / idx[0]["prof"])).stats
    spins = [v for (fn, line, name), v in st.items() if name == "_spin"]
    assert spins and spins[0][1] == 2                # both programs' calls, from their own threads
    fams = pt.profile_summary(str(tmp_path))
    assert fams["core/attention"]["calls"] == 1
    assert any("_spin" in k for k, v in fams["core/attention"]["funcs"])
    md = "\n".join(pt.render_profile(fams))
    assert "### core/attention: 1 calls" in md


def test_area_of():
    assert pt.area_of("/x/trnsim/isa/vector.py") == "trnsim/isa"
    assert pt.area_of("/x/trnsim/config.py") == "trnsim/config"
    assert pt.area_of("/s/nki-library/test/utils/comparators.py") == "nki-library tests and harness"
    assert pt.area_of("/s/src/nkilib_src/nkilib/core/qkv.py") == "nki-library kernels"
    assert pt.area_of("~") == "builtins"


# ---- the allpairspy stand-in: its faster search gives the rows of the plain one ----

class _PlainAllPairs:
    """The stand-in's greedy search as first written (a score searched per candidate, the filter called on every
    ask): the reference its faster form must reproduce row for row."""

    BUDGET = 2000

    def __init__(self, values, filter_func):
        self.vals = [list(v) for v in values]
        self.filt = filter_func
        self.budget = self.BUDGET
        self.calls = 0

    def ok(self, row):
        self.budget -= 1
        if self.budget < 0:
            return False
        self.calls += 1
        try:
            return bool(self.filt(list(row)))
        except Exception:
            return False

    def rows(self):
        import itertools
        vals, k = self.vals, len(self.vals)
        unc = {(i, a, j, b) for i, j in itertools.combinations(range(k), 2)
               for a in range(len(vals[i])) for b in range(len(vals[j]))}
        out = []
        while unc:
            self.budget = self.BUDGET
            row = self.build(unc)
            gained = unc & self.pairs(row) if row is not None else set()
            if not gained:
                for pair in sorted(unc, key=repr):
                    i, a, j, b = pair
                    self.budget = self.BUDGET
                    row = self.build(unc, forced={i: a, j: b})
                    if row is None:
                        unc.discard(pair)
                        continue
                    gained = unc & self.pairs(row)
                    break
            if not gained:
                break
            unc -= gained
            out.append([vals[i][row[i]] for i in range(k)])
        return out

    @staticmethod
    def pairs(row):
        import itertools
        return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}

    def build(self, unc, row=(), forced=None):
        vals, k, i = self.vals, len(self.vals), len(row)
        if i == k:
            return list(row)
        forced = forced or {}

        def score(a):
            return sum((j, row[j], i, a) in unc for j in range(i)) + sum(
                any((i, a, j, b) in unc for b in range(len(vals[j]))) for j in range(i + 1, k))
        for a in ([forced[i]] if i in forced else sorted(range(len(vals[i])), key=lambda a: -score(a))):
            cand = row + (a,)
            if self.ok([vals[j][cand[j]] for j in range(len(cand))]):
                done = self.build(unc, cand, forced)
                if done is not None:
                    return done
        return None


def _filters():
    yield lambda row: True
    yield lambda row: len(row) < 3 or (row[0] + row[2]) % 3 != 0              # rejects some full rows
    yield lambda row: len(row) < 2 or row[1] != row[0]                          # rejects prefixes
    yield lambda row: len(row) < 4                                              # rejects every full row
    yield lambda row: 1 // (row[-1] % 4) >= 0                                   # raises on some values


@pytest.mark.parametrize("seed", range(6))
def test_allpairs_standin_rows_equal_the_plain_search(seed):
    ap = load_file("standin_allpairspy_time", SUPPORT / "standins" / "allpairspy" / "__init__.py")
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 6))
    values = [list(range(int(rng.integers(1, 6)))) for _ in range(k)]
    for f in _filters():
        want = _PlainAllPairs(values, f).rows()
        got = [list(r) for r in ap.AllPairs(values, filter_func=f)]
        assert got == want, (values, got, want)


def test_allpairs_standin_keeps_spending_the_budget_per_ask():
    """A filter that rejects every full row: the search ends when the budget runs out, as with a call per ask
    (the rows found depend on where it stops)."""
    ap = load_file("standin_allpairspy_time2", SUPPORT / "standins" / "allpairspy" / "__init__.py")
    values = [list(range(6))] * 4
    f = lambda row: len(row) < 4 or sum(row) == 19       # noqa: E731 - few full rows pass
    assert [list(r) for r in ap.AllPairs(values, filter_func=f)] == _PlainAllPairs(values, f).rows()


def test_runner_passes_the_collection_seed_and_the_phase_switches(tmp_path, monkeypatch):
    """The pytest child gets NEURON_PYTHONHASHSEED=0 (the harness's own seed for its random test shapes; it sets
    it only in xdist workers), TRNSIM_NKILIB_PHASES with --phases and TRNSIM_NKILIB_PROFILE with --profile."""
    snap = tmp_path / "nki-library"
    (snap / "test" / "integration").mkdir(parents=True)     # the runner's default test path (checked to exist)
    (snap / "test" / "conftest.py").write_text("")
    seen = []

    class FakePopen:
        def __init__(self, cmd, cwd=None, env=None, **kw):
            seen.append(dict(env, CMD=" ".join(cmd)))
            self.returncode = 0
            self.pid = 0

        def communicate(self, timeout=None):
            return "", None
    monkeypatch.setattr(runner, "missing_harness_requirements", lambda: [])
    monkeypatch.setattr(runner.subprocess, "Popen", FakePopen)
    monkeypatch.delenv("NEURON_PYTHONHASHSEED", raising=False)
    monkeypatch.delenv("TRNSIM_NKILIB_PHASES", raising=False)
    argv = ["--snapshot", str(snap), "--phases", "--profile", str(tmp_path / "prof"), "--out", str(tmp_path / "r")]
    assert runner.main(argv) == 1                     # the fake pytest recorded nothing
    env = seen[0]
    assert env["NEURON_PYTHONHASHSEED"] == "0"
    assert env["TRNSIM_NKILIB_PHASES"] == "1"
    assert env["TRNSIM_NKILIB_PROFILE"] == str(tmp_path / "prof")
    seen.clear()
    monkeypatch.setenv("NEURON_PYTHONHASHSEED", "7")     # a seed the caller chose is kept
    assert runner.main(["--snapshot", str(snap), "--out", str(tmp_path / "r")]) == 1
    assert seen[0]["NEURON_PYTHONHASHSEED"] == "7" and "TRNSIM_NKILIB_PHASES" not in seen[0]
    assert "--max-worker-restart" not in seen[0]["CMD"] and "-n 0" in seen[0]["CMD"]
    seen.clear()
    assert runner.main(["--snapshot", str(snap), "-j", "2", "--out", str(tmp_path / "r")]) == 1
    assert f"-n 2 --max-worker-restart {runner.XDIST_MAX_RESTARTS}" in seen[0]["CMD"]    # not xdist's 4 per worker
