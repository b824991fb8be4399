"""nn.Parameter subclasses on the neuron device (issue 28: bitsandbytes' Int8Params/Params4bit), ``self.data = t`` on
them across devices, and torch.library ops of other namespaces falling back under their own names.

The subclasses here are written for these tests in the way quantisation libraries write theirs (attributes set in
``__new__``, ``self.data = ...`` inside a method, an overridden ``to``, a ``__torch_function__``); bitsandbytes itself
is not needed."""

import copy
import io
import warnings

import pytest
import torch
from torch import nn

from trnsim import backend
from trnsim.backend.tensor import NeuronTensor


class Tagged(nn.Parameter):
    """Attributes set in ``__new__`` (as Int8Params sets CB/SCB)."""

    def __new__(cls, data=None, requires_grad=True, tag=None, scale=None):
        obj = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        obj.tag = tag
        obj.scale = scale
        return obj

    def quantize(self, device):
        """Replace the data by its int8 rounding on ``device`` (``self.data = ...`` on a host parameter)."""
        q = self.data.to(device=device, dtype=torch.float64)
        self.scale = q.abs().max() / 127
        self.data = torch.round(q / self.scale).to(torch.int8)
        return self

    def to(self, *args, **kwargs):
        # a new instance on the target device, carrying the attributes (the pattern of Int8Params.to)
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
        new = Tagged(super().to(device=device, dtype=dtype, non_blocking=non_blocking),
                     requires_grad=self.requires_grad, tag=self.tag)
        new.scale = self.scale.to(device) if isinstance(self.scale, torch.Tensor) else self.scale
        return new


class Plain(nn.Parameter):
    """No ``__new__`` of its own: ``nn.Parameter.__new__`` makes it."""


class Chunky(nn.Parameter):
    """A ``__torch_function__`` that keeps the subclass through ``torch.chunk`` (as Params4bit does)."""

    def __new__(cls, data=None, requires_grad=False, label=None):
        obj = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        obj.label = label
        return obj

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.chunk:
            return tuple(cls(c, label=args[0].label) for c in out)
        return out


def _linear(weight_cls=Tagged):
    torch.manual_seed(0)
    m = nn.Linear(5, 3).double()
    m.weight = weight_cls(m.weight.data, tag="w") if weight_cls is Tagged else weight_cls(m.weight.data)
    return m


def test_module_to_neuron_keeps_subclass_identity_and_attributes():
    m = _linear()
    w = m.weight
    w.extra = torch.arange(3.0)
    m.to("neuron")
    assert m.weight is w                               # moved in place, as on CUDA
    assert type(w).__name__ == "Tagged" and isinstance(w, Tagged) and isinstance(w, nn.Parameter)
    assert isinstance(w, NeuronTensor) and w.device.type == "neuron"
    assert w.tag == "w" and torch.equal(w.extra, torch.arange(3.0))   # __dict__ kept (not moved, as on CUDA)
    assert dict(m.named_parameters())["weight"] is w
    m.to("cpu")
    assert m.weight is w and type(w) is Tagged and w.device.type == "cpu" and w.tag == "w"


def test_subclass_weight_trains_like_a_float64_reference():
    ref = _linear()
    m = _linear().to("neuron")
    x = torch.randn(4, 5, dtype=torch.float64)
    ref(x).pow(2).sum().backward()
    y = m(x.to("neuron"))
    y.pow(2).sum().backward()
    assert type(y) is NeuronTensor                      # an op's result is a plain tensor (as on CUDA)
    torch.testing.assert_close(y.cpu(), ref(x), rtol=0, atol=0)
    assert type(m.weight.grad) is NeuronTensor
    torch.testing.assert_close(m.weight.grad.cpu(), ref.weight.grad, rtol=0, atol=0)


def test_data_setter_on_a_host_subclass_takes_device_data():
    w = Tagged(torch.randn(3, 4, dtype=torch.float64), requires_grad=False, tag="q")
    before = w.detach().clone()
    out = w.quantize("neuron")
    assert out is w and type(w).__name__ == "Tagged" and isinstance(w, Tagged)
    assert w.device.type == "neuron" and w.dtype == torch.int8 and w.tag == "q"
    assert w.scale.device.type == "neuron"
    want = torch.round(before / (before.abs().max() / 127)).to(torch.int8)
    assert torch.equal(w.cpu(), want)
    # and back: a device subclass given host data becomes the host subclass again, attributes kept
    w.data = torch.zeros(2, dtype=torch.int8)
    assert type(w) is Tagged and w.device.type == "cpu" and w.tag == "q" and w.shape == (2,)


def test_data_setter_moves_grad_with_the_subclass():
    w = Tagged(torch.ones(3), tag="g")
    w.grad = torch.full((3,), 2.0)
    w.data = torch.ones(3, device="neuron")
    assert isinstance(w, Tagged) and w.device.type == "neuron" and w.grad.device.type == "neuron"
    assert torch.equal(w.grad.cpu(), torch.full((3,), 2.0))


def test_overridden_to_returns_the_subclass_on_the_device():
    w = Tagged(torch.arange(6.0).reshape(2, 3), tag="t", scale=torch.tensor(0.5))
    d = w.to("neuron")
    assert d is not w and isinstance(d, Tagged) and d.device.type == "neuron" and d.tag == "t"
    assert d.scale.device.type == "neuron" and torch.equal(d.cpu(), w.detach())
    back = d.to("cpu")
    assert type(back) is Tagged and back.device.type == "cpu" and torch.equal(back, w.detach())


def test_make_subclass_and_parameter_new_with_device_data():
    t = torch.arange(4.0, device="neuron")
    p = Plain(t)
    assert isinstance(p, Plain) and p.device.type == "neuron" and p.requires_grad
    assert torch.equal(p.cpu(), torch.arange(4.0))
    # torch's behaviour for plain nn.Parameter on a wrapper tensor is kept: the tensor type, flagged a Parameter
    q = nn.Parameter(t)
    assert type(q) is NeuronTensor and isinstance(q, nn.Parameter)
    with pytest.raises(RuntimeError, match="floating point and complex"):
        torch.Tensor._make_subclass(Plain, torch.ones(2, dtype=torch.int64, device="neuron"), True)
    with pytest.raises(NotImplementedError, match="dispatch options"):
        torch.Tensor._make_subclass(Plain, t, False, dispatch_device=True)
    # a device class given host data makes the host class
    host = torch.Tensor._make_subclass(type(p), torch.ones(2), False)
    assert type(host) is Plain and host.device.type == "cpu"


def test_in_place_op_returns_the_subclass_object():
    w = Tagged(torch.ones(3), requires_grad=False, tag="i").to("neuron")
    r = w.mul_(3)
    assert r is w and isinstance(r, Tagged)
    assert torch.equal(w.cpu(), torch.full((3,), 3.0))
    w.add_(torch.ones(3, device="neuron"))
    assert torch.equal(w.cpu(), torch.full((3,), 4.0))


def test_subclass_torch_function_is_honoured_on_the_device():
    c = Chunky(torch.arange(6.0), label="L").to("neuron")
    assert isinstance(c, NeuronTensor)        # Chunky's .to is Tensor.to: torch_function path -> plain result
    c = Chunky(torch.arange(6.0, device="neuron"), label="L")
    parts = torch.chunk(c, 2)
    assert all(isinstance(x, Chunky) and x.label == "L" and x.device.type == "neuron" for x in parts)
    assert torch.equal(parts[1].cpu(), torch.arange(3.0, 6.0))


def test_deepcopy_and_state_dict_round_trip():
    m = _linear().to("neuron")
    m2 = copy.deepcopy(m)
    assert isinstance(m2.weight, Tagged) and m2.weight.device.type == "neuron"
    assert m2.weight is not m.weight and torch.equal(m2.weight.cpu(), m.weight.cpu())
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)
    assert sd["weight"].device.type == "neuron" and torch.equal(sd["weight"].cpu(), m.weight.cpu())
    assert "_p" not in m.weight.__getstate__()      # the payload travels as the data, not as an attribute


def test_device_class_joins_the_foreach_allow_lists():
    from torch.optim.optimizer import _foreach_supported_types
    w = Plain(torch.ones(2, device="neuron"))
    assert type(w) in _foreach_supported_types
    opt = torch.optim.AdamW([w], lr=0.1, foreach=True)
    w.grad = torch.ones(2, device="neuron")
    opt.step()
    assert isinstance(w, Plain) and w.device.type == "neuron" and (w.cpu() < 1).all()


_LIB = []


def _custom_lib():
    if not _LIB:
        lib = torch.library.Library("trnsim_t28", "DEF")
        # "mul" shares an aten op's name: it must not be taken for aten::mul (the native table's entry)
        lib.define("mul(Tensor a, Tensor b) -> Tensor")
        lib.impl("mul", lambda a, b: a * b + 1, "CPU")
        _LIB.append(lib)
    return torch.ops.trnsim_t28.mul.default


def test_custom_library_op_falls_back_under_its_own_namespace():
    op = _custom_lib()
    backend.reset_fallback_counts()
    a, b = torch.arange(4.0), torch.full((4,), 2.0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = op(a.to("neuron"), b.to("neuron"))
    assert type(out) is NeuronTensor
    assert torch.equal(out.cpu(), a * b + 1)          # its own kernel, not aten::mul
    assert backend.fallback_counts() == {"trnsim_t28::mul": 1}
    msgs = [str(m.message) for m in w if issubclass(m.category, backend.NeuronFallbackWarning)]
    assert all("aten::mul" not in m for m in msgs)
    assert len(msgs) <= 1 and all(m.startswith("trnsim_t28::mul is not implemented") for m in msgs)


def test_library_op_with_a_generic_kernel_runs_it_on_the_device():
    # a CPU kernel that assumes a CPU-only layout (here: a different result) and a CompositeExplicitAutograd kernel:
    # a PrivateUse1 device gets the generic one from the dispatcher, so the simulated device runs it, natively
    if not hasattr(torch.ops, "trnsim_t28g") or not hasattr(torch.ops.trnsim_t28g, "scale"):
        lib = torch.library.Library("trnsim_t28g", "DEF")
        lib.define("scale(Tensor a, float s) -> Tensor")
        lib.impl("scale", lambda a, s: a * s + 1000, "CPU")
        lib.impl("scale", lambda a, s: a * s, "CompositeExplicitAutograd")
        _LIB.append(lib)
    op = torch.ops.trnsim_t28g.scale.default
    from trnsim.backend.device_state import STATE
    backend.reset_fallback_counts()
    a = torch.arange(4.0)
    assert torch.equal(op(a, 3.0), a * 3 + 1000)          # the CPU keeps its own kernel
    t0 = STATE.now_ns
    out = op(a.to("neuron"), 3.0)
    assert type(out) is NeuronTensor and torch.equal(out.cpu(), a * 3)
    assert backend.fallback_counts() == {}
    assert STATE.now_ns > t0                              # its aten::mul was charged as a device op
