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
