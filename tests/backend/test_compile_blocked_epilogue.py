"""A compiled product too large for the resident fused kernel (``library.fused.epilogue_fits`` fails) gets its
epilogue applied per block as the blocks leave PSUM (``library.matmul_blocked.blocked_matmul`` with ``steps``),
priced by that kernel's own simulation, and kept only when it beats the product followed by the epilogue as its
own pointwise kernel (issue 30)."""

import numpy as np
import pytest
import torch

from trnsim.backend import costs
from trnsim.backend.compile import costing
from trnsim.backend.device_state import STATE
from trnsim.kernels.library import fused, matmul_blocked


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "costs"))
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)     # the default: fp32 products stay fp32
    import torch._dynamo
    torch._dynamo.reset()
    costing.clear_memo()
    yield
    torch._dynamo.reset()


M, K, N = 1024, 2560, 1024


def test_blocked_epilogue_priced_by_its_simulation_and_no_slower_than_unfused(graphs):
    tg = STATE.target
    assert not fused.epilogue_fits(tg, M, K, N, 4, 1)       # fp32 operands: not resident
    g = torch.Generator().manual_seed(11)
    x, w = 0.02 * torch.randn(M, K, generator=g), torch.randn(K, N, generator=g)
    r = torch.randn(M, N, generator=g)
    out = torch.compile(lambda x, w, r: torch.exp(x @ w + r), backend="neuron", fullgraph=True)(
        x.to("neuron"), w.to("neuron"), r.to("neuron"))
    ref = np.exp(x.double().numpy() @ w.double().numpy() + r.double().numpy())
    np.testing.assert_allclose(out.cpu().double().numpy(), ref, rtol=1e-4)
    (k,) = [kk for gr in graphs for kk in gr.plan["kernels"] if kk["kind"] == "matmul"]
    # the kernel's own simulation, whole: the plan block_shape picks with the epilogue's SBUF
    epi = matmul_blocked.epilogue_bytes((4,), 4, 1, True)
    mb, nb, kc = matmul_blocked.block_shape(tg, M, N, K, 4, epi)
    assert M <= 2 * mb and N <= 2 * nb and (K <= 3 * kc if kc < K else K <= 16 * tg.pmax)     # small enough to be simulated whole
    e = np.empty
    sim = costs._sim(matmul_blocked.blocked_matmul, [e((K, M), np.float32), e((K, N), np.float32),
                                                     e((M, N), np.float32)],
                     dict(mb=mb, nb=nb, kc=kc, n_small=0, steps=("vec", "act"), n_out=1), tg)
    assert k["ns"] == pytest.approx(sim[0], rel=1e-9)
    # unfused: the device's matmul kernel, then the epilogue's own pointwise kernel (over the same rows x columns)
    mm = costs.auto_cast_matmul_cost(tg, M, K, N, "float32")[0]
    R, C = costs._rows_cols(M * N)
    pw = costs._sim(fused.pointwise, [e((R, C), np.float32), e((R, C), np.float32)],
                    dict(shape=(R, C), dtype="float32", steps=("vec", "act"), n_out=1), tg)[0]
    assert k["ns"] < mm + pw
    assert k["label"] == "mm+add+exp"


@pytest.mark.parametrize("m, k, n, full, small", [(3072, 4096, 1536, ("float32",), ()), (2048, 3072, 4096, (), ()),
                                                  (1024, 1024, 30720, (), ("float32",))])   # a vocabulary's bias
def test_blocked_epilogue_extrapolation_against_the_whole_simulation(m, k, n, full, small):
    """Rows, columns and contraction extrapolated from one and two blocks and two contractions (``costs._linear``)
    against the whole product simulated."""
    tg = STATE.target
    steps = ("vec",) * max(1, len(full) + len(small)) + ("act",)
    a = costing.blocked_epilogue_cost(tg, m, k, n, "float32", None, full, small, steps, 1)
    b = costing.blocked_epilogue_cost(tg, m, k, n, "float32", None, full, small, steps, 1, extrapolate=False)
    assert a[0] == pytest.approx(b[0], rel=0.02)
    assert a[2] == pytest.approx(b[2], rel=0.02)
