"""neuronx-cc's auto-cast of fp32 matmuls in compiled graphs (issue 30): by default ("--auto-cast none" since
Neuron 2.27) fp32 products stay fp32; with ``NEURON_CC_FLAGS="--auto-cast matmult"`` (--auto-cast-type bf16 by
default) an fp32 product's operands are cast to bf16 by the loading DMAs, multiplied at the bf16 Tensor Engine rate
and accumulated in fp32.  One rule
(``costs.auto_cast_matmul_cost``) prices the compiled kernels and the estimator's fp32 runs."""

import numpy as np
import pytest
import torch

from trnsim.backend import costs
from trnsim.backend.device_state import STATE
from trnsim.kernels.library import fused


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_flags_parsed_with_the_documented_default():
    assert costs.compiler_auto_cast("") is None                                # none (Neuron >= 2.27)
    assert costs.compiler_auto_cast("--auto-cast none") is None
    assert costs.compiler_auto_cast("--auto-cast matmult") == "bfloat16"       # --auto-cast-type's default
    assert costs.compiler_auto_cast("-O1 --auto-cast=matmult --auto-cast-type fp16") == "float16"
    assert costs.compiler_auto_cast("--retry_failed_compilation") is None
    assert costs.compiler_auto_cast("--auto-cast matmult --auto-cast none") is None   # the right-most wins
    with pytest.raises(ValueError, match="--auto-cast 'all'.*models none, matmult"):
        costs.compiler_auto_cast("--auto-cast all")
    with pytest.raises(ValueError, match="--auto-cast-type 'tf32'.*models bf16, fp16"):
        costs.compiler_auto_cast("--auto-cast-type tf32")


@pytest.mark.parametrize("m,k,n", [(256, 512, 384), (2048, 1024, 4096)])
def test_auto_cast_kernel_reads_fp32_and_multiplies_at_the_bf16_rate(m, k, n):
    """The auto-cast kernel moves the fp32 kernel's bytes (fp32 operands in, fp32 product out) and costs less than
    it (bf16 passes of the Tensor Engine instead of 4x), more than the bf16 kernel (half the bytes read)."""
    tg = STATE.target
    f32 = costs.matmul_cost(tg, m, k, n, "float32")
    b16 = costs.matmul_cost(tg, m, k, n, "bfloat16")
    ac = costs.matmul_cost(tg, m, k, n, "float32", operand_dtype="bfloat16")
    assert costs.auto_cast_matmul_cost(tg, m, k, n, "float32") == f32               # the default: none
    assert costs.auto_cast_matmul_cost(tg, m, k, n, "float32", operand_dtype="bfloat16") == ac
    assert b16[0] < ac[0] < f32[0]
    assert ac[1] == f32[1] == 2.0 * m * k * n
    if m * k * n < 1e8:          # simulated whole (not extrapolated from blocks): the bytes are the kernel's
        assert ac[2] == f32[2]
    assert costs.auto_cast_matmul_cost(tg, m, k, n, "bfloat16") == b16      # not fp32: as it is


def _compiled_mm_kernel(graphs, flags, monkeypatch, m=256, k=512, n=384):
    if flags is not None:
        monkeypatch.setenv("NEURON_CC_FLAGS", flags)
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    out = torch.compile(lambda x, y: x @ y, backend="neuron", fullgraph=True)(a.to("neuron"), b.to("neuron"))
    ks = [kk for gr in graphs for kk in gr.plan["kernels"] if kk["kind"] == "matmul"]
    assert len(ks) == 1
    return a, b, out.cpu(), ks[0], graphs[-1]


def _price(m, k, n, odt):
    """The formula costing.py claims: the lesser of the device's matmul kernel (the auto-cast rule) and the
    fused resident kernel (no epilogue here), both with the operands held in ``odt``."""
    tg = STATE.target
    P = tg.pmax
    mp, kp = max(P, -(-m // P) * P), max(P, -(-k // P) * P)
    unfused = costs.matmul_cost(tg, m, k, n, "float32", operand_dtype=odt)[0]
    e = np.empty
    fz = costs._sim(fused.matmul_epilogue, [e((kp, mp), np.float32), e((kp, n), np.float32)],
                    dict(n_small=0, steps=(), n_out=1, **({"operand_dtype": odt} if odt != "float32" else {})), tg)[0]
    return min(unfused, fz)


def test_compiled_fp32_matmul_priced_and_computed_as_bf16_operands(graphs, monkeypatch):
    a, b, out, k, gr = _compiled_mm_kernel(graphs, "--auto-cast matmult", monkeypatch)
    assert k["ns"] == pytest.approx(_price(256, 512, 384, "bfloat16"))
    assert k["ns"] < _price(256, 512, 384, "float32")
    assert gr.plan["operand_casts"] and set(gr.plan["operand_casts"].values()) == {"bfloat16"}
    # numerics: bf16 operands, fp32 accumulation: near the float64 product of the rounded operands, and off the
    # exact product by about bf16's rounding
    rounded = a.to(torch.bfloat16).double() @ b.to(torch.bfloat16).double()
    exact = a.double() @ b.double()
    scale = exact.abs().max()
    assert torch.allclose(out.double(), rounded, rtol=1e-5, atol=1e-5 * scale)
    assert not torch.allclose(out.double(), exact, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("flags", [None, "--auto-cast none"])
def test_auto_cast_none_keeps_fp32(graphs, monkeypatch, flags):
    a, b, out, k, gr = _compiled_mm_kernel(graphs, flags, monkeypatch)
    assert k["ns"] == pytest.approx(_price(256, 512, 384, "float32"))
    assert gr.plan["operand_casts"] == {}
    exact = a.double() @ b.double()
    assert torch.allclose(out.double(), exact, rtol=1e-5, atol=1e-5 * exact.abs().max())


def test_bf16_matmuls_are_not_affected(graphs, monkeypatch):
    g = torch.Generator().manual_seed(4)
    a, b = (torch.randn(128, 256, generator=g).bfloat16(), torch.randn(256, 128, generator=g).bfloat16())
    torch.compile(lambda x, y: x @ y, backend="neuron", fullgraph=True)(a.to("neuron"), b.to("neuron"))
    assert graphs[-1].plan["operand_casts"] == {}
