"""The dispatcher asks trnsim's ``find_torch_dispatch_rule`` patch (nki_bridge) for a rule on every op on a neuron
tensor: torch's own ops (aten, prims, c10d) are answered without the custom-op lookup once seen, while a
``torch.library.custom_op`` op is still found and runs its own implementation on the device."""

import torch
from torch._library import custom_ops

from trnsim import backend


class _CountingOpdefs:
    def __init__(self, real):
        self.real = real
        self.gets = []

    def get(self, key, default=None):
        self.gets.append(key)
        return self.real.get(key, default)

    def __setitem__(self, key, value):
        self.real[key] = value

    def __getitem__(self, key):
        return self.real[key]

    def __contains__(self, key):
        return key in self.real


@torch.library.custom_op("trnsim_rule_lookup::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def test_aten_ops_skip_the_custom_op_lookup_and_custom_ops_still_find_theirs(monkeypatch):
    a = torch.randn(8, 8, device="neuron")
    (a + a).sum(); torch.mm(a, a)                       # seen once: remembered as torch's own ops
    counting = _CountingOpdefs(custom_ops.OPDEFS)
    monkeypatch.setattr(custom_ops, "OPDEFS", counting)
    for _ in range(5):
        b = (a + a).sum() + torch.mm(a, a).sum()
    assert counting.gets == []
    backend.reset_fallback_counts()
    out = _twice(a)
    assert "trnsim_rule_lookup::twice" in counting.gets
    assert not backend.fallback_counts()                # ran its implementation on the device, no CPU fallback
    torch.testing.assert_close(out.cpu().double(), a.cpu().double() * 2, rtol=0, atol=0)
    assert b.device.type == "neuron"
