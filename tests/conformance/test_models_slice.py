"""The bounded slice of the model sweep CI runs, through the same CLI and runner as the full sweep
(``trnsim conformance --suite models``): one model with tied embeddings (gpt2: ``Module.to`` must keep the tie) and one
mixture-of-experts model (qwen3_moe: top-k routing, integer histc, grouped matmul), in one worker process.  Fails on
any error, any fallback and any mismatch.

More architectures (a plain decoder, the gemma models whose only difference is torch's SDPA backend choice, other MoE
routers) run only when ``TRNSIM_MODELS_SLICE_FULL=1`` (each architecture costs seconds, and the worker's import of
transformers more); the whole sweep is ``trnsim conformance --suite models``."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

SLICE = ("gpt2", "qwen3_moe")
FULL = ("llama", "gpt2", "qwen3_moe", "mixtral", "olmoe", "deepseek_v3", "gemma3n_text", "gemma4_text", "bert",
        "mamba")
SDPA_ONLY = ("gemma3n_text", "gemma4_text")      # differ from CPU flash SDPA, equal to CPU math SDPA


def _sweep(tmp_path, names, jobs):
    out = tmp_path / "models"
    p = subprocess.run([sys.executable, "-m", "conformance", "--suite", "models", "--models", ",".join(names),
                        "-j", str(jobs), "--out", str(out), "--no-fail"],
                       env=dict(os.environ, TORCHNEURON_TARGET="sim"), capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "architectures run unchanged" in p.stdout
    recs = {r["name"]: r for r in json.loads((out / "models.json").read_text())["records"]}
    assert set(recs) == set(names)
    return recs, (out / "models.md").read_text()


def _ran_on_device(name, r):
    assert r["status"] not in ("error", "build-error"), (name, r["detail"])
    assert not r["fallbacks"], (name, r["fallbacks"])          # every op of these models is native
    assert r["ops"].get("native", 0) > 100 and r["sim_us"] > 0     # it really ran on the device


def test_models_slice(tmp_path):
    recs, _ = _sweep(tmp_path, SLICE, 1)
    assert recs["gpt2"]["tied"] and not recs["qwen3_moe"]["tied"]
    for name, r in recs.items():
        _ran_on_device(name, r)
        assert r["status"] == "pass", (name, r["detail"])       # ties kept, MoE routing native


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TRNSIM_MODELS_SLICE_FULL") != "1",
                    reason="a longer slice of the model sweep: set TRNSIM_MODELS_SLICE_FULL=1")
def test_models_slice_full(tmp_path):
    recs, md = _sweep(tmp_path, FULL, 2)
    for name, r in recs.items():
        _ran_on_device(name, r)
        if name in SDPA_ONLY and r["status"] == "mismatch":
            assert r.get("matches_cpu_math_sdpa") is True, (name, r["detail"])
            assert "known cause: scaled_dot_product_attention" in md
        else:
            assert r["status"] == "pass", (name, r["detail"])
