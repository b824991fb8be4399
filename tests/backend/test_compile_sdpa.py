"""Attention in a graph compiled with the neuron backend stays one node (forward and backward), charged what the
eager device charges it (``costs.attention_cost`` / ``attention_backward_cost``), dropout included."""

import pytest
import torch

from trnsim.backend import costs
from trnsim.backend.shape_only import device_target, shape_only_tensor

B, H, L, D = 2, 4, 128, 64


class _Attn(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, self.p, False)[0]


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_compiled_sdpa_is_one_node_priced_as_eager(graphs, p):
    torch._dynamo.reset()
    with device_target("trn1") as tg:
        q, k, v = (shape_only_tensor((B, H, L, D), torch.bfloat16, requires_grad=True) for _ in range(3))
        out = torch.compile(_Attn(p), backend="neuron")(q, k, v)
        out.float().sum().backward()
        assert q.grad is not None and tuple(q.grad.shape) == (B, H, L, D)
        fwd = costs.attention_cost(tg, B * H, L, L, D, "bfloat16", p)
        bwd = costs.attention_backward_cost(tg, B * H, L, L, D, "bfloat16", p)
    names = {g.name.split("_")[0]: g for g in graphs}
    assert set(names) == {"forward", "backward"}
    for kind, want, op in (("forward", fwd, "_scaled_dot_product_flash_attention_for_cpu"),
                           ("backward", bwd, "_scaled_dot_product_flash_attention_for_cpu_backward")):
        g = names[kind]
        ops = [str(n.target) for n in g.gm.graph.nodes if n.op == "call_function"]
        assert not any("bmm" in o or "softmax" in o for o in ops), (kind, ops)    # not decomposed
        att = [kk for kk in g.plan["kernels"] if kk["label"] == op]
        assert len(att) == 1 and att[0]["nodes"] == 1, g.plan["kernels"]
        assert att[0]["ns"] == pytest.approx(want[0], rel=1e-9)
        assert att[0]["flops"] == pytest.approx(want[1], rel=1e-9)


def test_dropout_is_charged_in_the_attention_kernel():
    with device_target("trn1") as tg:
        a = costs.attention_cost(tg, B * H, L, L, D, "bfloat16", 0.0)
        b = costs.attention_cost(tg, B * H, L, L, D, "bfloat16", 0.1)
    assert b[0] > a[0]          # the mask is generated and applied inside the kernel: it costs time
