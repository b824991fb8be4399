"""NKI kernels recorded by nki.simulate / trnsim.profile and by rec.kernel, compared; replays on the simulator."""

import importlib
import json

import ml_dtypes
import numpy as np
import pytest
import torch

import trnsim
import trnsim.difftest as dt
from trnsim.cli import main as trnsim_main


@pytest.fixture
def kernels(nki):
    return importlib.import_module("difftest_kernels")


def _inputs():
    rng = np.random.default_rng(0)
    at = rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 32)).astype(ml_dtypes.bfloat16)
    return at, b


def test_simulated_kernel_matches_a_reference_recording(tmp_path, kernels):
    import difftest_reference as ref
    at, b = _inputs()
    with dt.record_kernels(tmp_path / "sim", name="mm"):
        out = trnsim.simulate(kernels.matmul_k)(at, b)          # recorded by the launch observer
    man = json.load(open(tmp_path / "sim" / "mm" / "rank0" / "manifest.json"))
    assert man["device_kind"] == "neuron-sim"
    keys = [e["key"] for e in man["entries"]]
    assert keys == ["kernel/matmul_k#0/in.at", "kernel/matmul_k#0/in.b", "kernel/matmul_k#0/out"]
    assert man["entries"][0]["dtype"] == "bfloat16"
    assert man["kernel_calls"][0]["fn"] == "difftest_kernels:matmul_k"
    rec_out = dt.load_bundle(tmp_path / "sim" / "mm" / "rank0").tensor("kernel/matmul_k#0/out")
    assert np.array_equal(rec_out.numpy(), out)
    # the "hardware" recording: the same API wrapping any callable (the real nki.jit kernel on a Trainium)
    with dt.record_kernels(tmp_path / "hw", name="mm") as rec:
        rec.kernel(ref.matmul_k, at, b)
    cmp = dt.compare(tmp_path / "hw", tmp_path / "sim")
    assert cmp.ok, dt.text_summary(cmp)
    assert any(r.status == "within tolerance" for r in cmp.results)   # fp32 PSUM sums vs float64: not identical
    with dt.record_kernels(tmp_path / "hw_bad", name="mm") as rec:
        rec.kernel(ref.matmul_k_wrong, at, b)
    cmp = dt.compare(tmp_path / "hw_bad", tmp_path / "sim")
    f = cmp.first
    assert f.where() == "output of NKI kernel matmul_k" and f.n_bad == 1 and f.worst[0]["index"] == (3, 5)


def test_profile_launches_are_recorded_and_replayed(tmp_path, kernels, capsys):
    at, b = _inputs()
    with dt.record_kernels(tmp_path, name="prof"):
        prof = trnsim.profile(kernels.matmul_k)(at, b)
    assert prof.total_ns > 0
    bundle = tmp_path / "prof" / "rank0"
    cmp = dt.replay_kernel(bundle)                               # kernel found by its recorded import path
    assert cmp.ok and [r.status for r in cmp.results] == ["equal"] * 3
    assert trnsim_main(["replay", str(bundle), "--kernel", "-q"]) == 0
    assert capsys.readouterr().out.startswith("EQUAL")


def test_replay_a_recorded_function_on_the_simulated_device(tmp_path, neuron, capsys):
    import difftest_models as m
    g = torch.Generator().manual_seed(3)
    x, w, bias = torch.randn(4, 16, generator=g), torch.randn(8, 16, generator=g), torch.randn(8, generator=g)
    with dt.record(tmp_path / "cpu", name="lin", ops=True) as rec:
        rec.call(m.linear_gelu, x, w, b=bias)
    bundle = tmp_path / "cpu" / "lin" / "rank0"
    man = json.load(open(bundle / "manifest.json"))
    assert man["calls"][0]["fn"] == "difftest_models:linear_gelu"
    cmp = dt.replay(bundle, out=tmp_path / "replay")            # on neuron, the simulated device
    assert cmp.ok, dt.text_summary(cmp)
    rman = json.load(open(tmp_path / "replay" / "lin" / "rank0" / "manifest.json"))
    assert rman["device_kind"] == "neuron-sim"
    assert {r.key for r in cmp.results} >= {"input/arg0", "input/b", "output/out"}
    bad = dt.replay(bundle, "difftest_models:linear_gelu_wrong")
    assert not bad.ok and bad.first.kind == "op" and bad.first.op == "aten.add.Tensor"
    assert trnsim_main(["replay", str(bundle), "--fn", "difftest_models:linear_gelu_wrong", "-q"]) == 1
    assert trnsim_main(["replay", str(bundle), "--fn", "no_such_module:f", "-q"]) == 2
    capsys.readouterr()
