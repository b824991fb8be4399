"""The ``find_torch_dispatch_rule`` patch (nki_bridge) answers torch's own ops on ``NeuronTensor`` from the op's rules
holder, remembered once: a rule registered for ``NeuronTensor`` on such an op after the op was seen (and so
remembered) is still found and runs, and is gone again once deregistered."""

import torch
from torch._library import simple_registry

from trnsim import backend
from trnsim.backend.tensor import NeuronTensor


def _sevens():
    """A ``__torch_dispatch__`` rule answering every call with sevens, and the list of the ops it was called for."""
    calls = []

    def rule(cls, func, types, args, kwargs):
        calls.append(func)
        return torch.full_like(args[0]._p, 7.0).to("neuron")
    return calls, rule


def test_a_rule_registered_after_the_op_was_seen_is_found():
    backend.register()
    a = torch.randn(4, device="neuron")
    b = torch.randn(4, device="neuron")
    torch.mul(a, b).sum()                       # aten::mul.Tensor seen: its holder remembered
    op = torch.ops.aten.mul.Tensor
    assert simple_registry.find_torch_dispatch_rule(op, NeuronTensor) is None
    calls, rule = _sevens()
    handle = simple_registry.singleton.find(op.__qualname__).torch_dispatch_rules.register(NeuronTensor, rule)
    try:
        assert simple_registry.find_torch_dispatch_rule(op, NeuronTensor) is rule
        out = torch.mul(a, b)                   # through the dispatcher (Python's ``*`` may take operators.py)
        assert calls == [op]
        assert torch.equal(out.cpu(), torch.full((4,), 7.0))
    finally:
        handle.destroy()
    assert simple_registry.find_torch_dispatch_rule(op, NeuronTensor) is None
    torch.testing.assert_close(torch.mul(a, b).cpu(), a.cpu() * b.cpu(), rtol=0, atol=0)


def test_pythons_operator_honours_a_registered_rule():
    """``a * b`` (operators.py's dispatcher-free shortcut) gives way to a rule registered for the op, as
    ``torch.mul`` does, and takes the shortcut again once it is gone."""
    backend.register()
    a = torch.randn(4, device="neuron")
    b = torch.randn(4, device="neuron")
    op = torch.ops.aten.mul.Tensor
    calls, rule = _sevens()
    handle = simple_registry.singleton.find(op.__qualname__).torch_dispatch_rules.register(NeuronTensor, rule)
    try:
        out = a * b
        assert calls == [op]
        assert torch.equal(out.cpu(), torch.full((4,), 7.0))
    finally:
        handle.destroy()
    torch.testing.assert_close((a * b).cpu(), a.cpu() * b.cpu(), rtol=0, atol=0)
