"""The per-step costs of a compiled training step (issue 30): gradient accumulation fused into the kernels that
produce the gradients, and the optimizer step as one fused kernel updating its buffers in place."""

import pytest
import torch

from trnsim.backend import costs
from trnsim.cost import anyestimate, estimator
from trnsim.targets import get_target

TRN1 = get_target("trn1")


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("gbytes", [2, 4])
def test_compiled_accumulation_is_one_more_read_of_the_gradients(gbytes):
    n, mbs = 10_000_000, 8
    comp = anyestimate.accumulation_s(n, mbs, gbytes, TRN1, compiled=True)
    assert comp == pytest.approx((mbs - 1) * costs.roofline_ns(TRN1, float(n), float(n) * gbytes) * 1e-9)
    assert comp == pytest.approx((mbs - 1) * n * gbytes / TRN1.dma_bytes_per_ns_per_core * 1e-9)   # DMA-bound
    eager = anyestimate.accumulation_s(n, mbs, gbytes, TRN1)
    dt = "bfloat16" if gbytes == 2 else "float32"
    assert eager == pytest.approx((mbs - 1) * (costs.launch_ns(TRN1) + costs.elementwise_cost(
        TRN1, n, dt, "binary", "add")[0]) * 1e-9)
    assert comp < eager
    assert anyestimate.accumulation_s(n, 1, gbytes, TRN1, compiled=True) == 0.0


@pytest.mark.parametrize("name,accesses", [("adamw", 7), ("lamb", 7)])
def test_compiled_optimizer_is_at_least_its_traffic_and_faster_than_eager(name, accesses):
    """Compiled, the step reads parameter, gradient and two moments and writes three of them at least once (LAMB
    more: its norms read the parameter and the update again); eager pays a round trip per foreach op."""
    n = 4_000_000
    comp = estimator.optimizer_s(n, TRN1, name, compiled=True)
    eager = estimator.optimizer_s(n, TRN1, name)
    assert n * 4 * accesses / TRN1.dma_bytes_per_ns_per_core * 1e-9 <= comp < eager


def test_in_place_update_of_a_graph_input_is_written_in_place(graphs_made):
    """``p.add_(g * 2)`` compiled: functionalisation ends the graph with ``copy_(p, new)``; the kernel computing
    ``new`` writes it into ``p``'s buffer (input/output aliasing), so there is one kernel, not a copy after it."""
    from trnsim.backend.device_state import STATE
    g = torch.Generator().manual_seed(5)
    p0, d = torch.randn(256, 512, generator=g), torch.randn(256, 512, generator=g)
    p, dd = p0.to("neuron"), d.to("neuron")

    def step(p, d):
        p.add_(d * 2.0)
    fn = torch.compile(step, backend="neuron")
    with torch.no_grad():
        fn(p, dd)
        t0 = STATE.now_ns
        fn(p, dd)
        dt = STATE.now_ns - t0
    assert torch.allclose(p.cpu().double(), p0.double() + 4 * d.double(), rtol=1e-6, atol=1e-5)
    plan = graphs_made[-1].plan
    labels = [k["label"] for k in plan["kernels"]]
    assert not any(lb.startswith("copy_") for lb in labels), labels
    assert len(plan["kernels"]) == 1 and plan["kernels"][0]["kind"] == "pointwise"
    assert dt == pytest.approx(costs.launch_ns(STATE.target) + plan["kernels"][0]["ns"])


@pytest.fixture
def graphs_made(graphs):
    """The suite's ``graphs`` fixture with the device registered and dynamo's caches empty before and after."""
    from trnsim import backend
    backend.register()
    import torch._dynamo
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()


def test_copying_another_input_into_an_input_is_still_a_copy(graphs_made):
    """``p.copy_(q.view(...))``: functionalised, the copied value is one kernel of the graph (``copy``, moving the
    bytes) and only its write-back into ``p`` is aliased; the data movement is charged once."""
    p = torch.zeros(256, 512).to("neuron")
    q0 = torch.randn(256 * 512, generator=torch.Generator().manual_seed(6))
    q = q0.to("neuron")

    def f(p, q):
        p.copy_(q.view(256, 512))
    with torch.no_grad():
        torch.compile(f, backend="neuron")(p, q)
    assert torch.equal(p.cpu(), q0.view(256, 512))
    ks = graphs_made[-1].plan["kernels"]
    assert len(ks) == 1 and ks[0]["ns"] > 0 and ks[0]["bytes"] >= 2 * 256 * 512 * 4, ks
