"""The OpInfo sweep's classification and its resumable runner."""

import json
import os

from conformance import ops_sweep, runner


def test_random_and_unsupported_groups_are_skipped_with_reasons():
    (bern,) = [o for o in ops_sweep.list_ops("bernoulli") if ops_sweep.op_key(o) == "bernoulli"]
    recs = ops_sweep.run_op(bern, dtypes=("float32",), modes=("forward",), device="cpu")
    assert recs[0]["status"] == "skip" and "random" in recs[0]["detail"]
    (gelu,) = ops_sweep.list_ops("nn.functional.gelu")
    recs = ops_sweep.run_op(gelu, dtypes=("bool",), modes=("forward",), device="cpu")
    assert recs[0]["status"] == "skip" and "does not list bool" in recs[0]["detail"]


def test_list_ops_patterns():
    keys = {ops_sweep.op_key(o) for o in ops_sweep.list_ops("softmax,linalg.norm")}
    assert keys == {"softmax", "linalg.norm"}
    assert len(ops_sweep.list_ops(None)) == 702


def test_run_resumes_from_records(tmp_path):
    """A finished op's records are read back, not recomputed (the planted record proves it)."""
    params = {"dtypes": ["float32"], "modes": ["forward"], "device": "neuron", "max_samples": 2, "timeout": 60.0}
    tag = runner._params_tag(params)
    planted = [{"suite": "ops", "name": "abs", "dtype": "float32", "mode": "forward", "status": "fallback",
                "counts": {"fallback": 7}, "samples": 7, "detail": "planted", "seconds": 0.0}]
    p = runner._record_path(str(tmp_path), "ops", "abs", tag)
    os.makedirs(os.path.dirname(p))
    with open(p, "w") as f:
        json.dump(planted, f)
    recs = runner.run("ops", ["float32"], "abs", str(tmp_path), jobs=1, modes=("forward",), max_samples=2,
                      progress=False)
    assert recs == planted


def _mul():
    (mul,) = [o for o in ops_sweep.list_ops("mul") if ops_sweep.op_key(o) == "mul"]
    return mul


def test_planted_wrong_native_kernel_is_reported_as_mismatch(monkeypatch):
    """A native op made wrong on purpose (a relative error of 2^-10, far outside fp32 tolerances) is caught."""
    from trnsim import backend
    from trnsim.backend import tensor as bt
    backend.register()
    good = ops_sweep.run_op(_mul(), dtypes=("float32",), modes=("forward",), max_samples=4)
    assert good[0]["status"] == "native", good

    orig = bt.dispatch

    def wrong(func, args, kwargs):
        out = orig(func, args, kwargs)
        if func._opname == "mul" and type(out) is bt.NeuronTensor and out.is_floating_point():
            out._p.mul_(1 + 2 ** -10)
        return out
    monkeypatch.setattr(bt, "dispatch", wrong)
    monkeypatch.setattr(bt, "FAST_PATH", False)       # elementwise ops skip dispatch() otherwise
    bad = ops_sweep.run_op(_mul(), dtypes=("float32",), modes=("forward", "backward"), max_samples=4)
    assert [r["status"] for r in bad] == ["mismatch", "mismatch"], bad
    assert "worst at" in bad[0]["detail"] and "got" in bad[0]["detail"]


def test_fallback_is_classified(monkeypatch):
    """An op the device does not implement is correct through the CPU fallback: `fallback`, not `native`."""
    from trnsim import backend
    from trnsim.backend import op_table, tensor
    backend.register()
    # every OpInfo op is native now (issue 12): take one out of the native table for this test
    monkeypatch.delitem(op_table.TABLE, "erfinv")
    monkeypatch.setattr(tensor, "_INFO", {})
    (erfinv,) = [o for o in ops_sweep.list_ops("erfinv") if ops_sweep.op_key(o) == "erfinv"]
    recs = ops_sweep.run_op(erfinv, dtypes=("float32",), modes=("forward",), max_samples=2)
    assert recs[0]["status"] == "fallback", recs
