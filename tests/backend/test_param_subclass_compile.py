"""Issue 28 (bitsandbytes' suite on ``neuron``), the capabilities it needed, tested without bitsandbytes:

* ``self.weight.data = t`` inside a compiled forward, on a device ``nn.Parameter`` subclass (dynamo traces the
  device class as a tensor; the neuron backend keeps the ``set_`` as an input mutation);
* ``torch.compile`` with inductor (the default backend) on ``neuron`` tensors compiles with the neuron backend, as
  TorchNeuron auto-selects it on a Neuron device; graphs of CPU tensors keep inductor;
* operators of another library's namespace, functionalised slice assignments (``aten.copy``) and the host-side
  size checks around data-dependent output shapes (``_assert_scalar``) are lowerable;
* a neuron tensor's ``__dict__`` shows its attributes without the wrapper's own (payload, device index, Parameter
  flag), so ``vars``, ``__getstate__`` that copies ``__dict__``, pickle and deepcopy see what they see on CUDA."""

import copy
import io
import pickle
import warnings

import pytest
import torch
from torch import nn

from trnsim.backend.compile import NeuronCompileWarning, compile_records


class Quant(nn.Parameter):
    """A Parameter subclass in the way quantisation libraries write theirs: attributes set in ``__new__``, a
    ``__getstate__``/``__setstate__`` built on ``self.__dict__`` (the pattern of Params4bit)."""

    def __new__(cls, data=None, requires_grad=False, blocksize=64, label="q"):
        obj = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        obj.blocksize = blocksize
        obj.label = label
        return obj

    def __getstate__(self):
        state = self.__dict__.copy()
        state["data"] = self.data
        state["requires_grad"] = self.requires_grad
        return state

    def __setstate__(self, state):
        self.requires_grad = state["requires_grad"]
        self.blocksize = state["blocksize"]
        self.label = state["label"]
        self.data = state["data"]


class SetsData(nn.Module):
    """``self.weight.data = self.alt`` after using the weight (the pattern of Linear8bitLt.forward)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = Quant(torch.randn(6, 5, dtype=torch.float64, generator=g))
        self.register_buffer("alt", torch.randn(6, 5, dtype=torch.float64, generator=g))

    def forward(self, x):
        out = x @ self.weight.t()
        self.weight.data = self.alt
        return out


@pytest.mark.parametrize("backend", ["neuron", "inductor"])
def test_compiled_forward_sets_data_on_a_device_parameter_subclass(backend):
    torch._dynamo.reset()
    m = SetsData().to("neuron")
    w0, alt = m.weight.detach().cpu().clone(), m.alt.cpu().clone()
    x = torch.randn(4, 5, dtype=torch.float64)
    c = torch.compile(m, backend=backend, fullgraph=True)
    out = c(x.to("neuron"))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), x @ w0.t(), rtol=0, atol=1e-12)      # float64 on both sides
    w = m.weight
    assert isinstance(w, Quant) and w.device.type == "neuron" and w.label == "q" and w.blocksize == 64
    assert torch.equal(w.detach().cpu(), alt)                                   # the set_ took effect
    out2 = c(x.to("neuron"))
    torch.testing.assert_close(out2.cpu(), x @ alt.t(), rtol=0, atol=1e-12)


def test_inductor_on_neuron_tensors_compiles_with_the_neuron_backend(monkeypatch):
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)   # the compiler's default: fp32 matmuls as fp32
    def f(a, b):
        return torch.relu(a @ b) + 1.0

    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 4, generator=g), torch.randn(4, 3, generator=g)
    ref = torch.relu(a.double() @ b.double()) + 1.0
    torch._dynamo.reset()
    n = len(compile_records())
    out = torch.compile(f, fullgraph=True)(a.to("neuron"), b.to("neuron"))       # default backend: inductor
    assert out.device.type == "neuron" and len(compile_records()) > n           # the neuron backend compiled it
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=1e-5)

    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.compile(f, mode="reduce-overhead")(a.to("neuron"), b.to("neuron"))
    msgs = [str(x.message) for x in w if issubclass(x.category, NeuronCompileWarning)]
    assert any("triton.cudagraphs" in m for m in msgs), msgs                   # the option that does not apply

    # a graph of CPU tensors still goes to inductor (its entry point replaced by a recorder here)
    import torch._inductor.compile_fx as cfx
    seen = []

    def recorder(gm, example_inputs, **kwargs):
        seen.append([t.device.type for t in example_inputs if isinstance(t, torch.Tensor)])
        return gm.forward
    monkeypatch.setattr(cfx, "compile_fx", recorder)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f)(a, b).double(), ref, rtol=1e-5, atol=1e-5)
    assert seen == [["cpu", "cpu"]]
    torch._dynamo.reset()


_LIB = []


def _lib_op():
    if not _LIB:
        lib = torch.library.Library("trnsim_t28c", "DEF")
        lib.define("scale_add(Tensor a, float s) -> Tensor")
        lib.impl("scale_add", lambda a, s: a * s + 1, "CPU")
        lib.impl("scale_add", lambda a, s: torch.empty_like(a), "Meta")
        _LIB.append(lib)
    return torch.ops.trnsim_t28c.scale_add.default


def test_other_librarys_op_and_slice_assignment_run_in_a_compiled_graph():
    op = _lib_op()

    def f(a, codes):
        n = a.shape[0]
        out = torch.empty(2 * n, dtype=torch.int32, device=a.device)
        out[1::2] = a & 0xF               # functionalised into aten.copy + slice_scatter
        out[::2] = a >> 4
        return op(codes[out], 2.0)

    g = torch.Generator().manual_seed(2)
    a = torch.randint(0, 256, (40,), dtype=torch.uint8, generator=g)
    codes = torch.randn(16, dtype=torch.float64, generator=g)
    ref = f(a, codes)
    torch._dynamo.reset()
    n = len(compile_records())
    out = torch.compile(f, backend="neuron", fullgraph=True)(a.to("neuron"), codes.to("neuron"))
    recs = compile_records()[n:]
    assert recs and not any(r.error for r in recs)             # lowered, not run eagerly after a failure
    assert torch.equal(out.cpu(), ref)


def test_host_size_checks_are_free_graph_nodes():
    # what dynamo emits around data-dependent output shapes (capture_dynamic_output_shape_ops, bitsandbytes'
    # outlier columns): host-side checks, lowered as free nodes instead of refusing the graph.  (A fused kernel whose
    # own geometry is data-dependent still fails to lower: fusion needs concrete row sizes.)
    from trnsim.backend.compile import ops as O
    for op in (torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default):
        assert O.kind(op) == "view"
    assert O.kind(torch.ops.aten.copy.default) == "pointwise" and O.step("copy", 2) is None


def test_dict_hides_the_wrappers_own_attributes_and_writes_through():
    t = torch.ones(3, device="neuron")
    assert vars(t) == {} and t._p is not None
    t.__dict__["a"] = 1
    t.__dict__.update(b=2)
    assert t.a == 1 and t.b == 2 and vars(t) == {"a": 1, "b": 2}
    del t.__dict__["a"]
    assert not hasattr(t, "a") and t.__dict__.pop("b") == 2 and not hasattr(t, "b")
    assert torch.equal(t.cpu(), torch.ones(3))                   # the payload is untouched
    p = nn.Parameter(torch.ones(2, device="neuron"))
    assert isinstance(p, nn.Parameter) and "_is_param" not in vars(p)


def test_subclass_state_pickle_and_deepcopy_round_trip_as_on_cpu():
    def made(device):
        q = Quant(torch.arange(12, dtype=torch.float32).reshape(3, 4), blocksize=32, label="w")
        keys = set(q.__dict__)
        q.data = q.data.to(device)          # the subclass moved in place (Params4bit._quantize does this)
        return q, keys

    cpu_q, cpu_keys = made("cpu")
    q, keys = made("neuron")
    assert type(q).__name__ == "Quant" and q.device.type == "neuron"
    assert set(q.__dict__) == keys == cpu_keys == set(cpu_q.__dict__)
    assert set(q.__getstate__()) == set(cpu_q.__getstate__())

    back = pickle.loads(pickle.dumps(q))
    cpu_back = pickle.loads(pickle.dumps(cpu_q))
    assert set(back.__dict__) == set(cpu_back.__dict__) == keys
    assert back.device.type == "neuron" and torch.equal(back.data.cpu(), cpu_q.data)
    assert back.blocksize == 32 and back.label == "w" and back.requires_grad is False

    dc = copy.deepcopy(q)
    assert isinstance(dc, Quant) and dc.device.type == "neuron" and set(dc.__dict__) == keys
    assert dc.data_ptr() != q.data_ptr() and torch.equal(dc.detach().cpu(), cpu_q.data)

    m = nn.Module()
    m.w = q
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=False)
    assert sd["w"].device.type == "neuron" and torch.equal(sd["w"].cpu(), cpu_q.data)
