"""Random ops on ``neuron`` draw from the device generator, eager and compiled alike: ``torch.neuron.manual_seed``
decides their values, the host's generator does not (rand_like & co. run as their generator-taking twin,
native_dropout through the device's own implementation: trnsim/backend/rng.py)."""

import pytest
import torch

import trnsim.backend  # noqa: F401  (registers the neuron device)
from trnsim.backend.rng import generator_overload

OPS = {
    "dropout": lambda x: torch.nn.functional.dropout(x, 0.5, training=True),
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "randint_like": lambda x: torch.randint_like(x, 0, 1000),
    "randint_like_high": lambda x: torch.randint_like(x, 1000),
    "bernoulli": lambda x: torch.bernoulli(x * 0.5),
    "randn": lambda x: x + torch.randn(16, 16, device=x.device),
}


def _draw(fn, host_seed, device_seed):
    torch.manual_seed(host_seed)          # seeds the host and (as on CUDA) every device ...
    torch.neuron.manual_seed(device_seed)  # ... then the device alone
    return fn(torch.ones(16, 16, device="neuron")).cpu()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_device_seed_decides_and_host_seed_does_not(name, compiled):
    torch._dynamo.reset()
    fn = torch.compile(OPS[name], backend="neuron") if compiled else OPS[name]
    a = _draw(fn, 1, 7)
    assert torch.equal(a, _draw(fn, 2, 7)), "the host's seed changed a device random op"
    assert not torch.equal(a, _draw(fn, 1, 8)), "the device's seed did not change a device random op"


@pytest.mark.parametrize("name", ["dropout", "rand_like", "randn_like", "bernoulli"])
def test_compiled_draws_what_eager_draws(name):
    torch._dynamo.reset()
    eager = _draw(OPS[name], 3, 11)
    compiled = _draw(torch.compile(OPS[name], backend="neuron"), 3, 11)
    assert torch.equal(eager, compiled)


def test_generator_twins():
    aten = torch.ops.aten
    assert generator_overload(aten.rand_like.default) is aten.rand_like.generator
    assert generator_overload(aten.randn_like.out) is aten.randn_like.generator_out
    assert generator_overload(aten.randint_like.low_dtype) is aten.randint_like.low_generator_dtype
    assert generator_overload(aten.randint_like.Tensor) is aten.randint_like.Tensor_generator
    assert generator_overload(aten.uniform_.default) is aten.uniform_.default      # takes one already
    assert generator_overload(aten.add.Tensor) is None
