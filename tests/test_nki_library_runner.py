"""tools/run_nki_library.py: the classification of nki-library's results, the harness stand-ins, and a small slice
of nki-library's own suite run through the runner when the snapshot is on this machine (``NKI_LIBRARY_PATH``
names a checkout; skipped otherwise, as in CI)."""

import itertools
import json
import os
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from trnsim import config
from suite_files import load_file

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = config.nki_library_path or ""


runner = load_file("run_nki_library", REPO / "tools" / "run_nki_library.py")
STANDINS = REPO / "tests" / "support" / "nki_library" / "standins"
ndt = load_file("standin_neuron_dtypes", STANDINS / "neuron_dtypes" / "__init__.py")
pairs = load_file("standin_allpairspy", STANDINS / "allpairspy" / "__init__.py")

F = "integration/nkilib/core/{}/test_x.py::T::test[{}]"


def rec(fam, i, outcome, **kw):
    return {"nodeid": F.format(fam, i), "when": "call", "outcome": outcome, **kw}


def fake_snapshot(tmp_path):
    """A directory the runner takes for an nki-library checkout (its test/conftest.py), with no tests in it."""
    snap = tmp_path / "snap"
    (snap / "test").mkdir(parents=True)
    (snap / "test" / "conftest.py").write_text("")
    return snap


def results_file(tmp_path, *recs):
    res = tmp_path / "results.jsonl"
    res.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return res


def test_classify_counts_mismatches_failures_outside_and_negatives():
    recs = [
        rec("mlp", 0, "passed"), rec("mlp", 1, "passed"),
        rec("mlp", 2, "failed", chain=["ValidationException", "AssertionError"], type="AssertionError",
            message="Validation failed for ['out']"),
        rec("qkv", 0, "failed", chain=["InferenceException", "NkiValidationError"], type="NkiValidationError",
            message="tensor_tensor: shape 128 exceeds 64 [/x/kernel.py:12]", trnsim_frame="isa/vector.py:3 f"),
        rec("qkv", 1, "failed", chain=["InferenceException", "NkiValidationError"], type="NkiValidationError",
            message="tensor_tensor: shape 256 exceeds 64 [/y/kernel.py:99]", trnsim_frame="isa/vector.py:3 f"),
        rec("qkv", 2, "failed", chain=["KeyError"], type="KeyError", message="'mask_out_hbm'"),
        rec("qkv", 3, "failed", chain=["InferenceException", "AttributeError"], type="AttributeError",
            message="'PerRankLazyInputGenerator' object has no attribute 'items'"),
        rec("qkv", 4, "failed", chain=["ValidationException", "RuntimeError"], type="RuntimeError",
            message="The size of tensor a (4) must match"),
        rec("qkv", 5, "failed", chain=["InferenceException", "TypeError"], type="TypeError",
            message="Cannot cast array data from dtype('float8_e4m3fn_x4') to dtype('float32') according to the "
                    "rule 'unsafe'"),
        rec("qkv", 6, "failed", chain=["Killed"], type="Killed",
            message="pytest was ended by signal 9 while this test ran (9: most often the out-of-memory killer)"),
        rec("topk", 0, "passed", negative=True),
        rec("topk", 1, "failed", negative=True, chain=["AssertionError"], type="AssertionError",
            message="Test case was expected to fail, but it hasn't!"),
        rec("topk", 2, "skipped", message="Skipped: Skipping slow simulation test"),
        {"nodeid": "integration/nkilib/core/mlp/test_bad.py", "when": "collect", "outcome": "error",
         "message": "IndentationError: unexpected indent"},
    ]
    s = runner.classify(recs)
    assert (s["runnable"], s["passed"], s["mismatches"], s["failed"]) == (6, 2, 1, 3)   # killed: a failure
    assert (s["negative"], s["negative_passed"], s["skipped"], s["not_simulated"]) == (2, 1, 1, 4)
    assert s["mismatch_tests"] == [F.format("mlp", 2)]
    # the two refusals differ only in numbers and paths: one cause, counted twice, ranked first
    top = s["causes"][0]
    assert top["count"] == 2 and top["cause"].startswith("NkiValidationError: tensor_tensor: shape N exceeds N")
    assert any(c["cause"].startswith("numeric mismatch") and c["count"] == 1 for c in s["causes"][1:])
    assert s["families"]["core/mlp"] == {"runnable": 3, "passed": 2, "mismatch": 1}
    assert any(c["cause"].startswith("Killed: pytest was ended by signal N") for c in s["causes"])
    assert len(s["collect_errors"]) == 1
    whys = " ".join(c["cause"] for c in s["not_simulated_causes"])
    assert "per-rank" in whys and "golden reference" in whys and "before its kernel ran" in whys
    assert "converts each output to its golden's dtype" in whys
    md = runner.render_md({"snapshot": "/s", "snapshot_commit": "abc1234", "platform": "trn2", "every": 10,
                           "limit": 0, "jobs": 2, "command": "python tools/run_nki_library.py", "standins": [],
                           "wall_s": 1.0, "summary": s})
    assert "abc1234" in md and "| runnable positive tests" in md and "| core/mlp | 3 | 2 | 1 | 0 |" in md


def test_mismatches_traced_to_a_golden_stay_counted_and_are_listed_with_the_reason():
    bad = dict(chain=["ValidationException", "AssertionError"], type="AssertionError",
               message="Validation failed for ['out']")
    recs = [rec("moe", 0, "failed", **bad), rec("moe", 1, "failed", **bad), rec("moe", 2, "passed")]
    golden = {F.format("moe", 1): {"nodeid": F.format("moe", 1), "reason": "fp32 router input in the golden",
                                   "evidence": "tools/x.py"}}
    s = runner.classify(recs, golden=golden)
    assert s["mismatches"] == 2                                  # still counted
    assert [g["nodeid"] for g in s["mismatches_golden"]] == [F.format("moe", 1)]
    md = runner.render_md({"snapshot": "/s", "snapshot_commit": "abc1234", "platform": "trn2", "every": 10,
                           "limit": 0, "jobs": 2, "command": "c", "standins": [], "wall_s": 1.0, "summary": s})
    assert "| numeric mismatches | 2 (1 traced to the test's golden, below) |" in md
    assert "fp32 router input in the golden (evidence: tools/x.py)" in md
    # the committed data file names real tests with a reason and evidence
    entries = runner.golden_defects()
    assert entries and all(e["reason"] and e["evidence"] and "::" in n for n, e in entries.items())


def test_runner_refuses_a_path_that_is_not_a_snapshot(tmp_path, capsys):
    assert runner.main(["--snapshot", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "not an nki-library checkout" in capsys.readouterr().err
    assert not (tmp_path / "r.md").exists()


def test_standin_static_cast_rounds_as_ml_dtypes():
    x = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32) * 10
    for dt in ("bfloat16", "float8_e4m3fn", ml_dtypes.float8_e5m2):
        got = ndt.static_cast(x, dt)
        assert got.dtype == np.dtype(dt)
        np.testing.assert_array_equal(got.astype(np.float32), x.astype(dt).astype(np.float32))
    np.testing.assert_array_equal(ndt.static_cast(np.array([1.4, 2.5, -3.6]), np.int32), [1, 2, -4])
    assert ndt.is_float_type(ml_dtypes.bfloat16) and ndt.is_float_type(np.float16)
    assert not ndt.is_float_type(np.int8) and not ndt.is_float_type(np.bool_)
    assert ndt.sizeinbytes(np.float32) == 4 and ndt.sizeinbytes(ndt.float8_e4m3fn_x4) == 4


def test_standin_float_to_int_cast_matches_the_float64_rint_path_in_blocks():
    import tracemalloc
    import warnings
    rng = np.random.default_rng(1)
    edges = [np.nan, np.inf, -np.inf, 2.0 ** 31, -2.0 ** 31 - 1, 1e30, -0.0, 0.5, 1.5, 2.5, -2.5, 255.5, 256.5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)          # NaN/inf to integers: NumPy warns either way
        for src in (np.float64, np.float32, np.float16):
            v = np.concatenate([rng.uniform(-300, 300, 3 * ndt._RINT_BLOCK + 7), edges]).astype(src)
            for tgt in (np.int32, np.uint8, np.int8, np.int64, np.bool_):
                want = np.rint(v.astype(np.float64)).astype(tgt)     # the cast as it was, whole-array
                got = ndt.static_cast(v, tgt)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (src, tgt)
            f = np.asfortranarray(v[:60000].reshape(200, 300))
            got = ndt.static_cast(f, np.int16)
            assert got.flags.f_contiguous and np.array_equal(got, np.rint(f.astype(np.float64)).astype(np.int16))
            strided = v[:60000].reshape(200, 300)[:, ::7]
            want = np.rint(strided.astype(np.float64)).astype(np.int32)
            assert np.array_equal(ndt.static_cast(strided, np.int32), want)
    assert ndt.static_cast(np.zeros((0, 3), np.float32), np.int32).shape == (0, 3)
    # memory: the uint8 result and a few blocks, not two whole float64 copies (4x a float32 input)
    x = rng.uniform(0, 1, 4_000_000).astype(np.float32)
    tracemalloc.start()
    try:
        ndt.static_cast(x, np.uint8)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= x.size + 16 * 8 * ndt._RINT_BLOCK, peak / x.nbytes      # measured 0.32 x the input's bytes


def test_standin_x4_cast_packs_four_values():
    from trnsim.memory.dtypes import dtype_of, unpack_x4
    v = np.array([[0.5, -1.0, 2.0, 448.0, 0.0, 1.5, -2.5, 3.0]], dtype=np.float32)
    packed = ndt.static_cast(v, ndt.float8_e4m3fn_x4)
    assert packed.shape == (1, 2) and packed.dtype == ndt.float8_e4m3fn_x4
    np.testing.assert_array_equal(unpack_x4(dtype_of("float8_e4m3fn_x4"), packed.view(np.uint32)).reshape(1, 8), v)
    np.testing.assert_array_equal(ndt.static_cast(packed, np.float32), v)     # back: last axis times four
    with pytest.raises(ValueError, match="multiple of 4"):
        ndt.static_cast(v[:, :6], ndt.float8_e4m3fn_x4)


def test_standin_x4_names_are_numpy_dtypes_as_the_snapshot_uses_them():
    """The snapshot allocates MX weights with ``np.zeros(shape, dtype=nl.float4_e2m1fn_x4)`` (an NKI dtype name),
    fills slices with static_cast results and reinterprets them with ``.view(np.uint16)``."""
    from trnsim.memory.dtypes import dtype_of
    rng = np.random.default_rng(1)
    for name, store, grid in (("float4_e2m1fn_x4", np.uint16, [0.5, -1.0, 1.5, 2.0, -3.0, 4.0, 6.0, 0.0]),
                              ("float8_e4m3fn_x4", np.uint32, [0.5, -1.0, 1.5, 2.0, -3.0, 4.0, 448.0, 0.0]),
                              ("float8_e5m2_x4", np.uint32, [0.5, -1.0, 1.5, 2.0, -3.0, 4.0, 57344.0, 0.0])):
        npd = np.dtype(name)
        assert npd == getattr(ndt, name) and npd.itemsize == np.dtype(store).itemsize
        assert str(npd) == name and repr(npd) == f"dtype('{name}')"     # the snapshot matches str(dtype)
        assert dtype_of(npd).name == name and ndt.sizeinbytes(npd) == npd.itemsize
        vals = rng.choice(np.array(grid, np.float32), size=(3, 16))   # exactly representable values
        w = np.zeros((2, 3, 4), dtype=name)
        w[1] = ndt.static_cast(vals, getattr(ndt, name))
        np.testing.assert_array_equal(ndt.static_cast(w[1], np.float32), vals)
        assert not w.view(store)[0].any() and w.view(store)[1].any()
        with pytest.raises(TypeError):
            w + np.float32(1)                   # packed bits have no arithmetic
        with pytest.raises(TypeError):
            w.astype(np.float32)                # nor a value cast (the snapshot's validator relies on the TypeError)
        both = np.concatenate([w[1], w[1]], axis=1)          # goldens concatenate x4 blocks, then .view(np.float32)
        assert both.dtype == npd and both.view(store).shape == (3, 2 * w.shape[2])
        np.testing.assert_array_equal(ndt.static_cast(both, np.float32), np.concatenate([vals, vals], axis=1))
    assert str(np.dtype([("a", "<f4")])) == "[('a', '<f4')]" and str(np.dtype(ml_dtypes.bfloat16)) == "bfloat16"
    with pytest.raises(TypeError, match="is not a conversion between packed formats"):
        ndt.static_cast(np.zeros(2, "float8_e5m2_x4"), ndt.float8_e4m3fn_x4)


def test_x4_numpy_dtype_reaches_a_kernel_as_the_packed_format(monkeypatch):
    """A kernel given an array of the stand-in's x4 dtype sees an MX tensor holding those bits."""
    import trnsim.kernels.language as nl
    from trnsim.kernels.jit import jit
    from trnsim.memory.dtypes import dtype_of, unpack_x4
    vals = np.array([[0.5, -1.0, 2.0, 448.0, 0.0, 1.5, -2.5, 3.0]] * 4, dtype=np.float32)
    x = ndt.static_cast(vals, ndt.float8_e4m3fn_x4)
    seen = {}

    @jit
    def k(a):
        seen["dtype"] = a.dtype
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out

    got = k(x)
    # with the format's NumPy dtype registered (the stand-in, as AWS's neuron_dtypes), the output has that dtype
    assert seen["dtype"] == "float8_e4m3fn_x4" and got.dtype == ndt.float8_e4m3fn_x4
    np.testing.assert_array_equal(ndt.static_cast(got, np.float32), vals)
    with pytest.raises(TypeError):
        got.astype(np.float32)                   # so the snapshot's validator unpacks it instead of casting bits
    monkeypatch.delitem(np.sctypeDict, "float8_e4m3fn_x4")
    bits = k(x)                                  # no such dtype registered: the packed integers
    assert bits.dtype == np.uint32
    np.testing.assert_array_equal(unpack_x4(dtype_of("float8_e4m3fn_x4"), bits).reshape(4, 8), vals)
    with pytest.raises(TypeError, match="is 2 bytes"):
        dtype_of(np.dtype((type("float8_e4m3fn_x4", (np.void,), {}), 2)))


def test_standin_allpairs_covers_every_allowed_pair():
    params = [[1, 2, 3], ["a", "b"], [True, False], [0.5, 1.5]]

    def ok(row):                      # called with partial rows, as allpairspy does
        return not (len(row) > 1 and row[0] == 3 and row[1] == "b")
    rows = list(pairs.AllPairs(params, filter_func=ok))
    assert all(ok(r) for r in rows)
    covered = {(i, r[i], j, r[j]) for r in rows for i, j in itertools.combinations(range(4), 2)}
    for i, j in itertools.combinations(range(4), 2):
        for a in params[i]:
            for b in params[j]:
                if ok([a, b]) if (i, j) == (0, 1) else True:
                    assert (i, a, j, b) in covered, (i, a, j, b)
    assert len(rows) < 3 * 2 * 2 * 2                  # fewer than the full product


@pytest.mark.slow        # ~15 s quiet (one test of nki-library: its harness imports torch), more under load
@pytest.mark.skipif(not os.path.isfile(os.path.join(SNAPSHOT, "test", "conftest.py")),
                    reason="AWS nki-library snapshot not present (set NKI_LIBRARY_PATH)")
@pytest.mark.skipif(bool(runner.missing_harness_requirements()),
                    reason="nki-library's harness needs boto3, botocore, attrs and scipy (pip install boto3 attrs scipy)")
def test_a_slice_of_nki_library_passes_through_the_runner(tmp_path):
    out = tmp_path / "nki-library"
    code = runner.main(["--snapshot", SNAPSHOT, "--limit", "1", "--out", str(out), "--snapshot-commit", "test",
                        "test/integration/nkilib/core/cumsum"])
    assert code == 0
    rep = json.loads(out.with_suffix(".json").read_text())
    s = rep["summary"]
    assert s["tests"] == 1 and s["runnable"] + s["negative"] + s["skipped"] == 1
    assert s["runnable"] >= 1 and s["passed"] == s["runnable"] and s["mismatches"] == 0, s["causes"]
    assert "core/cumsum" in s["families"]
    assert "commit `test`" in out.with_suffix(".md").read_text()


def test_report_from_recorded_results(tmp_path):
    snap = fake_snapshot(tmp_path)
    res = results_file(tmp_path, rec("cumsum", 0, "passed"),
                       rec("cumsum", 1, "failed", chain=["InferenceException", "NotImplementedError"],
                           type="NotImplementedError", message="nki.isa.rng is not supported by trnsim yet",
                           trnsim_frame="kernels/stubs.py:13 fn"))
    out = tmp_path / "rep"
    assert runner.main(["--snapshot", str(snap), "--results", str(res), "--out", str(out),
                        "--snapshot-commit", "c0ffee1"]) == 0
    rep = json.loads(out.with_suffix(".json").read_text())
    assert rep["summary"]["runnable"] == 2 and rep["summary"]["passed"] == 1
    md = out.with_suffix(".md").read_text()
    assert "`c0ffee1`" in md and "nki.isa.rng is not supported" in md and "50.0%" in md
    assert runner.main(["--snapshot", str(snap), "--results", str(tmp_path / "none"), "--out", str(out)]) == 2


def test_records_file_carries_a_run_to_another_machine(tmp_path):
    """--records writes every record gzip-compressed with the machine's paths replaced; --results (and --resume)
    read it back, so a committed records file lets a later run on a fresh machine count or go on from it."""
    import gzip
    snap = fake_snapshot(tmp_path)
    res = results_file(tmp_path, rec("cumsum", 0, "passed"),
                       rec("cumsum", 1, "failed", chain=["InferenceException", "ValueError"], type="ValueError",
                           message=f"bad shape in {snap}/src/k.py:3"))
    gz = tmp_path / "saved" / "records.jsonl.gz"
    assert runner.main(["--snapshot", str(snap), "--results", str(res), "--records", str(gz),
                        "--out", str(tmp_path / "a"), "--snapshot-commit", "c0ffee1"]) == 0
    saved = [json.loads(ln) for ln in gzip.decompress(gz.read_bytes()).decode().splitlines()]
    assert [r["outcome"] for r in saved] == ["passed", "failed"]
    assert saved[1]["message"] == "bad shape in <snapshot>/src/k.py:3"
    assert str(tmp_path) not in gzip.decompress(gz.read_bytes()).decode()
    assert json.loads((tmp_path / "a.json").read_text())["records"] == "<outside>/records.jsonl.gz"
    assert runner.main(["--snapshot", str(snap), "--results", str(gz), "--out", str(tmp_path / "b"),
                        "--snapshot-commit", "c0ffee1"]) == 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text())["summary"] for n in "ab")
    assert (a["runnable"], a["passed"]) == (b["runnable"], b["passed"]) == (2, 1)
    first = gz.read_bytes()
    assert runner.main(["--snapshot", str(snap), "--results", str(gz), "--records", str(gz),
                        "--out", str(tmp_path / "c"), "--snapshot-commit", "c0ffee1"]) == 0
    assert gz.read_bytes() == first            # the same records, the same bytes


def test_plugin_sampling_offset_and_resume(tmp_path):
    """Every N-th test from an offset (disjoint samples for different offsets), and the tests an earlier run
    recorded (the runner's --resume) left out."""
    sampling = load_file("nkilib_sampling_t", REPO / "tests" / "support" / "nki_library" / "nkilib_sampling.py")
    ids = [f"t{i:02d}" for i in reversed(range(12))]

    def pick(**env):
        return sorted(ids[i] for i in sampling.keep(ids, *sampling.from_env(env)))

    assert pick(TRNSIM_NKILIB_EVERY="4") == ["t00", "t04", "t08"]
    assert pick(TRNSIM_NKILIB_EVERY="4", TRNSIM_NKILIB_OFFSET="2") == ["t02", "t06", "t10"]
    assert pick(TRNSIM_NKILIB_EVERY="4", TRNSIM_NKILIB_OFFSET="1", TRNSIM_NKILIB_LIMIT="2") == ["t01", "t05"]
    done = tmp_path / "done.txt"
    done.write_text("t02\nt10\n")
    assert pick(TRNSIM_NKILIB_EVERY="4", TRNSIM_NKILIB_OFFSET="2", TRNSIM_NKILIB_DONE=str(done)) == ["t06"]
    assert pick(TRNSIM_NKILIB_DONE=str(done)) == [f"t{i:02d}" for i in range(12) if i not in (2, 10)]
    only = tmp_path / "only.txt"                # the runner's --retry-memory: just the tests it names
    only.write_text("t06\nt07\nt10\n")
    assert pick(TRNSIM_NKILIB_ONLY=str(only)) == ["t06", "t07", "t10"]
    assert pick(TRNSIM_NKILIB_EVERY="4", TRNSIM_NKILIB_OFFSET="2", TRNSIM_NKILIB_ONLY=str(only)) == ["t06", "t10"]
    assert pick(TRNSIM_NKILIB_ONLY=str(only), TRNSIM_NKILIB_DONE=str(done)) == ["t06", "t07"]


def test_max_memory_must_not_be_negative(tmp_path, capsys):
    snap = fake_snapshot(tmp_path)
    assert runner.main(["--snapshot", str(snap), "--max-memory", "-1", "--out", str(tmp_path / "r")]) == 2
    assert "--max-memory" in capsys.readouterr().err


def test_runner_refuses_a_test_path_the_snapshot_does_not_have(tmp_path, capsys):
    snap = tmp_path / "snap"
    (snap / "test" / "integration" / "nkilib" / "core").mkdir(parents=True)
    (snap / "test" / "conftest.py").write_text("")
    argv = ["--snapshot", str(snap), "--out", str(tmp_path / "r")]
    assert runner.main(argv + ["test/integration/nkilib/core", "test/integration/core/topk"]) == 2
    err = capsys.readouterr().err
    assert "test/integration/core/topk" in err and "no such test path" in err
    assert "nkilib/core," not in err          # the path that exists is not named
    assert not (tmp_path / "r.md").exists()


def test_report_command_shows_no_machine_paths(tmp_path):
    snap = fake_snapshot(tmp_path)
    res = tmp_path / "results.jsonl"
    res.write_text(json.dumps(rec("cumsum", 0, "passed")) + "\n")
    out = tmp_path / "rep"
    assert runner.main(["--snapshot", str(snap), "--results", str(res), "--out", str(out)]) == 0
    rep = json.loads(out.with_suffix(".json").read_text())
    assert str(tmp_path) not in rep["command"] and str(tmp_path) not in out.with_suffix(".md").read_text()
    assert "--results <outside>/results.jsonl" in rep["command"] and "--out <outside>/rep" in rep["command"]
    assert runner._shown(os.path.join(runner.REPO, "conformance", "x")) == os.path.join("conformance", "x")


def test_a_module_that_does_not_parse_is_named_with_its_line(tmp_path):
    """A test file that imports a module with a syntax error (as nki-library@d2ad3a5's own core/mlp/mlp.py has: a
    docstring pasted twice): the record names that module and line, not only the error."""
    import subprocess
    snap = tmp_path / "snap"
    (snap / "src" / "pkg").mkdir(parents=True)
    (snap / "src" / "pkg" / "__init__.py").write_text("")
    (snap / "src" / "pkg" / "broken.py").write_text('def f():\n    """doc"""\n        more\n')
    (snap / "test").mkdir()
    (snap / "test" / "test_a.py").write_text("import pkg.broken\n\ndef test_x():\n    pass\n")
    results = tmp_path / "results.jsonl"
    support = REPO / "tests" / "support" / "nki_library"
    env = dict(os.environ, TRNSIM_NKILIB_RESULTS=str(results),
               PYTHONPATH=os.pathsep.join([str(support), str(snap / "src"), str(REPO)]))
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "trnsim_nkilib_plugin", "-p", "no:cacheprovider",
                        "--continue-on-collection-errors", str(snap / "test")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    recs = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
    assert [x["when"] for x in recs] == ["collect"], r.stdout[-2000:] + r.stderr[-2000:]
    assert recs[0]["message"].startswith("IndentationError")
    assert recs[0]["message"].endswith("(src/pkg/broken.py:3)")


def test_the_compilers_host_static_cast_is_stood_in(tmp_path):
    """nki-library's MX tests of test_qkv_cte.py import ``static_cast`` from the Neuron compiler's (non-public)
    ``neuronxcc.starfish.support.dtype``; under the plugin it is the Neuron dtype stand-in's host cast, so those
    tests make their inputs: fp32 to fp8 rounds to nearest even (against ml_dtypes), and fp8 packed four to an x4
    element unpacks to the same values."""
    import subprocess
    snap = tmp_path / "snap"
    (snap / "test").mkdir(parents=True)
    (snap / "test" / "test_cast.py").write_text(textwrap.dedent("""
        import ml_dtypes
        import numpy as np
        import nki.language as nl

        def test_cast():
            from neuronxcc.starfish.support.dtype import static_cast
            import neuron_dtypes
            assert static_cast is neuron_dtypes.static_cast
            x = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
            f8 = static_cast(x, nl.float8_e4m3fn)
            assert np.array_equal(f8.astype(np.float32), x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
            packed = static_cast(f8, nl.float8_e4m3fn_x4)
            assert packed.shape == (8, 4)
            back = static_cast(packed, nl.float8_e4m3fn)
            assert np.array_equal(back.astype(np.float32), f8.astype(np.float32))
    """))
    results = tmp_path / "results.jsonl"
    support = REPO / "tests" / "support" / "nki_library"
    env = dict(os.environ, TRNSIM_NKILIB_RESULTS=str(results),
               PYTHONPATH=os.pathsep.join([str(support), str(STANDINS), str(REPO)]))
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "trnsim_nkilib_plugin", "-p", "no:cacheprovider",
                        str(snap / "test")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    recs = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
    assert [x["outcome"] for x in recs if x["when"] == "call"] == ["passed"], r.stdout[-3000:] + r.stderr[-2000:]


def test_a_snapshot_kernel_defect_is_excused_only_at_its_own_line():
    """nki-library@d2ad3a5's qkv_cte.py calls the module ``stream_shuffle_broadcast`` (its package __init__ defines
    nothing) at lines 676, 683, 1917 and 1924: counted outside the simulator.  The same message raised anywhere else
    still counts."""
    rec = {"nodeid": "t", "when": "call", "outcome": "failed", "type": "TypeError",
           "message": "'module' object is not callable", "chain": ["InferenceException", "TypeError"],
           "trnsim_frame": "kernels/launch.py:58 body", "kernel_frame": "nkilib/core/qkv/qkv_cte.py:1917 _qkv_cte_mx_impl"}
    assert "calls a module" in runner.not_simulated(rec)
    assert "calls a module" in runner.not_simulated(dict(rec, kernel_frame="nkilib/core/qkv/qkv_cte.py:1924 _qkv_cte_mx_impl"))
    assert runner.not_simulated(dict(rec, kernel_frame="nkilib/core/qkv/qkv_cte.py:1918 _qkv_cte_mx_impl")) is None
    assert runner.not_simulated(dict(rec, kernel_frame=None)) is None
    assert runner.not_simulated(dict(rec, message="'module' object is not callable (other)")) is None


def test_a_kernel_reading_the_dtype_of_an_absent_bias_is_a_snapshot_defect():
    """nki-library@d2ad3a5's gate_up_projection_mx_shard_H.py reads ``gate_up_bias.dtype`` at line 325 also when the
    test gives no bias: counted outside the simulator at that line only."""
    rec = {"nodeid": "t", "when": "call", "outcome": "failed", "type": "AttributeError",
           "message": "'NoneType' object has no attribute 'dtype'", "chain": ["InferenceException", "AttributeError"],
           "trnsim_frame": "kernels/jit.py:189 run_kernel",
           "kernel_frame": "nkilib/core/mlp/mlp_tkg/gate_up_projection_mx_shard_H.py:325 "
                           "process_fused_gate_up_projection_mxfp4"}
    assert "no bias" in runner.not_simulated(rec)
    assert runner.not_simulated(dict(rec, kernel_frame="nkilib/core/mlp/mlp_tkg/gate_up_projection_mx_shard_H.py:326 "
                                                       "process_fused_gate_up_projection_mxfp4")) is None
    assert runner.not_simulated(dict(rec, message="'NoneType' object has no attribute 'shape'")) is None


def test_snapshot_call_defect_counted_outside():
    """test_qkv_cte_mx_bf16_static_dequant passes qkv_cte's `is_input_swizzled` to the top-level `qkv` kernel, which
    has no such parameter: the TypeError at the kernel's call is counted outside the simulator, for that test file
    and message only, and only when no kernel line raised it."""
    rec = {"nodeid": "integration/nkilib/core/qkv/test_qkv_cte.py::TestQkvCteKernel::test_qkv_cte_mx_bf16_static_"
                     "dequant[1-128-512]", "when": "call", "outcome": "failed", "type": "TypeError",
           "message": "qkv() got an unexpected keyword argument 'is_input_swizzled'",
           "chain": ["InferenceException", "TypeError"], "trnsim_frame": "kernels/launch.py:58 body",
           "kernel_frame": None}
    assert "is_input_swizzled" in runner.not_simulated(rec)
    assert runner.not_simulated(dict(rec, nodeid="integration/nkilib/core/qkv/test_qkv_tkg.py::t")) is None
    assert runner.not_simulated(dict(rec, kernel_frame="nkilib/core/qkv/qkv.py:120 qkv")) is None
    assert runner.not_simulated(dict(rec, message="qkv() got an unexpected keyword argument 'other'")) is None
