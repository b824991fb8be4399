"""The sequence-parallel reshard as a custom op (``trnsim_coll::seq_reshard``, issue 30): a compiled TP2 sequence-
parallel layer is one graph with its collectives inside; the op's fake agrees with its implementation; its values on
``neuron`` tensors (eager and compiled) are a float64 reference's; the compile backend prices each in-graph
collective with the collectives model and charges only what the graph's order and dependencies leave exposed."""

import pytest
import torch

from trnsim.backend import seq_reshard as SR
from trnsim.cost import estimator as E
from trnsim.cost import layers, step
from trnsim.cost.models import ModelSpec
from trnsim.targets import get_target

GQA = ModelSpec(name="tiny-sp-gqa", hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32, ffn=512, vocab=2048)
SEQ = 256


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


def _pricer():
    topo = E._topology("trn2.48xlarge", 1, 2)
    par = E.Parallelism(dp=32, tp=2, micro_batch=1)
    return E.TpCollectives(topo, E.rank_layout(par)["tp"][0], "trn2.48xlarge x1", 2), topo


def _reference(x, group, gather):
    """float64: the all-gather of ``group`` ranks holding ``x`` each; the reduce-scatter of ``group`` ranks holding
    ``x`` each, rank 0's slice."""
    x = x.double()
    if gather:
        return torch.cat([x] * group, dim=1)
    s = x.shape[1] // group
    return sum(x[:, :s] for _ in range(group))


# -- one graph --------------------------------------------------------------------------------------------------
def test_a_sequence_parallel_layer_is_one_graph_with_its_collectives_inside(graphs):
    from torch._dynamo.utils import counters
    comm, _ = _pricer()
    counters.clear()
    lc = step._run(*step._layer_job(GQA, "dense", 2, 1, 1, SEQ, torch.bfloat16, get_target("trn2"), "bf16", True,
                                    True, comm))
    assert dict(counters["graph_break"]) == {} and counters["stats"]["unique_graphs"] == 1
    assert lc.graphs == 2
    fw = [g for g in graphs if g.name.startswith("forward")]
    bw = [g for g in graphs if g.name.startswith("backward")]
    assert len(fw) == len(bw) == 1

    def colls(g):
        return [k["label"] for k in g.plan["kernels"] if k["kind"] == "collective"]
    # forward: all-gather before attention and the MLP, reduce-scatter after each; backward: the opposite ones
    assert sorted(colls(fw[0])) == ["collective:all_gather[2 ranks]"] * 2 + ["collective:reduce_scatter[2 ranks]"] * 2
    assert sorted(colls(bw[0])) == sorted(colls(fw[0]))
    # the exposed collective time is what the layer's comm fields hold, apart from its compute
    exp_fw = sum(k["ns"] for k in fw[0].plan["kernels"] if k["kind"] == "collective")
    exp_bw = sum(k["ns"] for k in bw[0].plan["kernels"] if k["kind"] == "collective")
    assert lc.comm_fwd_ns == pytest.approx(exp_fw, rel=1e-9) and lc.comm_bwd_ns == pytest.approx(exp_bw, rel=1e-9)
    assert exp_fw > 0


# -- the fake and the implementation ------------------------------------------------------------------------------
@pytest.mark.parametrize("gather", [True, False], ids=["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
def test_the_fake_gives_the_implementations_shapes_dtypes_and_strides(gather, dtype, layout):
    from torch._subclasses.fake_tensor import FakeTensorMode
    base = torch.randn(2, 8, 6).to(dtype)
    x = {"contiguous": base, "transposed": base.transpose(0, 1).contiguous().transpose(0, 1),
         "expanded": base[:1].expand(2, 8, 6)}[layout]
    real = SR.seq_reshard(x, 2, gather)
    with FakeTensorMode() as mode:
        fake = SR.seq_reshard(mode.from_tensor(x), 2, gather)
    assert fake.shape == real.shape == SR.out_shape(tuple(x.shape), 2, gather)
    assert fake.dtype == real.dtype == dtype
    assert fake.stride() == real.stride()
    torch.library.opcheck(SR.op(), (x, 2, gather), test_utils=("test_schema", "test_faketensor"))


def test_bad_input_is_refused_naming_what_and_the_limit():
    with pytest.raises(ValueError, match=r"sequence of 7 over 2 ranks"):
        SR.seq_reshard(torch.zeros(1, 7, 4), 2, False)
    with pytest.raises(ValueError, match=r"\[batch, seq, hidden\].*\[7, 4\]"):
        SR.seq_reshard(torch.zeros(7, 4), 2, True)


# -- values on neuron tensors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("factor", [4, 0.25], ids=["all_gather", "reduce_scatter"])
def test_values_on_neuron_tensors_equal_a_float64_reference(compiled, factor):
    torch.manual_seed(0)
    group, gather = (4, True) if factor > 1 else (4, False)
    x = torch.randn(2, 8, 6, dtype=torch.float64)
    s_out = 8 * group if gather else 8 // group
    g = torch.randn(2, s_out, 6, dtype=torch.float64)
    xd = x.float().to("neuron").requires_grad_(True)

    def f(t):
        return layers._seq(t, factor) * 1.5

    if compiled:
        torch._dynamo.reset()
        f = torch.compile(f, backend="neuron", fullgraph=True)
    out = f(xd)
    out.backward(g.float().to("neuron"))
    ref = _reference(x, group, gather) * 1.5
    assert torch.allclose(out.detach().cpu().double(), ref, rtol=1e-6, atol=1e-6)
    # the backward is the opposite collective of the gradient (every rank's gradient equal to this rank's)
    gref = _reference(g * 1.5, group, not gather)
    assert torch.allclose(xd.grad.cpu().double(), gref, rtol=1e-6, atol=1e-6)


# -- the in-graph collective's time ------------------------------------------------------------------------------
def _compile_and_run(fn, *args):
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron", fullgraph=True)(*args)
    return out


def test_an_in_graph_collective_is_priced_by_the_collectives_model(graphs):
    from trnsim.backend.compile import collective
    from trnsim.collectives import collective_time
    comm, topo = _pricer()
    x = torch.randn(1, 64, 32).to("neuron")
    with collective.pricing(comm):
        _compile_and_run(lambda t: (SR.seq_reshard(t, 2, True), SR.seq_reshard(t, 2, False)), x)
    ks = {k["label"]: k for k in graphs[-1].plan["kernels"] if k["kind"] == "collective"}
    group = comm.group
    ag = collective_time("all_gather", 1 * 128 * 32 * 4, topo, nranks=topo.ranks, group=group).time_ns
    rs = collective_time("reduce_scatter", 1 * 64 * 32 * 4, topo, nranks=topo.ranks, group=group).time_ns
    assert ks["collective:all_gather[2 ranks]"]["comm_ns"] == ag
    assert ks["collective:reduce_scatter[2 ranks]"]["comm_ns"] == rs
    assert ks["collective:all_gather[2 ranks]"]["bytes"] == 1 * 128 * 32 * 4      # the gathered tensor's bytes
    # nothing else in the graph: both exposed, one after the other on the collective queue
    assert ks["collective:all_gather[2 ranks]"]["ns"] + ks["collective:reduce_scatter[2 ranks]"]["ns"] == \
        pytest.approx(ag + rs, rel=1e-12)


class _Fixed:
    """A pricer of a fixed time per collective (the overlap rule's test needs a collective longer than a kernel)."""
    key = "fixed 1 ms"
    compute_scale = 0.5

    def ns(self, op, nbytes, group):
        return 1e6


def test_a_collective_overlaps_only_the_kernels_after_it_that_do_not_depend_on_it(graphs):
    from trnsim.backend.compile import collective
    x = torch.randn(1, 64, 32).to("neuron")
    a = torch.randn(256, 256).to("neuron")
    with collective.pricing(_Fixed()):
        # the matmul comes after the all-gather in the graph and does not need it: it runs during it
        _compile_and_run(lambda t, m: (SR.seq_reshard(t, 2, True), m @ m), x, a)
        plan = graphs[-1].plan
        mm = [k for k in plan["kernels"] if k["kind"] == "matmul"]
        c = [k for k in plan["kernels"] if k["kind"] == "collective"]
        assert len(mm) == 1 and len(c) == 1 and mm[0]["ns"] > 0
        assert c[0]["ns"] == pytest.approx(1e6 - 0.5 * mm[0]["ns"], rel=1e-12)   # the kernel at 1/LNC of its time
        # the matmul needs the all-gather's output: nothing overlaps, the whole collective is exposed
        _compile_and_run(lambda t, w: SR.seq_reshard(t, 2, True) @ w, x, torch.randn(32, 32).to("neuron"))
        c = [k for k in graphs[-1].plan["kernels"] if k["kind"] == "collective"]
        assert c[0]["ns"] == pytest.approx(1e6, rel=1e-12)
        # the matmul comes first in the graph: the in-order compute queue has run it before the collective starts
        _compile_and_run(lambda t, m: (m @ m, SR.seq_reshard(t.sin(), 2, True)), x, a)
        c = [k for k in graphs[-1].plan["kernels"] if k["kind"] == "collective"]
    assert c[0]["ns"] > 0.99e6


def test_unpriced_collectives_cost_nothing_and_say_so(graphs):
    x = torch.randn(1, 64, 32).to("neuron")
    _compile_and_run(lambda t: SR.seq_reshard(t, 2, True) * 2, x)
    c = [k for k in graphs[-1].plan["kernels"] if k["kind"] == "collective"]
    assert c[0]["label"].endswith("unpriced") and c[0]["ns"] == 0 and c[0]["comm_ns"] == 0


# -- the estimate -------------------------------------------------------------------------------------------------
def test_a_compiled_sequence_parallel_estimate_charges_the_graphs_exposed_collectives():
    eager = E.estimate(GQA, "trn2.48xlarge", 1, tp=2, seq=SEQ, global_batch=64)
    comp = E.estimate(GQA, "trn2.48xlarge", 1, tp=2, seq=SEQ, global_batch=64, compiled=True)
    key = "comm: tp all_gather/reduce_scatter (sequence parallel)"
    comm, topo = _pricer()
    common = dict(micro_batch=1, seq=SEQ, target=get_target("trn2"), compiled=True, sp=True, comm=comm)
    lc = step.layer_cost(GQA, "dense", tp=2, **common)
    hc = step.head_cost(GQA, tp=2, **common)
    mbs = comp.global_batch // comp.parallelism.dp
    per_mb = GQA.layers * (lc.comm_fwd_ns + lc.comm_bwd_ns) + hc.comm_fwd_ns + hc.comm_bwd_ns
    assert comp.breakdown[key] == pytest.approx(mbs * per_mb * 1e-9, rel=1e-9)
    # never more than the eager estimate's (every collective exposed), and the compiled step stays faster
    assert comp.breakdown[key] <= eager.breakdown[key] * (1 + 1e-9)
    assert comp.step_time_s < eager.step_time_s
