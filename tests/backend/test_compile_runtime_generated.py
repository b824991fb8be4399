"""A compiled graph's steps run as one generated function (``runtime._generate``): the same results, bit for bit, and
the same charge per call as the reference walk over the argument templates (``CompiledGraph._interpret``).

The graphs cover each step mode: fused compute ops rounded once (bf16 in, fp32 inside), ops that stay in fp32 on
chip, view ops, a factory with ``device=``, a random op with the device generator, lists of tensors (``cat``), ops
with keyword arguments, a graph with a backward, and bitsandbytes-style 4-bit dequantisation (slice, copy into an
``empty``, ``slice_scatter``, ``index`` with a list of tensors).
"""

import pytest
import torch

from trnsim import backend
from trnsim.backend.compile import runtime
from trnsim.backend.device_state import STATE


def _dequant(a, code, absmax):
    out = torch.empty(a.numel() * 2, dtype=torch.int32, device=a.device)
    out[1::2] = a & 0xF
    out[::2] = a >> 4
    return (code[out].view(-1, 8) * absmax.view(-1, 1)).reshape(-1, 4).to(torch.bfloat16)


def _mixed(x, w):
    h = torch.cat([x, x * 2], dim=0) @ w
    h = torch.nn.functional.gelu(h).to(torch.bfloat16)
    s = torch.softmax(h.float(), dim=-1).sum(dim=0, keepdim=True)
    return h.float().mean() + s.amax(), torch.zeros(3, device=x.device) + x.t().reshape(-1)[:3]


def _random(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x)


def _cases():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 256, (16,), dtype=torch.uint8, generator=g)
    code = torch.linspace(-1, 1, 16)
    absmax = torch.rand(4, generator=g) + 0.5
    x = torch.randn(4, 6, generator=g).to(torch.bfloat16)
    w = torch.randn(6, 5, generator=g).to(torch.bfloat16)
    return {"dequant": (_dequant, (a, code, absmax)), "mixed": (_mixed, (x, w)),
            "random": (_random, (torch.randn(5, 7, generator=g),))}


def _charged(call):
    """``call()``'s result and the simulated ns it charged, read from a clock started at 0 (a float difference of
    two clock readings would round differently at different clock values); the clock then goes on from where it was."""
    before = STATE.now_ns
    STATE.now_ns = 0.0
    try:
        out = call()
        return out, STATE.now_ns
    finally:
        STATE.now_ns = before + STATE.now_ns


def _run(fn, inputs, generated, monkeypatch, seed):
    """Compile ``fn`` afresh, call it twice (the first call compiles), and return the second call's outputs (on the
    host) and its charge in simulated ns."""
    torch._dynamo.reset()
    monkeypatch.setattr(runtime.CompiledGraph, "GENERATED", generated)
    dev = [t.to("neuron") for t in inputs]
    cfn = torch.compile(fn, backend="neuron")
    cfn(*dev)
    torch.neuron.manual_seed(seed)
    torch.manual_seed(seed)     # a graph's random ops without a generator argument draw from the host's
    out, charge = _charged(lambda: cfn(*dev))
    out = out if isinstance(out, tuple) else (out,)
    return [o.cpu() for o in out], charge


@pytest.fixture(autouse=True)
def _device():
    backend.register()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("case", ["dequant", "mixed", "random"])
def test_generated_steps_match_the_reference_walk(case, monkeypatch):
    fn, inputs = _cases()[case]
    ref, ref_ns = _run(fn, inputs, False, monkeypatch, seed=7)
    got, got_ns = _run(fn, inputs, True, monkeypatch, seed=7)
    assert got_ns == ref_ns
    assert ref_ns > 0
    for r, o in zip(ref, got, strict=True):
        assert r.dtype == o.dtype and r.shape == o.shape
        assert torch.equal(r, o)


def test_dequant_result_against_float64():
    """The generated function computes the right thing, not only the same thing: the 4-bit dequantisation against a
    float64 reference."""
    fn, (a, code, absmax) = _cases()["dequant"]
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(a.to("neuron"), code.to("neuron"), absmax.to("neuron")).cpu()
    idx = torch.stack([a.long() >> 4, a.long() & 0xF], dim=1).reshape(-1)
    ref = (code.double()[idx].view(-1, 8) * absmax.double().view(-1, 1)).reshape(-1, 4)
    assert out.dtype == torch.bfloat16
    # one rounding to bf16 (8 bits of mantissa): within half an ulp
    assert torch.all((out.double() - ref).abs() <= ref.abs() * 2.0 ** -8 + 1e-30)


def test_backward_graph_generated_matches(monkeypatch):
    w0 = torch.randn(6, 3, dtype=torch.float64).float()
    x0 = torch.randn(4, 6, dtype=torch.float64).float()

    def loss(x, w):
        return (torch.tanh(x @ w) ** 2).sum()

    grads, charges = [], []
    for generated in (False, True):
        torch._dynamo.reset()
        monkeypatch.setattr(runtime.CompiledGraph, "GENERATED", generated)
        w = w0.to("neuron").requires_grad_()
        cl = torch.compile(loss, backend="neuron")
        cl(x0.to("neuron"), w).backward()          # compiles forward and backward
        w.grad = None
        xd = x0.to("neuron")
        charges.append(_charged(lambda: cl(xd, w).backward())[1])
        grads.append(w.grad.cpu())
    assert charges[0] == charges[1]
    assert torch.equal(grads[0], grads[1])
    wd, xd = w0.double().requires_grad_(), x0.double()
    (torch.tanh(xd @ wd) ** 2).sum().backward()
    torch.testing.assert_close(grads[1].double(), wd.grad, rtol=1e-5, atol=1e-6)


def test_generated_function_is_made_once_per_graph(monkeypatch):
    """The template walk is done once: the second call reuses the function the first made."""
    fn, inputs = _cases()["dequant"]
    torch._dynamo.reset()
    made = []
    real = runtime._generate

    def counting(graph):
        made.append(graph.name)
        return real(graph)
    monkeypatch.setattr(runtime, "_generate", counting)
    cfn = torch.compile(fn, backend="neuron")
    dev = [t.to("neuron") for t in inputs]
    for _ in range(3):
        cfn(*dev)
    assert len(made) == 1


def test_a_called_graph_copies_without_its_generated_function():
    """A graph that has run (its function generated) copies with the function left out (``__getstate__``); the
    copy's first call makes its own, with the same result."""
    import copy

    fn, inputs = _cases()["dequant"]
    torch._dynamo.reset()
    graphs = []
    real = runtime._generate

    def keep(graph):
        graphs.append(graph)
        return real(graph)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(runtime, "_generate", keep)
        dev = [t.to("neuron") for t in inputs]
        torch.compile(fn, backend="neuron")(*dev)
    g = graphs[0]
    assert g._run is not None
    clone = copy.copy(g)
    assert clone._run is None and g._run is not None
    payloads = [t._p for t in dev]
    assert torch.equal(clone(*payloads)[0].cpu(), g(*payloads)[0].cpu())
    assert clone._run is not None and clone._run is not g._run
