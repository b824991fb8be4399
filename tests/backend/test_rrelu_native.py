"""User code (issue 12, helper h12): rrelu natively on the device (eval mode equal to the CPU; training mode slopes
drawn by the device generator, with the gradient the slope used), strict mode on (a CPU fallback is an error)."""

import pytest
import torch
import torch.nn.functional as F

from trnsim import backend


@pytest.fixture(autouse=True)
def _strict():
    prev = backend.set_fallback_mode("error")      # any CPU fallback raises NeuronFallbackError
    yield
    backend.set_fallback_mode(prev)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rrelu_eval_matches_cpu(dtype):
    x = torch.randn(7, 5, dtype=dtype, generator=torch.Generator().manual_seed(0)).requires_grad_()
    xd = x.detach().to("neuron").requires_grad_()
    g = torch.randn(7, 5, dtype=dtype, generator=torch.Generator().manual_seed(1))
    y, yd = F.rrelu(x, 0.1, 0.4), F.rrelu(xd, 0.1, 0.4)
    y.backward(g)
    yd.backward(g.to("neuron"))
    assert yd.device.type == "neuron"
    torch.testing.assert_close(yd.detach().cpu(), y.detach(), rtol=0, atol=0)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=0, atol=0)


def test_rrelu_training_draws_slopes_on_the_device():
    torch.neuron.manual_seed(3)
    x = torch.randn(4000, generator=torch.Generator().manual_seed(2))
    xd = x.to("neuron").requires_grad_()
    y = F.rrelu(xd, 0.1, 0.3, training=True)
    y.backward(torch.ones_like(y))
    neg = x < 0
    slope = y.detach().cpu()[neg] / x[neg]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6
    assert abs(slope.mean().item() - 0.2) < 0.01          # uniform in [0.1, 0.3]
    torch.testing.assert_close(xd.grad.cpu()[neg], slope)   # d/dx of slope * x
    torch.testing.assert_close(y.detach().cpu()[~neg], x[~neg], rtol=0, atol=0)
    torch.neuron.manual_seed(3)                             # the device generator makes it reproducible
    torch.testing.assert_close(F.rrelu(x.to("neuron"), 0.1, 0.3, training=True).cpu(), y.detach().cpu())
    z = x.to("neuron")
    F.rrelu(z, 0.1, 0.3, training=True, inplace=True)
    assert ((z.cpu() / x)[neg] >= 0.1 - 1e-6).all()
