"""examples/nki_op_rmsnorm.py (issue 21): its RMSNorm kernels as an ``nki_op`` with a kernel backward, checked
against float64 autograd, and its transformer block trained on ``neuron`` against PyTorch's RMSNorm on the CPU."""

import importlib.util
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.join(ROOT, "examples", "nki_op_rmsnorm.py")


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("nki_op_rmsnorm_example", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("rows", [24, 160])          # one partial tile; a full tile and a partial one
def test_rmsnorm_op_forward_and_backward_against_float64(ex, rows):
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(2, rows // 2, 48, generator=g)
    w = torch.randn(48, generator=g)
    dy = torch.randn(2, rows // 2, 48, generator=g)
    xd = x.double().requires_grad_()
    wd = w.double().requires_grad_()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + ex.EPS) * wd
    ref.backward(dy.double())
    xn = x.to("neuron").requires_grad_()
    wn = w.to("neuron").requires_grad_()
    y = ex.rmsnorm(xn, wn)
    y.backward(dy.to("neuron"))
    assert (y.detach().cpu().double() - ref.detach()).abs().max() < 1e-5
    assert (xn.grad.cpu().double() - xd.grad).abs().max() < 1e-4
    assert (wn.grad.cpu().double() - wd.grad).abs().max() < 1e-4


def test_example_block_trains_like_pytorch(ex, capsys):
    dev, ref = ex.main(["--steps", "3"])
    assert dev[-1] < dev[0]
    for a, b in zip(dev, ref):
        assert abs(a - b) <= 2 ** -7 * abs(b)       # within bf16 tolerance (8-bit significand)
    out = capsys.readouterr().out
    assert "nki::rmsnorm_fwd" in out and "nki::rmsnorm_bwd" in out
