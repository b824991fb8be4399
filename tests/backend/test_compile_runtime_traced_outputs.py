"""A compiled graph called on shape-only payloads makes its outputs from the trace (``compile/traced_outputs.py``)
instead of running its steps: the same output shapes, strides and dtypes, the same gradients' metadata and the same
charge as running the steps (``CompiledGraph.TRACED_OUTPUTS = False``); the estimator's compiled template layers
(plain and sequence parallel, with their collectives) cost exactly the same either way. Outputs that are views (of
an input, of another output) share storage as a run makes them share it. Graphs where a run could differ keep
running their steps: a random op, an op mutating an input."""

import pytest
import torch

from trnsim import backend
from trnsim.backend.compile import runtime, traced_outputs
from trnsim.backend.device_state import STATE
from trnsim.backend.shape_only import device_target, shape_only_tensor
from trnsim.cost import step
from trnsim.cost.models import ModelSpec
from trnsim.targets import get_target

SPEC = ModelSpec(name="tiny-traced-outputs", hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32, ffn=512,
                 vocab=2048)


@pytest.fixture(autouse=True)
def _device():
    backend.register()
    yield
    torch._dynamo.reset()


def _block(x, w1, w2):
    h = torch.nn.functional.silu(x @ w1) * (x @ w1).sigmoid()
    s = torch.softmax(h.float(), dim=-1).to(x.dtype)
    y = (s @ w2).transpose(0, 1).contiguous()
    v = y[:, 1:5]
    return y.float().sum(dim=-1), y.permute(1, 0, 2), h.amax(), v, w1.t(), v


def _meta(t):
    if isinstance(t, torch.Tensor):
        return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype
    return t


def _sharing(ts):
    """Which of the tensors ``ts`` (device tensors) share a storage, as a matrix of booleans."""
    st = [t._p.untyped_storage()._cdata for t in ts]
    return [[a == b for b in st] for a in st]


def _run_block(traced, monkeypatch):
    """Compile ``_block`` afresh, call it forward and backward on shape-only tensors; returns the outputs' and the
    gradients' metadata, the charge of the second call (forward + backward), which outputs and inputs share a
    storage, whether a view output twice is one tensor, and how many calls took the trace."""
    torch._dynamo.reset()
    monkeypatch.setattr(runtime.CompiledGraph, "TRACED_OUTPUTS", traced)
    taken = [0]
    real = traced_outputs.outputs

    def counting(*a):
        taken[0] += 1
        return real(*a)
    monkeypatch.setattr(traced_outputs, "outputs", counting)
    with device_target("trn2"):
        x = shape_only_tensor((4, 96, 128), torch.bfloat16, requires_grad=True)
        w1 = shape_only_tensor((128, 256), torch.bfloat16, requires_grad=True)
        w2 = shape_only_tensor((256, 64), torch.bfloat16, requires_grad=True)
        fn = torch.compile(_block, backend="neuron")
        fn(x, w1, w2)
        STATE.now_ns, before = 0.0, STATE.now_ns
        try:
            outs = fn(x, w1, w2)
            sharing = _sharing(list(outs) + [x, w1, w2])
            same = outs[5] is outs[3]                   # a view output twice: one tensor
            (outs[0].sum() + outs[1].float().mean() + outs[2].float() + outs[3].float().sum()).backward()
            charge = STATE.now_ns
        finally:
            STATE.now_ns = before + STATE.now_ns
    return [_meta(o) for o in outs], [_meta(t.grad) for t in (x, w1, w2)], charge, sharing, same, taken[0]


def test_outputs_made_from_the_trace_match_running_the_steps(monkeypatch):
    run = _run_block(False, monkeypatch)
    traced = _run_block(True, monkeypatch)
    assert run[5] == 0 and traced[5] >= 3          # forward twice and the backward took the trace
    assert traced[:5] == run[:5]
    assert traced[3][3][1] and traced[3][4][7]      # two views of one value, a view of an input: shared storages


@pytest.mark.parametrize("tp", [1, 2], ids=["plain", "sequence-parallel"])
def test_a_compiled_template_layer_costs_the_same_either_way(tp, monkeypatch):
    from trnsim.cost.estimator import TpCollectives, _topology
    comm = TpCollectives(_topology("trn2.48xlarge", 1, 2), (0, 1), "trn2.48xlarge x1", 2) if tp > 1 else None
    costs, taken = [], []
    real = traced_outputs.outputs
    monkeypatch.setattr(traced_outputs, "outputs", lambda *a: taken.append(1) or real(*a))
    for traced in (False, True):
        torch._dynamo.reset()
        monkeypatch.setattr(runtime.CompiledGraph, "TRACED_OUTPUTS", traced)
        STATE.now_ns, before = 0.0, STATE.now_ns        # the same clock readings both times (float differences)
        try:
            costs.append(step._run(*step._layer_job(SPEC, "dense", tp, 1, 2, 256, torch.bfloat16,
                                                    get_target("trn2"), "bf16", True, tp > 1, comm)))
        finally:
            STATE.now_ns = before + STATE.now_ns
    assert costs[0] == costs[1]
    assert len(taken) == 2                  # the second layer run's forward and backward took the trace
    assert costs[0].graphs == 2 and costs[0].saved_bytes > 0


def _template_of(fn, *shapes):
    """The traced-outputs template of the forward graph ``fn`` compiles to (on shape-only inputs)."""
    graphs = []
    real = runtime.CompiledGraph.__init__

    def init(self, *a, **k):
        real(self, *a, **k)
        graphs.append(self)
    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as mp, device_target("trn2"):
        mp.setattr(runtime.CompiledGraph, "__init__", init)
        torch.compile(fn, backend="neuron")(*[shape_only_tensor(s, torch.float32) for s in shapes])
    assert len(graphs) == 1
    return graphs[0]._traced_outputs


def test_graphs_whose_run_could_differ_keep_running_their_steps():
    assert _template_of(lambda x: (x * 2).exp(), (8, 16)) is not None
    assert _template_of(lambda x: x + torch.rand_like(x), (8, 16)) is None           # draws from the generator
    assert _template_of(lambda x: x.mul_(2).exp(), (8, 16)) is None                  # mutates its input
