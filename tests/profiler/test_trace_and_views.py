"""The trace opens (parsed back: tracks, slices, flows, counters), the PNG is written, the summary prints, and
the ``trnsim.profile`` API and ``trnsim profile`` command work."""

import json
import os
import textwrap

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.cli import main, parse_arg_spec

trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

from trnsim.kernels.library.matmul import tiled_matmul  # noqa: E402

BF16 = ml_dtypes.bfloat16


def scaled_copy(x):
    """Two tiles per core, computed on two engines, so there are cross-engine flows."""
    R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128, :])
        u = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.activation(t, nl.exp, u)
        nisa.dma_copy(out[i * 128:(i + 1) * 128, :], t)
    return out


@pytest.fixture(scope="module")
def prof():
    x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)
    p = trnsim.profile(trnsim.jit(scaled_copy)[2])(x)
    np.testing.assert_allclose(p.outputs, np.exp(2 * x.astype(np.float64)), rtol=1e-5)
    return p


def test_profile_api(prof):
    assert prof.total_ns == prof.timeline.total_ns > 0
    assert set(prof.engine_active) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
    assert prof.engine_active["vector"] > 0 and prof.engine_active["scalar"] > 0
    assert prof.mfu == 0.0          # no matmul
    assert 0 < prof.mbu < 1
    text = prof.summary()
    for word in ("total time", "MFU", "MBU", "DMA utilisation", "peak SBUF", "critical path", "scalar"):
        assert word in text
    assert "test_trace_and_views.py:" in text        # time per kernel source line


def test_trace_parses_back_with_tracks_slices_flows_and_counters(prof, tmp_path):
    path = tmp_path / "t.json"
    prof.save_trace(str(path))
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    tl = prof.timeline
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert set(procs) == {0, 1} and all("NeuronCore" in n for n in procs.values())
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    names = set(threads.values())
    assert {"tensor engine", "vector engine", "scalar engine", "gpsimd engine"} <= names
    assert {f"DMA queue {q}" for q in range(16)} <= names
    slices = [e for e in ev if e["ph"] == "X"]
    dma_rows = [r for r in tl.rows() if r.engine == "dma"]
    assert len(slices) == (len(tl) - len(dma_rows)) + sum(r.nqueues for r in dma_rows)
    for s in slices:
        assert (s["pid"], s["tid"]) in threads
        assert s["dur"] >= 0 and s["ts"] >= 0
        assert s["args"]["source"].startswith("test_trace_and_views.py:")
    ts = [s for s in slices if s["name"] == "tensor_scalar"]
    assert len(ts) == 4 and all(threads[(s["pid"], s["tid"])] == "vector engine" for s in ts)
    # flows: every start has its finish, and each end lies inside a slice of its track
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert starts and set(starts) == set(ends)
    by_track = {}
    for s in slices:
        by_track.setdefault((s["pid"], s["tid"]), []).append(s)
    for fid, f in ends.items():
        assert f["bp"] == "e"
        assert any(s["ts"] - 1e-9 <= f["ts"] <= s["ts"] + s["dur"] + 1e-9 for s in by_track[(f["pid"], f["tid"])])
        st = starts[fid]
        assert any(s["ts"] - 1e-9 <= st["ts"] <= s["ts"] + s["dur"] + 1e-9 for s in by_track[(st["pid"], st["tid"])])
    counters = {(e["pid"], e["name"]) for e in ev if e["ph"] == "C"}
    for c in (0, 1):
        assert {(c, "SBUF bytes live"), (c, "PSUM bytes live"), (c, "HBM bandwidth")} <= counters
    sbuf = [e["args"]["bytes"] for e in ev if e["ph"] == "C" and e["name"] == "SBUF bytes live"]
    assert max(sbuf) == tl.peak_bytes("sbuf") > 0


def test_png_is_written(prof, tmp_path):
    path = tmp_path / "t.png"
    prof.plot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_prints_summary_and_writes_trace_and_png(tmp_path, capsys):
    assert main(["demo", "--m", "128", "--k", "256", "--n", "512", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "MFU" in out and "total time" in out and "-> OK" in out
    assert "matmul.py:" in out                      # the library kernel's own source lines
    doc = json.loads((tmp_path / "demo.trace.json").read_text())
    assert any(e["ph"] == "X" and e["name"] == "nc_matmul" for e in doc["traceEvents"])
    assert (tmp_path / "demo.png").read_bytes()[:4] == b"\x89PNG"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]     # written atomically


def test_parse_arg_spec():
    assert parse_arg_spec("a=128x512:bfloat16") == ("a", (128, 512), "bfloat16")
    assert parse_arg_spec("b=64") == ("b", (64,), "float32")
    with pytest.raises(ValueError):
        parse_arg_spec("nope")


KERNEL_FILE = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(a.shape[0] // 128):
        ta = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((128, a.shape[1]), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(ta, a[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(tb, b[i * 128:(i + 1) * 128, :])
        nisa.tensor_tensor(ta, ta, tb, op=nl.add)
        nisa.dma_copy(out[i * 128:(i + 1) * 128, :], ta)
    return out


def inputs():
    return (np.ones((256, 128), np.float32), np.ones((256, 128), np.float32))
'''


@pytest.mark.parametrize("how", ["args", "builder", "shape-only"])
def test_profile_command(tmp_path, capsys, how):
    f = tmp_path / "kern.py"
    f.write_text(textwrap.dedent(KERNEL_FILE))
    out = tmp_path / "out"
    argv = ["profile", f"{f}::add", "--out", str(out), "--no-progress"]
    if how == "builder":
        argv += ["--inputs", "inputs"]
    else:
        argv += ["--arg", "a=256x128:bfloat16", "--arg", "b=256x128:bfloat16"]
    if how == "shape-only":
        argv.append("--shape-only")
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "trnsim profile: add" in text and "MBU" in text and "kern.py:" in text
    json.loads((out / "add.trace.json").read_text())
    assert (out / "add.png").exists()


def test_profile_command_reports_a_missing_kernel(tmp_path, capsys):
    f = tmp_path / "kern.py"
    f.write_text(textwrap.dedent(KERNEL_FILE))
    assert main(["profile", f"{f}::nope", "--no-progress", "--out", str(tmp_path)]) == 2
    assert "'nope'" in capsys.readouterr().err


def test_progress_bar_writes_to_its_stream(tmp_path):
    import io
    from trnsim.cli import Progress
    s = io.StringIO()
    p = Progress(True, stream=s)
    p.scheduling(5, 10)
    p.finish()
    assert "scheduling: [###############" in s.getvalue() and "5/10" in s.getvalue()


def test_shape_only_profile_matches_full(tmp_path):
    at = np.zeros((256, 128), BF16)
    b = np.zeros((256, 512), BF16)
    full = trnsim.profile(tiled_matmul)(at, b)
    shape = trnsim.profile(tiled_matmul, execute=False)(at, b)
    assert shape.outputs is None and full.outputs is not None
    assert full.timeline == shape.timeline
    assert full.total_ns == shape.total_ns


def test_profile_a_v1_kernel(nki):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels"))
    import v1_team_kernels as vk
    a = np.ones((256, 1024), np.float32)
    p = trnsim.profile(vk.add_spmd[2, 2])(a, a)
    np.testing.assert_array_equal(p.outputs, a + a)
    assert p.timeline.core_ids == (0, 1, 2, 3) and p.total_ns > 0
    shape = trnsim.profile(vk.add_spmd[2, 2], execute=False)(a, a)
    assert shape.timeline == p.timeline


# ---------------------------------------------------------------------------------- waits and findings
def test_waits_and_findings_explain_a_dma_bound_matmul():
    import ml_dtypes

    from trnsim.kernels.library.matmul import tiled_matmul
    from trnsim.profiler.findings import descriptor_overhead, findings, hfu, waits
    at = np.zeros((512, 256), ml_dtypes.bfloat16)
    b = np.zeros((512, 1024), ml_dtypes.bfloat16)
    tl = trnsim.profile(tiled_matmul, execute=False)(at, b).timeline
    evt, dma = waits(tl)
    # every matmul that started late because its operands were still loading has a dma_wait equal to its gap
    pe = [r for r in tl.rows() if r.engine == "tensor"]
    prev_end = 0.0
    for r in pe:
        gap = r.start - prev_end
        if gap > 1e-6 and tl.engine[r.bind] == "dma":
            assert dma[r.index] == pytest.approx(gap)
        prev_end = r.end
    assert sum(dma[r.index] for r in pe) > 0.5 * tl.total_ns          # the PE mostly waits for loads
    # [128, 128] and [128, 512] bf16 loads move 256 B and 1 KiB per partition: all under 2 KiB
    over, small = descriptor_overhead(tl)
    assert small == pytest.approx(1.0) and over > 0.3
    text = "\n".join(findings(tl))
    assert "Tensor Engine idle waiting for DMA" in text and "under 2 KiB per partition" in text
    assert "dma-bound" in text
    assert hfu(tl) == pytest.approx(tl.mfu, rel=1e-6)                 # full 128x128 matmuls: HFU = MFU


def test_trace_carries_evt_and_dma_waits(tmp_path):
    import ml_dtypes

    from trnsim.kernels.library.matmul import tiled_matmul
    p = trnsim.profile(tiled_matmul, execute=False)(np.zeros((256, 128), ml_dtypes.bfloat16),
                                                    np.zeros((256, 512), ml_dtypes.bfloat16))
    p.save_trace(tmp_path / "t.json")
    ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    mm = [e for e in ev if e.get("ph") == "X" and e["name"] == "nc_matmul"]
    first = min(mm, key=lambda e: e["ts"])
    # the first matmul waits from t=0 for its operands' loads: its dma_wait is its whole start time
    assert first["args"]["dma_wait_ns"] == pytest.approx(first["args"]["start_ns"], abs=1e-3)
