"""The nki-library runner's memory attribution (issue 31): the stand-in simulate call of ``--stub-kernels``
(tests/support/nki_library/sim_stub.py), which makes a test's peak the harness's own, and the resident peak per
harness phase (peak_rss.TestMemory.checkpoint, driven by phase_times.TestPhases' boundaries).  None needs the
snapshot: the harness's classes are stood in by small ones with the same fields; the /proc measurements skip where
/proc/self/clear_refs is not available (not Linux)."""

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from suite_files import load_file

REPO = Path(__file__).resolve().parent.parent
SUPPORT = REPO / "tests" / "support" / "nki_library"

sim_stub = load_file("sim_stub", SUPPORT / "sim_stub.py")
peak_rss = load_file("peak_rss_stub_tests", SUPPORT / "peak_rss.py")
phase_times = load_file("phase_times_stub_tests", SUPPORT / "phase_times.py")
runner = load_file("run_nki_library_stub", REPO / "tools" / "run_nki_library.py")

MiB = 2 ** 20


# -- the harness's golden classes, as far as the stand-in reads them (test/utils/common_dataclasses.py) ----------
@dataclass
class Lazy:
    output_ndarray: dict
    lazy_golden_generator: object = None
    built: list = field(default_factory=list)

    @property
    def golden(self):
        self.built.append(1)
        return self.lazy_golden_generator()


@dataclass
class WithValidator:
    validator: object
    output_ndarray: np.ndarray

    @property
    def dtype(self):
        return self.output_ndarray.dtype


def normalize(g):
    return g.output_ndarray if isinstance(g, Lazy) else g


def _harness(golden_output):
    ss = types.SimpleNamespace(simulate_kernel=lambda *a: pytest.fail("the kernel must not run"))

    def run_simulator_inference(kut):
        return ss.simulate_kernel(kut.kernel_func, kut.kernel_input, 1)
    ss.run_simulator_inference = run_simulator_inference
    cd = types.SimpleNamespace(normalize_golden_output=normalize, LazyGoldenGenerator=Lazy)
    sim_stub.install(ss, cd)
    kut = types.SimpleNamespace(kernel_func=None, kernel_input={}, validation_args=types.SimpleNamespace(
        golden_output=golden_output))
    return ss, kut


def test_stub_outputs_are_the_goldens_values_in_the_expected_shapes_and_dtypes():
    bf = np.dtype(ml_dtypes.bfloat16)
    gold = {"out": (np.arange(12, dtype=np.float32) / 7).reshape(3, 4).astype(bf),
            "idx": np.array([[5, 6]], dtype=np.int32)}
    lazy = Lazy({"out": np.zeros((3, 4), bf), "idx": np.zeros((1, 2), np.int32)}, lambda: gold)
    ss, kut = _harness(lazy)
    outs = ss.run_simulator_inference(kut)
    assert [o.dtype for o in outs] == [bf, np.dtype(np.int32)] and [o.shape for o in outs] == [(3, 4), (1, 2)]
    assert np.array_equal(outs[0].astype(np.float64), gold["out"].astype(np.float64))
    assert np.array_equal(outs[1], gold["idx"]) and outs[1] is not gold["idx"]     # a copy, as a kernel's own
    assert lazy.built == [1]


def test_stub_builds_the_golden_before_any_output_exists(monkeypatch):
    # in a real run the harness drops the kernel's outputs (dumped to files) before its validator builds the golden
    events = []
    real_empty = np.empty
    monkeypatch.setattr(sim_stub.np, "empty", lambda *a, **k: events.append("output") or real_empty(*a, **k))
    lazy = Lazy({"out": np.zeros((4, 4), np.float32)}, lambda: events.append("golden") or {"out": np.eye(4)})
    ss, kut = _harness(lazy)
    (out,) = ss.run_simulator_inference(kut)
    assert events == ["golden", "output"] and np.array_equal(out, np.eye(4, dtype=np.float32))


def test_stub_gives_zeros_for_a_validator_golden_and_refuses_outside_an_inference():
    ss, kut = _harness({"out": WithValidator(object, np.empty((2, 5), np.float16))})
    (out,) = ss.run_simulator_inference(kut)
    assert out.dtype == np.float16 and out.shape == (2, 5) and not out.any()
    with pytest.raises(RuntimeError, match="run_simulator_inference was not entered"):
        ss.simulate_kernel(None, {}, 1)


def test_stub_is_off_unless_asked(monkeypatch):
    monkeypatch.delenv(sim_stub.ENV, raising=False)
    assert not sim_stub.enabled()
    monkeypatch.setenv(sim_stub.ENV, "1")
    assert sim_stub.enabled()
    assert "--stub-kernels" in runner.build_parser().format_help()


def _can_reset():
    return sys.platform.startswith("linux") and peak_rss.reset()


@pytest.mark.skipif(not _can_reset(), reason="needs Linux /proc/self/clear_refs")
def test_each_phase_is_charged_the_peak_reached_while_it_was_open():
    peak_rss.release_freed()
    m = peak_rss.TestMemory()
    peak_rss.CURRENT = m
    try:
        ph = phase_times.TestPhases(on_boundary=m.checkpoint)
        ph.enter("inputs")
        base = peak_rss.rss_now()
        a = np.ones(200 * MiB, dtype=np.uint8)            # the inputs: 200 MiB, kept
        ph.enter("golden")
        g = np.ones(300 * MiB, dtype=np.uint8)            # a golden temporary, freed before the phase ends
        del g
        peak_rss.release_freed()
        ph.leave("golden")
        with m.simulate():                                 # the simulate call inside the phase "simulate"
            s = np.ones(100 * MiB, dtype=np.uint8)
            del s
        ph.finish()
        rec = m.record()
    finally:
        peak_rss.CURRENT = None
    p = rec["peak_rss_phase_bytes"]
    assert p["golden"] - base >= 480 * MiB                 # inputs + the 300 MiB temporary
    assert p["simulate"] - base < 400 * MiB                # inputs + 100 MiB, not the golden's high
    assert p["simulate"] - base >= 280 * MiB
    assert rec["peak_rss_bytes"] >= p["golden"]            # the test's peak keeps every phase's
    del a


def test_report_shows_the_peak_per_phase_of_the_largest_tests():
    G = 2 ** 30
    recs = [{"nodeid": "integration/nkilib/core/qkv/t.py::T::a", "when": "call", "outcome": "passed",
             "peak_rss_bytes": 7 * G, "peak_rss_how": "VmHWM",
             "peak_rss_phase_bytes": {"inputs": 2 * G, "simulate": 3 * G, "validate": 7 * G}},
            {"nodeid": "integration/nkilib/core/qkv/t.py::T::b", "when": "call", "outcome": "passed",
             "peak_rss_bytes": 1 * G, "peak_rss_how": "VmHWM"}]
    m = runner.rss_summary(recs)
    assert [r["nodeid"] for r in m["phase_peaks"]] == [recs[0]["nodeid"]]
    md = "\n".join(runner.render_rss(m))
    assert "| test | peak | inputs | simulate | validate |" in md
    assert "| 7.00 GiB | 2.00 GiB | 3.00 GiB | 7.00 GiB |" in md
    lines = [{"nodeid": recs[1]["nodeid"], "wall_s": 1.0, "phase_s": {}, "peak_rss_phase_bytes": {"inputs": 5}}]
    runner.attach_phases(recs, lines)
    assert recs[1]["peak_rss_phase_bytes"] == {"inputs": 5}
