"""The bounded slice of the model sweep CI runs: a plain decoder (llama), one with tied embeddings (gpt2) and a
mixture-of-experts model (qwen3_moe: top-k routing, integer histc, grouped matmul), through the same runner as the
full sweep (``trnsim conformance --suite models``).  Fails on any error, any fallback, and any mismatch except the
one known cause: while ``Module.to`` unties tied parameters (fixed by the Module.to work of issue 12), the tied
model must show exactly that -- a gradient difference on the tied pair -- and nothing else."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

SLICE = ("llama", "gpt2", "qwen3_moe")


def _to_keeps_ties():
    code = ("import torch; e = torch.nn.Embedding(4, 2); h = torch.nn.Linear(2, 4, bias=False); h.weight = e.weight;"
            " m = torch.nn.ModuleDict(dict(e=e, h=h)).to('neuron'); print(m.e.weight is m.h.weight)")
    p = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TORCHNEURON_TARGET="sim"),
                       capture_output=True, text=True, timeout=300)
    return p.stdout.strip().endswith("True")


def test_models_slice(tmp_path):
    env = dict(os.environ, TORCHNEURON_TARGET="sim")
    out = tmp_path / "models"
    p = subprocess.run([sys.executable, "-m", "conformance", "--suite", "models", "--models", ",".join(SLICE),
                        "-j", "2", "--out", str(out), "--no-fail"], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = {r["name"]: r for r in json.loads((out / "models.json").read_text())["records"]}
    assert set(recs) == set(SLICE)
    assert recs["gpt2"]["tied"] and not recs["llama"]["tied"]
    for name, r in recs.items():
        assert r["status"] != "error" and r["status"] != "build-error", (name, r["detail"])
        assert not r["fallbacks"], (name, r["fallbacks"])          # every op of these models is native
        assert r["ops"].get("native", 0) > 100 and r["sim_us"] > 0     # it really ran on the device
    assert recs["llama"]["status"] == "pass", recs["llama"]["detail"]
    assert recs["qwen3_moe"]["status"] == "pass", recs["qwen3_moe"]["detail"]
    if _to_keeps_ties():
        assert recs["gpt2"]["status"] == "pass", recs["gpt2"]["detail"]
    else:       # the known cause, and only it: the untied lm_head / embedding pair differs
        assert recs["gpt2"]["status"] == "mismatch"
        assert "lm_head.weight" in recs["gpt2"]["detail"] or "wte.weight" in recs["gpt2"]["detail"]
        assert "known cause: Module.to('neuron') unties" in (out / "models.md").read_text()
    assert "architectures run unchanged" in p.stdout
