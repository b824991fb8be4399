"""The bounded conformance slice CI runs on every submission: the ops a transformer's training step uses, on the
simulated device, through the same runner as the full sweep (worker processes, so a crash is isolated).  It fails
on any mismatch (and on any error in these ops: they are all in the native table)."""

import json
import os
import subprocess
import sys

SLICE = ("add,mul,sub,div.no_rounding_mode,matmul,mm,bmm,addmm,nn.functional.linear,nn.functional.gelu,"
         "nn.functional.relu,softmax,log_softmax,sum,mean,var,exp,rsqrt,tanh,sigmoid,cat,stack,transpose,reshape,"
         "index_select,gather,nn.functional.embedding,where,nn.functional.rms_norm,"
         "nn.functional.scaled_dot_product_attention,nn.functional.cross_entropy,as_strided")


def test_ci_slice_has_no_mismatch(tmp_path):
    env = dict(os.environ, TORCHNEURON_TARGET="sim")
    out = tmp_path / "conf"
    p = subprocess.run([sys.executable, "-m", "conformance", "--suite", "ops", "--ops", SLICE, "--dtypes",
                        "float32,bfloat16", "--max-samples", "3", "-j", "2", "--out", str(out)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = json.loads((out / "report.json").read_text())["records"]
    names = {r["name"] for r in recs}
    assert names == set(SLICE.split(","))
    sdpa = [r for r in recs if r["name"] == "nn.functional.scaled_dot_product_attention"]
    # its samples with dropout are skipped, the others compared: native in both dtypes and modes
    assert len(sdpa) == 4 and all(r["status"] == "native" and r["counts"]["native"] >= 1 for r in sdpa)
    bad = [(r["name"], r["dtype"], r["mode"], r["detail"]) for r in recs if r["status"] in ("mismatch", "error")]
    assert not bad, bad
    native = sum(r["counts"].get("native", 0) for r in recs)
    assert native >= 300                                   # the slice really ran on the device, natively
    assert "ops 32 x 2 dtypes" in p.stdout
