"""Fallback, numerics against float64 references, simulated time, profiling, library kernels, patches."""

import warnings

import numpy as np
import pytest
import torch

import trnsim
from trnsim import backend
from trnsim.backend import patches
from trnsim.kernels.jit import run_kernel
from trnsim.kernels.library import elementwise, matmul_resident, normalization, reduction, softmax


def test_fallback_warns_once_counts_and_is_right():
    backend.reset_fallback_counts()
    x = torch.rand(5) * 1.8 - 0.9
    xn = x.to("neuron")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y1 = torch.special.erfinv(xn)
        y2 = torch.erfinv(xn)
    msgs = [str(m.message) for m in w if issubclass(m.category, backend.NeuronFallbackWarning)]
    assert len(msgs) <= 1      # once per op and process (an earlier test in this process may have warned)
    if msgs:
        assert msgs[0] == ("aten::erfinv is not implemented for the neuron device and ran on the CPU; on hardware "
                           "this copies to the host")
    assert y1.device.type == "neuron" and torch.equal(y1.cpu(), torch.erfinv(x)) and torch.equal(y2.cpu(), y1.cpu())
    assert backend.fallback_counts() == {"aten::erfinv": 2}
    backend.set_fallback_mode("error")
    with pytest.raises(backend.NeuronFallbackError, match="aten::erfinv is not implemented"):
        torch.erfinv(xn)


def test_fallback_error_in_backward_raises_on_the_caller():
    x = torch.rand(3, device="neuron", requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.lgamma(x + 1).sum()
    backend.set_fallback_mode("error")
    with pytest.raises(backend.NeuronFallbackError, match="aten::digamma"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y.backward()


def _bf16_round(a64):
    return torch.from_numpy(a64).to(torch.float32).to(torch.bfloat16)


def test_bf16_matmul_accumulates_in_fp32_rounds_once():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 512, generator=g).to(torch.bfloat16)
    b = torch.randn(512, 32, generator=g).to(torch.bfloat16)
    ref64 = a.double().numpy() @ b.double().numpy()
    got = (a.to("neuron") @ b.to("neuron")).cpu()
    assert got.dtype == torch.bfloat16
    # fp32 accumulation then one rounding: within one bf16 ulp of the float64 result rounded to bf16
    ulp = torch.from_numpy(np.abs(ref64)).float() * 2.0 ** -7 + 1e-30
    assert ((got.float() - _bf16_round(ref64).float()).abs() <= ulp).all()


def test_bf16_reductions_and_softmax_against_float64():
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(8, 4096, generator=g) + 3).to(torch.bfloat16)
    x64 = x.double().numpy()
    xn = x.to("neuron")
    s = xn.sum(-1).cpu()
    assert s.dtype == torch.bfloat16
    assert torch.equal(s, _bf16_round(x64.sum(-1)))            # one rounding of an fp32 sum
    sm = torch.softmax(xn, -1).cpu().double().numpy()
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    assert np.allclose(sm, e / e.sum(-1, keepdims=True), rtol=2 ** -7, atol=1e-6)
    w = torch.randn(4096, generator=g).to(torch.bfloat16)
    rn = torch.nn.functional.rms_norm(xn, (4096,), w.to("neuron"), 1e-6).cpu().double().numpy()
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w.double().numpy()
    assert np.allclose(rn, ref, rtol=2 ** -7, atol=2 ** -7)


@pytest.mark.parametrize("kernel,args,kw,ref", [
    (elementwise.unary, ((200, 300),), {"op": "tanh"}, lambda x: np.tanh(x)),
    (matmul_resident.resident_matmul, ((256, 384), (256, 1024)), {}, lambda at, b: at.T @ b),
    (elementwise.binary, ((200, 300), (200, 300)), {"op": "multiply"}, lambda x, y: x * y),
    (reduction.row_reduce, ((130, 5000),), {"op": "add"}, lambda x: x.sum(1, keepdims=True)),
    (reduction.row_sum_of_squares, ((40, 5000),), {}, lambda x: (x * x).sum(1, keepdims=True)),
    (softmax.row_softmax, ((150, 257),), {}, lambda x: np.exp(x - x.max(1, keepdims=True)) /
     np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
])
def test_library_kernels_against_float64(kernel, args, kw, ref):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in args]
    out = run_kernel(kernel, tuple(xs), kw).outputs
    r = ref(*[x.astype(np.float64) for x in xs])
    assert np.allclose(out, r, rtol=1e-5, atol=1e-4)


def test_norm_kernels_against_float64():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 700)).astype(np.float32)
    w = np.repeat(rng.standard_normal((1, 700)), 128, 0).astype(np.float32)
    b = np.repeat(rng.standard_normal((1, 700)), 128, 0).astype(np.float32)
    x6 = x.astype(np.float64)
    got = run_kernel(normalization.rms_norm, (x, w), {"eps": 1e-6}).outputs
    assert np.allclose(got, x6 / np.sqrt((x6 ** 2).mean(1, keepdims=True) + 1e-6) * w[0], rtol=1e-5, atol=1e-5)
    got = run_kernel(normalization.layer_norm, (x, w, b), {"eps": 1e-5}).outputs
    ref = (x6 - x6.mean(1, keepdims=True)) / np.sqrt(x6.var(1, keepdims=True) + 1e-5) * w[0] + b[0]
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_simulated_time_profile_rows_and_events():
    x = torch.randn(256, 512, device="neuron")
    w = torch.randn(512, 256, device="neuron")
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with trnsim.profile_torch() as p:
            start.record()
            y = torch.relu(x @ w)                 # native, library kernels
            z = torch.special.erfinv(y * 0)       # fallback
            e = torch.nn.functional.embedding(torch.tensor([1, 2], device="neuron"), w)   # estimated
            end.record()
    ops = [r.op for r in p.rows]
    assert ops[:2] == ["aten::mm", "aten::relu"] and "aten::erfinv" in ops and "aten::embedding" in ops
    kinds = {r.op: r.kind for r in p.rows}
    assert kinds["aten::mm"] == "native" and kinds["aten::erfinv"] == "fallback"
    assert kinds["aten::embedding"] == "estimated"
    mm = p.rows[0]
    assert mm.flops == 2 * 256 * 512 * 256 and mm.shapes == ((256, 512), (512, 256)) and mm.dtypes[0] == "float32"
    assert mm.source.endswith(f"test_device_ops.py:{test_simulated_time_profile_rows_and_events.__code__.co_firstlineno + 8}")
    assert all(r.end_ns >= r.start_ns for r in p.rows)
    assert start.elapsed_time(end) == pytest.approx(p.total_ns / 1e6)
    tl = p.timeline()
    assert len(tl) == len(p.rows) and tl.total_ns == pytest.approx(p.total_ns)
    assert "aten::mm" in p.summary() and p.to_chrome_trace()["traceEvents"]
    del z, e


def test_matmul_cost_is_memoised_and_scales():
    from trnsim.backend import costs
    from trnsim.targets import TRN2
    a = costs.matmul_cost(TRN2, 512, 512, 512, "bfloat16")
    assert costs.matmul_cost(TRN2, 512, 512, 512, "bfloat16") == a
    big = costs.matmul_cost(TRN2, 1024, 1024, 1024, "bfloat16")
    assert big[0] > 2 * a[0] and big[1] == 8 * a[1]          # 8x the flops; fixed DMA costs amortise
    assert costs.matmul_cost(TRN2, 512, 512, 512, "bfloat16", batch=3)[0] == pytest.approx(3 * a[0])


def test_patches_each_applied():
    assert set(patches.APPLIED) >= {"foreach_supported_types", "accelerator.synchronize", "pin_memory",
                                    "autograd._engine_run_backward", "_has_compatible_shallow_copy_type",
                                    "Tensor.data", "UntypedStorage.device", "BackwardCFunction.apply"}
    from torch.optim.optimizer import _foreach_supported_types as a
    from torch.utils._foreach_utils import _foreach_supported_types as b
    from trnsim.backend.tensor import NeuronTensor
    assert NeuronTensor in a and NeuronTensor in b
    assert torch.accelerator.synchronize("neuron") is None
    t = torch.ones(2)
    assert t.pin_memory() is t
    assert torch.autograd._engine_run_backward._trnsim_orig is not None
    d = torch.ones(2, device="neuron")
    assert torch._has_compatible_shallow_copy_type(t, d) and torch._has_compatible_shallow_copy_type(d, t)
    assert not torch._has_compatible_shallow_copy_type(torch.ones(2, device="meta"), d)
    u = torch.zeros(2)
    u.data = d
    assert u.device.type == "neuron"
    assert d.untyped_storage().device.type == "neuron" and torch.ones(1).untyped_storage().device.type == "cpu"
    assert torch.UntypedStorage(2, device="neuron").device.type == "neuron"
    from torch.autograd.function import BackwardCFunction
    assert BackwardCFunction.apply._trnsim_orig is not None


def test_inplace_view_ops_update_the_tensor_shape():
    """squeeze_/unsqueeze_/t_ change the device tensor's own metadata (found by the conformance sweep through
    matmul(vector, matrix) with autograd, which squeezes in place)."""
    x = torch.randn(1, 4)
    d = x.to("neuron")
    d.squeeze_(0)
    assert d.shape == (4,) and torch.equal(d.cpu(), x.squeeze(0))
    d.unsqueeze_(1)
    assert d.shape == (4, 1) and d.stride() == x.squeeze(0).unsqueeze(1).stride()
    y = torch.randn(2, 3)
    e = y.to("neuron")
    e.t_()
    assert e.shape == (3, 2) and torch.equal(e.cpu(), y.t())
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, 5, requires_grad=True)
    ad = a.detach().to("neuron").requires_grad_()
    bd = b.detach().to("neuron").requires_grad_()
    r, rd = torch.matmul(a, b), torch.matmul(ad, bd)
    assert rd.shape == r.shape == (5,)
    rd.sum().backward()
    r.sum().backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad)
    torch.testing.assert_close(bd.grad.cpu(), b.grad)


def test_empty_tensors_cost_no_kernel():
    """Ops on empty tensors (found by the conformance sweep) run on the device instead of failing in their cost."""
    for shape in ((0, 5), (5, 0, 0), (0,)):
        x = torch.zeros(shape)
        d = x.to("neuron")
        outs = [torch.log_softmax(d, -1), torch.softmax(d, -1), d + 1, d.sum(-1), torch.nn.functional.layer_norm(
            d, d.shape[-1:]) if d.shape[-1] else d]
        for o, ref in zip(outs, [torch.log_softmax(x, -1), torch.softmax(x, -1), x + 1, x.sum(-1)]):
            assert o.shape == ref.shape and o.device.type == "neuron"


def test_integer_matmul_is_estimated_not_a_tensor_engine_kernel():
    a = torch.randint(-5, 5, (4, 3))
    b = torch.randint(-5, 5, (3, 6))
    r = a.to("neuron") @ b.to("neuron")
    assert torch.equal(r.cpu(), a @ b)
    assert torch.equal((b.T.to("neuron") @ a.T.to("neuron")).cpu(), b.T @ a.T)
