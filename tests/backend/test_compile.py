"""torch.compile(backend="neuron"): a small transformer trained compiled matches eager, with no graph break, fewer
launches and less simulated time; fused kernels are charged their own shape-only simulation; numerics round once per
materialised tensor."""

import copy
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from trnsim import backend
from trnsim.backend.device_state import STATE

from conftest import tiny_decoder


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    import torch._dynamo
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _launches(prof):
    """Device launches in a profile: every eager op is one; a compiled graph is one (its kernels run inside it)."""
    return sum(1 for r in prof.rows if r.kind != "compiled" or r.op.startswith("neuron::graph_launch"))


def _train(model, fn, idx, tgt, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, foreach=True)
    losses, step_prof = [], None
    for s in range(steps):
        with backend.profile_torch() as p:
            logits = fn(idx)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1))
            loss.backward()
        if s == steps - 1:
            step_prof = p
        losses.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, {n: p.detach().cpu() for n, p in model.named_parameters()}, step_prof


def test_transformer_trains_compiled_like_eager(monkeypatch):
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)   # the compiler's default: fp32 matmuls as fp32
    base = tiny_decoder()
    eager = copy.deepcopy(base).to("neuron")
    comp = copy.deepcopy(base).to("neuron")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 64, (2, 16), generator=g).to("neuron")
    tgt = torch.roll(idx, -1, 1)
    cfn = torch.compile(comp, backend="neuron", fullgraph=True)
    l_e, p_e, prof_e = _train(eager, eager, idx, tgt, 3)
    backend.reset_fallback_counts()
    l_c, p_c, prof_c = _train(comp, cfn, idx, tgt, 3)
    assert l_c == pytest.approx(l_e, rel=1e-5)
    for n in p_e:
        assert torch.allclose(p_c[n], p_e[n], rtol=1e-4, atol=1e-5), n
    assert backend.fallback_counts() == {}
    # the hardware's reasons: one launch per graph instead of one per op, fused kernels
    assert _launches(prof_c) < _launches(prof_e) / 10
    assert prof_c.total_ns < prof_e.total_ns
    assert any(r.op.startswith("fused::") for r in prof_c.rows)
    from trnsim.backend.compile import compile_records
    kinds = {r.graph.split("_")[0] for r in compile_records()}
    assert {"forward", "backward"} <= kinds


def test_no_graph_breaks_on_device_tensors():
    import trnsim.backend.compile  # noqa: F401  (what torch.compile(backend="neuron") loads: applies the patch)
    m = tiny_decoder().to("neuron")
    idx = torch.randint(0, 64, (2, 16)).to("neuron")
    ex = torch._dynamo.explain(m)(idx)
    assert ex.graph_break_count == 0 and ex.graph_count == 1


def test_bf16_transformer_compiled_within_dtype_tolerance():
    base = tiny_decoder()
    eager = copy.deepcopy(base).to("neuron").to(torch.bfloat16)
    comp = copy.deepcopy(base).to("neuron").to(torch.bfloat16)
    ref = copy.deepcopy(base).double()
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    cfn = torch.compile(comp, backend="neuron", fullgraph=True)
    y_e = eager(idx.to("neuron")).float().cpu()
    y_c = cfn(idx.to("neuron")).float().cpu()
    y_r = ref(idx).float()
    err_c = (y_c - y_r).abs().max().item()
    err_e = (y_e - y_r).abs().max().item()
    scale = y_r.abs().max().item()
    assert err_c <= 0.05 * scale and err_e <= 0.05 * scale
    assert torch.allclose(y_c, y_e, rtol=0.05, atol=0.05 * scale)


def test_fused_chain_rounds_once_and_costs_its_kernel():
    from trnsim.backend import costs
    from trnsim.kernels.library import fused

    def f(x):
        return torch.exp(x * 3.0) + 1.0

    x = torch.randn(64, 96, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    cf = torch.compile(f, backend="neuron", fullgraph=True)
    xd = x.to("neuron")
    cf(xd)
    t0 = STATE.now_ns
    yd = cf(xd)
    dt = STATE.now_ns - t0
    y = yd.cpu()
    # fp32 on chip, one rounding at the end: y is the bf16 rounding of an fp32 result within a few fp32 ulps of
    # the exact value (x * 3 is exact; exp and the add each round in fp32, and how closely exp does depends on the
    # host's vector math library, so the bound is an error budget, not one CPU's last bit)
    exact = torch.exp(x.double() * 3.0).add(1.0)
    near = [(exact * (1 + k * 4 * 2.0 ** -24)).to(torch.bfloat16) for k in (-1, 1)]
    assert bool(((y == near[0]) | (y == near[1])).all())
    assert bool((y == exact.to(torch.bfloat16)).float().mean() > 0.99)     # almost everywhere the exact rounding
    per_op = torch.exp(x * 3.0) + 1.0                    # eager bf16: a rounding after each op
    assert not torch.equal(y, per_op)                    # (so the check above tells one rounding from several)
    # one launch plus one fused kernel: the shape-only simulation of library.fused.pointwise for these steps
    R, C = costs._rows_cols(64 * 96)
    ns, _, _ = costs._sim(fused.pointwise, [costs._inp((R, C), "bfloat16")],
                          dict(shape=(R, C), dtype="bfloat16", steps=("vs", "act", "vs"), n_out=1), STATE.target)
    assert dt == pytest.approx(costs.launch_ns(STATE.target) + ns)
    # eager pays a launch and an HBM round trip per op
    t0 = STATE.now_ns
    f(xd)
    assert STATE.now_ns - t0 > dt


def test_matmul_epilogue_is_one_kernel(monkeypatch):
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)   # the compiler's default: fp32 matmuls as fp32
    lin = torch.nn.Linear(32, 48).to("neuron")
    x = torch.randn(16, 32).to("neuron")

    def f(x):
        return F.gelu(lin(x))
    cf = torch.compile(f, backend="neuron", fullgraph=True)
    with torch.no_grad():
        y = cf(x)
        with backend.profile_torch() as p:
            cf(x)
    fused_rows = [r.op for r in p.rows if r.op.startswith("fused::")]
    assert fused_rows == ["fused::addmm+gelu"]
    ref = F.gelu(x.cpu().double() @ lin.weight.detach().cpu().double().t() + lin.bias.detach().cpu().double())
    assert torch.allclose(y.cpu().double(), ref, rtol=1e-5, atol=1e-6)


def test_import_does_not_load_dynamo_or_register_backend():
    code = ("import os, sys, torch, trnsim, trnsim.backend as b; b.register(); "
            "assert 'torch._dynamo' not in sys.modules, 'dynamo imported'; "
            "from importlib.metadata import entry_points; "
            "eps = {e.name: e.value for e in entry_points(group='torch_dynamo_backends')}; "
            "assert eps.get('neuron') == 'trnsim.backend.compile:neuron', eps; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_compile_time_in_profile_summary():
    from trnsim.backend.compile import stats

    def f(x):
        return torch.tanh(x) * 3

    x = torch.randn(8, 8).to("neuron")
    with backend.profile_torch() as p:
        torch.compile(f, backend="neuron")(x)
    (rec,) = p.compiles
    assert rec.cache == "miss" and rec.host_s > 0
    assert rec.est_hw_compile_s == pytest.approx(stats.HW_COMPILE_FIXED_S + stats.HW_COMPILE_PER_OP_S * rec.n_ops)
    text = p.summary()
    assert "estimated Neuron compiler" in text and rec.graph in text


def test_compiled_frames_have_no_device_guard_breaks():
    """Dynamo's current-stream guard on a frame of neuron tensors asks the device guard's Python ``type_``; that
    callback runs untraced (compile/patching.py ``untraced``), so compiling a function of neuron tensors compiles
    exactly its own frames: no failed frame, no graph break."""
    from torch._dynamo.utils import counters

    counters.clear()

    def f(x, w):
        return torch.relu(x @ w) + 1

    fn = torch.compile(f, backend="neuron")
    x, w = torch.randn(4, 8).to("neuron"), torch.randn(8, 8).to("neuron")
    out = fn(x, w)
    out2 = fn(x, w)                                   # the guards run again on the second call
    ref = f(x.cpu().double(), w.cpu().double())
    assert torch.allclose(out.cpu().double(), ref, atol=1e-5) and torch.equal(out.cpu(), out2.cpu())
    assert counters["frames"]["total"] == counters["frames"]["ok"] == 1, dict(counters["frames"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    from trnsim.backend.compile import patching
    assert any(n == "type_" for _, n in patching._UNTRACED)


def test_compile_patches_each_applied():
    """The two private patches the compile backend adds to trnsim/backend/patches.py (torch 2.13), each checked for
    its effect."""
    import torch.nn.attention.flex_attention as fa
    from torch._dynamo.variables.builder import VariableBuilder

    import trnsim.backend.compile  # noqa: F401
    from trnsim.backend import patches
    from trnsim.backend.tensor import NeuronTensor
    assert {"dynamo_wrap_tensor", "flex_attention_device"} <= set(patches.APPLIED)
    for trace_numpy in (True, False):
        assert VariableBuilder._type_dispatch_impl(trace_numpy)[NeuronTensor] is VariableBuilder.wrap_tensor
    q = torch.randn(1, 1, 4, 8)
    assert fa._validate_device(q.to("neuron"), q.to("neuron"), q.to("neuron")) is None
    qm = q.to("meta")
    with pytest.raises(ValueError, match="only supported on CUDA, CPU"):
        fa._validate_device(qm, qm, qm)                          # other devices keep torch's check
    patches.dynamo_wrap_tensor(NeuronTensor)                     # idempotent
    assert patches.APPLIED.count("dynamo_wrap_tensor") == 1
