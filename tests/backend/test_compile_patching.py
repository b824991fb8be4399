"""Dynamo sees ``neuron`` tensors the same way whatever ran first in the process (issue 28): the device's dynamo
patches follow dynamo's import, so ``torch._dynamo.explain`` in a fresh process reports what it reports after a
``torch.compile(backend="neuron")``; registering the device still imports no dynamo."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

_EXPLAIN = r"""
import json, sys, torch, torch.nn as nn

class Breaks(nn.Module):          # one graph break of its own: dynamo must report exactly that one
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)
    def forward(self, x):
        h = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(h)

torch.manual_seed(0)
mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("neuron")
brk = Breaks().to("neuron")
x = torch.randn(2, 8, device="neuron")
out = {"dynamo_at_start": "torch._dynamo" in sys.modules}
if sys.argv[1] == "compile_first":
    torch.compile(lambda t: mlp(t).sum(), backend="neuron")(x)
    torch._dynamo.reset()
out["mlp"] = torch._dynamo.explain(lambda t: mlp(t).sum())(x).graph_break_count
out["breaks"] = torch._dynamo.explain(brk)(x).graph_break_count
print("RESULT", json.dumps(out))
"""


def _run(order):
    env = dict(os.environ, TORCHNEURON_TARGET="sim", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", _EXPLAIN, order], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


def test_explain_in_a_fresh_process_equals_explain_after_compiling():
    fresh, after = _run("explain_first"), _run("compile_first")
    assert not fresh["dynamo_at_start"]          # registration (import torch) did not import dynamo
    assert fresh == after
    assert fresh["mlp"] == 0 and fresh["breaks"] == 1
