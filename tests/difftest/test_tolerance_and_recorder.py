"""ULPs and tolerances against independent references; recorder limits and errors."""

import json

import ml_dtypes
import numpy as np
import pytest
import torch

import trnsim.difftest as dt
from trnsim.difftest.comparison import compare_tensors
from trnsim.difftest.tolerance import Tolerance, Tolerances, parse_spec, ulp


def _next_up(x, npdt, uint):
    """The next representable number above |x| in npdt (x representable), by incrementing its bit pattern."""
    a = np.abs(np.asarray(x, dtype=npdt))
    return (a.view(uint) + 1).view(npdt).astype(np.float64) - a.astype(np.float64)


@pytest.mark.parametrize("dtype,npdt,uint", [("float32", np.float32, np.uint32), ("float16", np.float16, np.uint16),
                                            ("bfloat16", ml_dtypes.bfloat16, np.uint16)])
def test_ulp_matches_the_bit_pattern_spacing(dtype, npdt, uint):
    vals = np.array([1.0, 1.5, 3.0, 1e-3, -7.25, 1000.0, 2.0 ** -20, 0.0], dtype=np.float64)
    vals = vals.astype(npdt).astype(np.float64)            # representable values
    ref = _next_up(vals.astype(npdt), npdt, uint)
    assert np.array_equal(ulp(vals, dtype), ref), (ulp(vals, dtype), ref)


def test_ulp_known_values():
    assert ulp(np.array([1.0]), "float32")[0] == 2.0 ** -23
    assert ulp(np.array([1.0]), "bfloat16")[0] == 2.0 ** -7
    assert ulp(np.array([1.0]), "float8_e4m3fn")[0] == 2.0 ** -3
    assert ulp(np.array([0.0]), "float32")[0] == 2.0 ** -149          # the smallest subnormal


def test_compare_tensors_counts_against_a_float64_recount():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000).astype(np.float32)
    b = a.copy()
    b[[3, 500, 999]] *= np.float32(1 + 1e-4)                     # beyond fp32's 1.3e-6 rtol
    b[[10, 11]] = np.nextafter(a[[10, 11]], np.float32(np.inf))   # one ULP: within
    tol = Tolerance(rtol=1.3e-6, atol=1e-5, ulps=8)
    n_bad, max_abs, max_rel, max_ulps, worst = compare_tensors(torch.from_numpy(a), torch.from_numpy(b), "float32",
                                                               tol, top=3)
    x, y = a.astype(np.float64), b.astype(np.float64)
    d = np.abs(x - y)
    allowed = np.maximum(1e-5 + 1.3e-6 * np.abs(x), 8 * ulp(x, "float32"))
    assert n_bad == int((d > allowed).sum())
    assert max_abs == d.max()
    assert {w["index"] for w in worst} <= {(3,), (500,), (999,)} and len(worst) == 3
    assert n_bad >= 1


def test_nan_inf_and_integers():
    a = torch.tensor([float("nan"), float("inf"), 1.0, -float("inf"), 2.0])
    assert compare_tensors(a, a.clone(), "float32", Tolerance())[0] == 0
    b = torch.tensor([1.0, float("inf"), 1.0, float("inf"), float("nan")])
    n_bad = compare_tensors(a, b, "float32", Tolerance(rtol=1.0, atol=1.0))[0]
    assert n_bad == 3                        # NaN vs 1, -inf vs inf, 2 vs NaN
    i = torch.tensor([1, 2, 3])
    assert compare_tensors(i, torch.tensor([1, 2, 4]), "int64", Tolerance())[0] == 1
    assert compare_tensors(i, torch.tensor([1, 2, 4]), "int64", Tolerance(atol=1))[0] == 0


def test_tensor_ulps_is_relative_to_the_tensors_largest_value():
    a = torch.tensor([1000.0, 1e-3])
    b = torch.tensor([1000.0, 1e-3 + 5e-5])                      # 5e-5: less than 1 ULP of 1000 in fp32 (6.1e-5)
    assert compare_tensors(a, b, "float32", Tolerance(tensor_ulps=1))[0] == 0
    assert compare_tensors(a, b, "float32", Tolerance(ulps=8))[0] == 1


def test_tolerance_specs_and_overrides():
    assert parse_spec("rtol:1e-3,ulps=4") == Tolerance(rtol=1e-3, ulps=4)
    for bad in ("rtol", "foo:1", "rtol:-1", "atol:nan", ""):
        with pytest.raises(ValueError):
            parse_spec(bad)
    t = Tolerances(dtype_overrides={"bfloat16": "rtol:0.1"}, path_overrides=[("op/*", "ulps:16"),
                                                                              ("op/backward/*", "atol:1")])
    assert t.for_entry("output/x", "bfloat16").rtol == 0.1
    assert t.for_entry("op/forward/a/b#0", "float32").ulps == 16
    bw = t.for_entry("op/backward/a/b#0", "float32")
    assert (bw.ulps, bw.atol, bw.rtol) == (16, 1, 1.3e-6)        # the later match adds to the earlier
    assert t.for_entry("output/i", "int64") == Tolerance()


def test_recording_limit_error_and_failed_tests(tmp_path):
    with pytest.raises(dt.RecordingError, match="over max_bytes=100"):
        with dt.record(tmp_path, name="big", max_bytes=100) as rec:
            rec.output("x", torch.zeros(1000))
    assert not (tmp_path / "big").exists()
    with pytest.raises(dt.RecordingError, match="recorded twice"):
        with dt.record(tmp_path, name="twice") as rec:
            rec.output("x", torch.zeros(2))
            rec.output("x", torch.zeros(2))
    with pytest.raises(ZeroDivisionError):
        with dt.record(tmp_path, name="fails") as rec:
            rec.output("x", torch.ones(2))
            1 / 0
    man = json.load(open(tmp_path / "fails" / "rank0" / "manifest.json"))
    assert man["error"].startswith("ZeroDivisionError") and len(man["entries"]) == 1
    with dt.record(tmp_path, name="fails") as rec:          # the same name again: replaced
        rec.output("y", torch.ones(2))
    with pytest.raises(dt.RecordingError, match="already holds the recording of 'fails'"):
        with dt.record(tmp_path, name="fails?") as rec:     # another name mapping to the same folder
            rec.output("y", torch.ones(2))


def test_dtypes_and_nested_values_round_trip(tmp_path):
    vals = {"f8": torch.tensor([0.5, -2.0]).to(torch.float8_e4m3fn), "c": torch.tensor([1 + 2j]),
            "np_bf16": np.array([1.5, 2.25], dtype=ml_dtypes.bfloat16), "b": torch.tensor([True, False]),
            "nested": ({"k": torch.ones(2, 2)}, [torch.zeros(1)])}
    for fmt in ("safetensors", "npz"):
        with dt.record(tmp_path / fmt, name="d", fmt=fmt) as rec:
            rec.outputs(**vals)
        b = dt.load_bundle(tmp_path / fmt / "d" / "rank0")
        keys = [e["key"] for e in b.entries]
        assert keys == ["output/f8", "output/c", "output/np_bf16", "output/b", "output/nested.0.k",
                        "output/nested.1.0"]
        assert torch.equal(b.tensor("output/f8").float(), torch.tensor([0.5, -2.0]))
        assert b.by_key["output/c"]["stored_as"] == "view_as_real"
        assert b.by_key["output/np_bf16"]["dtype"] == "bfloat16"
        assert torch.equal(b.tensor("output/np_bf16").float(), torch.tensor([1.5, 2.25]))
    assert dt.compare(tmp_path / "safetensors", tmp_path / "npz").ok
