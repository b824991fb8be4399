"""NKI kernel calls and NKI custom ops inside ``torch.compile`` (issue 21): one graph node each (dynamo does not trace
the kernel body) under ``backend="neuron"`` and ``aot_eager`` with ``fullgraph=True``, run on the device between the
compiled regions; and vLLM's CPU mode (``NKI_SIMULATOR=1``, CPU tensors) in eager and compiled code."""

import os
import subprocess
import sys

import pytest
import torch

import trnsim
import trnsim.backend.compile  # noqa: F401  (dynamo's patch for device tensors, as backend="neuron" applies it)
from torch._dynamo.testing import CompileCounterWithBackend

import nki_op_kernels as K  # tests/backend/ is on sys.path (pytest rootdir-relative import)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@torch.library.custom_op("trnsim_test21c::square", mutates_args=())
def square(x: torch.Tensor) -> torch.Tensor:
    return K.mul(x, x)


@square.register_fake
def _(x):
    return torch.empty_like(x)


square.register_autograd(lambda ctx, g: K.mul(g, K.scale(ctx.saved_tensors[0], 2.0)),
                         setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


@torch.library.custom_op("trnsim_test21c::add_into", mutates_args=("x",))
def add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    K.add_into(x, y)


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _calls(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def f_kernels(a, b):
    return K.scale(K.mul(a, b) + 1.0, 3.0) - a


@pytest.mark.parametrize("backend", ["neuron", "aot_eager"])
def test_kernel_calls_are_one_graph_node_each(backend):
    a, b = _r(16, 32), _r(16, 32, seed=1)
    cnt = CompileCounterWithBackend(backend)
    cf = torch.compile(f_kernels, backend=cnt, fullgraph=True)
    da, db = a.to("neuron"), b.to("neuron")
    with trnsim.profile_torch() as p:
        out = cf(da, db)
    ref = (a.double() * b.double() + 1) * 3 - a.double()
    assert (out.cpu().double() - ref).abs().max() < 1e-5
    assert cnt.frame_count == 1
    calls = _calls(cnt.graphs[0])
    assert calls.count("trnsim_nki.kernel_call") == 2
    assert not any("dma_copy" in c or "nki" in c.replace("trnsim_nki", "") for c in calls)   # body not traced
    ops = [r.op for r in p.rows]
    assert ops.count("nki::mul") == 1 and ops.count("nki::scale") == 1
    assert trnsim.backend.fallback_counts() == {}
    if backend == "neuron":
        assert any(o.startswith("neuron::graph_launch") for o in ops)
    # same shapes again: no recompile, kernel specialisations are cache hits
    cf(da, db)
    assert cnt.frame_count == 1


@pytest.mark.parametrize("backend", ["neuron", "aot_eager"])
def test_nki_custom_op_with_backward_inside_compile(backend):
    x = _r(8, 16)

    def g(t):
        return (square(t) * 2.0).sum()
    cnt = CompileCounterWithBackend(backend)
    cg = torch.compile(g, backend=cnt, fullgraph=True)
    dx = x.to("neuron").requires_grad_()
    loss = cg(dx)
    loss.backward()
    assert abs(loss.item() - 2 * float((x.double() ** 2).sum())) < 1e-3
    assert (dx.grad.cpu().double() - 4 * x.double()).abs().max() < 1e-5
    assert "trnsim_test21c.square.default" in _calls(cnt.graphs[0])
    assert trnsim.backend.fallback_counts() == {}


@pytest.mark.parametrize("backend", ["neuron", "aot_eager"])
def test_mutating_nki_op_inside_compile(backend):
    def h(x, y):
        add_into(x, y)
        return x * 2.0
    x = torch.zeros(8, 4).to("neuron")
    y = torch.ones(8, 4).to("neuron")
    out = torch.compile(h, backend=backend, fullgraph=True)(x, y)
    assert torch.equal(out.cpu(), torch.full((8, 4), 2.0))
    assert torch.equal(x.cpu(), torch.ones(8, 4))          # the caller sees the write


CPU_MODE = r"""
import sys
sys.path.insert(0, HERE)
import torch
import nki_op_kernels as K
from torch._dynamo.testing import CompileCounterWithBackend
a, b = torch.randn(16, 32), torch.randn(16, 32)
y = K.mul(a, b)
assert type(y) is torch.Tensor and y.device.type == "cpu", (type(y), y.device)
assert (y.double() - a.double() * b.double()).abs().max() < 1e-5
for be in ("eager", "aot_eager"):
    torch._dynamo.reset()
    cnt = CompileCounterWithBackend(be)
    f = torch.compile(lambda a, b: K.scale(K.mul(a + 1.0, b), 0.5), backend=cnt, fullgraph=True)
    o = f(a, b)
    assert o.device.type == "cpu"
    assert (o.double() - (a.double() + 1) * b.double() * 0.5).abs().max() < 1e-5
    calls = [str(n.target) for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert calls.count("trnsim_nki.kernel_call") == 2, calls
print("ok")
"""


def test_cpu_tensors_under_nki_simulator_eager_and_compiled(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHNEURON_TARGET",)}
    env["NKI_SIMULATOR"] = "1"
    r = subprocess.run([sys.executable, "-c", CPU_MODE.replace("HERE", repr(HERE))], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")
