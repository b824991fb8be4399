"""Ops the compile backend keeps whole instead of decomposing (backend.py ``_KEEP_WHOLE``): gelu_backward (one
Scalar Engine activation and a multiply, fused with its neighbours) and native_layer_norm_backward (the device's
kernel), with their numerics against float64."""

import pytest
import torch

import trnsim  # noqa: F401  (registers the neuron device)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 96)
        self.ln = torch.nn.LayerNorm(96)

    def forward(self, x):
        return self.ln(torch.nn.functional.gelu(self.lin(x)))


def test_gelu_and_layer_norm_backward_stay_whole(graphs, monkeypatch):
    monkeypatch.setenv("NEURON_CC_FLAGS", "--auto-cast none")   # fp32 matmuls as fp32 (the default casts to bf16)
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = _Block().double()
    with torch.no_grad():
        ref.ln.weight.uniform_(0.5, 1.5)
        ref.ln.bias.uniform_(-0.5, 0.5)
    dev = _Block()
    dev.load_state_dict({k: v.float() for k, v in ref.state_dict().items()})
    dev = dev.to("neuron")
    x = torch.randn(8, 64, dtype=torch.float64)
    g = torch.randn(8, 96, dtype=torch.float64)
    xd = x.float().to("neuron").requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    torch.compile(dev, backend="neuron")(xd).backward(g.float().to("neuron"))
    ref(xr).backward(g)
    assert torch.allclose(xd.grad.cpu().double(), xr.grad, rtol=1e-4, atol=1e-5)
    for (n, p), (_, pr) in zip(dev.named_parameters(), ref.named_parameters()):
        assert torch.allclose(p.grad.cpu().double(), pr.grad, rtol=1e-4, atol=1e-5), n
    bw = [gr for gr in graphs if gr.name.startswith("backward")]
    assert len(bw) == 1
    ops = [n.target._opname for n in bw[0].gm.graph.nodes if n.op == "call_function"
           and hasattr(n.target, "_opname")]
    assert "gelu_backward" in ops and "native_layer_norm_backward" in ops
    assert "erf" not in ops and "rsqrt" not in ops          # not decomposed
    labels = [k["label"] for k in bw[0].plan["kernels"]]
    assert "native_layer_norm_backward" in labels
    # gelu_backward is an elementwise step of a fused kernel (here its own: its producer is the layer-norm kernel,
    # its consumers matmuls), not an opaque op
    gk = [k for k in bw[0].plan["kernels"] if "gelu_backward" in k["label"]]
    assert len(gk) == 1 and gk[0]["kind"] in ("pointwise", "matmul"), gk
