"""The compiled-graph runtime's shortcuts give what the steps they stand for give.

* ``runtime._gather``: ``aten.index.Tensor`` with one integer index tensor run as ``index_select``; every other form,
  and negative or out-of-range indices, as the op itself.
* ``runtime._direct_steps``: the compute steps called without ``_compute`` are exactly those where its upcast and
  rounding change nothing; a graph mixing bf16 values kept in fp32 on chip with fp32 ones gives, bit for bit, the
  reference walk's result (``CompiledGraph._interpret``) and charges the same.
"""

import pytest
import torch

from trnsim import backend
from trnsim.backend.compile import runtime

_index = torch.ops.aten.index.Tensor


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a, b)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_gather_matches_index_on_a_table_and_on_rows(idx_dtype):
    g = torch.Generator().manual_seed(1)
    table = torch.randn(16, generator=g)
    rows = torch.randn(7, 3, generator=g).to(torch.bfloat16)
    i = torch.randint(0, 7, (50,), generator=g).to(idx_dtype)
    _same(runtime._gather(table, [i]), _index(table, [i]))
    _same(runtime._gather(rows, [i]), _index(rows, [i]))
    _same(runtime._gather(table, (i,)), _index(table, [i]))


def test_gather_leaves_other_forms_to_the_op():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 4, generator=g)
    neg = torch.tensor([-1, 0, -5, 4])                   # index wraps negatives; index_select would refuse them
    _same(runtime._gather(x, [neg]), _index(x, [neg]))
    mask = torch.tensor([True, False, True, False, True])
    _same(runtime._gather(x, [mask]), _index(x, [mask]))
    two = torch.tensor([[0, 1], [2, 3]])                 # a 2-D index
    _same(runtime._gather(x, [two]), _index(x, [two]))
    pair = [torch.tensor([0, 4]), torch.tensor([1, 3])]  # one index per dimension
    _same(runtime._gather(x, pair), _index(x, pair))
    _same(runtime._gather(x, [None, torch.tensor([3, 0])]), _index(x, [None, torch.tensor([3, 0])]))
    with pytest.raises(IndexError):
        runtime._gather(x, [torch.tensor([5])])          # out of range: the op's own error


def _mixed_precision(x, w, b):
    h = x * 2 + 1                 # bf16 values, kept in fp32 inside the fused kernel
    y = h.float() @ w             # read as fp32 from the on-chip value
    z = torch.relu(y + b) * 0.5   # fp32 throughout: these steps can be called directly
    return z.to(torch.bfloat16), z.sum()


from test_compile_runtime_generated import _charged  # noqa: E402  (tests/backend on sys.path)


@pytest.fixture(autouse=True)
def _device():
    backend.register()
    yield
    torch._dynamo.reset()


def compile_recording(fn, generated, monkeypatch, graphs):
    """``fn`` compiled afresh for neuron, with the generated runner on or off; each graph the runtime generates code
    for is appended to ``graphs``."""
    torch._dynamo.reset()
    monkeypatch.setattr(runtime.CompiledGraph, "GENERATED", generated)
    real = runtime._generate

    def keep(graph):
        graphs.append(graph)
        return real(graph)
    monkeypatch.setattr(runtime, "_generate", keep)
    return torch.compile(fn, backend="neuron")


def _compiled(fn, inputs, generated, monkeypatch, graphs):
    cfn = compile_recording(fn, generated, monkeypatch, graphs)
    dev = [t.to("neuron") for t in inputs]
    cfn(*dev)
    out, ns = _charged(lambda: cfn(*dev))
    return [o.cpu() for o in out], ns


def test_direct_steps_match_the_reference_walk_with_values_kept_in_fp32(monkeypatch):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 6, generator=g).to(torch.bfloat16)
    w = torch.randn(6, 5, generator=g)
    b = torch.randn(5, generator=g)
    ref, ref_ns = _compiled(_mixed_precision, (x, w, b), False, monkeypatch, [])
    graphs = []
    got, got_ns = _compiled(_mixed_precision, (x, w, b), True, monkeypatch, graphs)
    assert got_ns == ref_ns > 0
    for r, o in zip(ref, got, strict=True):
        _same(r, o)
    (graph,) = graphs
    direct = runtime._direct_steps(graph)
    kinds = {i: (mode, v.dtype) for i, fn, a, kw, mode, v in graph.steps if mode in (1, 2)}
    # the bf16 steps (and the steps reading a bf16 value kept in fp32) are never called directly...
    assert all(kinds[i][1] == torch.float32 for i in direct)
    assert any(dt == torch.bfloat16 for mode, dt in kinds.values())
    assert "_compute(" in graph._run.source or "_compute_serial(" in graph._run.source
    # ... and against float64: one rounding of h to bf16 is not made (it stays in fp32 on chip)
    h = x.double() * 2 + 1
    z = torch.relu(h @ w.double() + b.double()) * 0.5
    torch.testing.assert_close(got[1].double(), z.sum(), rtol=1e-5, atol=1e-5)


def test_a_float32_graph_calls_its_steps_directly(monkeypatch):
    def f(a, c):
        return (torch.exp(a) * c + 1).sum(dim=0)
    g = torch.Generator().manual_seed(4)
    a, c = torch.randn(8, 3, generator=g), torch.randn(3, generator=g)
    graphs = []
    got, _ = _compiled(lambda a, c: (f(a, c),), (a, c), True, monkeypatch, graphs)
    (graph,) = graphs
    assert "_compute(" not in graph._run.source
    assert runtime._direct_steps(graph)
    torch.testing.assert_close(got[0].double(), f(a.double(), c.double()), rtol=1e-6, atol=1e-6)
