"""``pytest --trnsim-record DIR`` on CPU and on the simulated device, then ``trnsim compare``."""

import json
import os
import subprocess
import sys

import pytest

from trnsim.cli import main as trnsim_main

HERE = os.path.dirname(os.path.abspath(__file__))

INNER = '''
import torch
from difftest_models import tiny_lm


def test_lm_step(trnsim_record):
    dev = torch.get_default_device()            # cpu, or neuron under --neuron-default-device
    with torch.device("cpu"):
        m = tiny_lm()
        idx = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    m = m.to(dev)
    trnsim_record.input("idx", idx)
    out = m(idx.to(dev))
    out.pow(2).mean().backward()
    trnsim_record.output("logits", out)
    trnsim_record.state(m)


def test_no_recorder_needed():
    assert torch.ones(2).sum().item() == 2
'''


def _run(tmp_path, out, sim):
    env = dict(os.environ)
    env.pop("TORCHNEURON_TARGET", None)
    if sim:
        env["TORCHNEURON_TARGET"] = "sim"
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "test_inner.py",
            "--trnsim-record", str(out), "--trnsim-record-what", "ops"]
    if sim:
        args.append("--neuron-default-device")
    r = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "trnsim: recordings written under" in r.stdout
    return r


def test_record_option_writes_a_bundle_per_test(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    _run(tmp_path, tmp_path / "A", sim=False)
    ma = json.load(open(tmp_path / "A" / "test_inner.py_test_lm_step" / "rank0" / "manifest.json"))
    assert ma["device_kind"] == "cpu" and ma["nodeid"] == "test_inner.py::test_lm_step"
    kinds = {e["kind"] for e in ma["entries"]}
    assert {"input", "output", "module", "op"} <= kinds
    assert (tmp_path / "A" / "test_inner.py_test_no_recorder_needed" / "rank0" / "manifest.json").exists()


@pytest.mark.slow
def test_record_option_on_cpu_and_neuron_then_compare(tmp_path, capsys):
    (tmp_path / "test_inner.py").write_text(INNER)
    _run(tmp_path, tmp_path / "A", sim=False)
    _run(tmp_path, tmp_path / "B", sim=True)
    ma = json.load(open(tmp_path / "A" / "test_inner.py_test_lm_step" / "rank0" / "manifest.json"))
    mb = json.load(open(tmp_path / "B" / "test_inner.py_test_lm_step" / "rank0" / "manifest.json"))
    assert (ma["device_kind"], mb["device_kind"]) == ("cpu", "neuron-sim")
    assert ma["nodeid"] == mb["nodeid"] == "test_inner.py::test_lm_step"
    assert any(e["kind"] == "op" for e in mb["entries"]) and any(e["kind"] == "module" for e in mb["entries"])
    assert trnsim_main(["compare", str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    assert "EQUAL within tolerance" in capsys.readouterr().out
