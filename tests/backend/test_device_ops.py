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
    # aten::_weight_norm_interface has no native implementation (an op chosen for being a fallback; issue 12 made
    # the earlier example, erfinv, native)
    backend.reset_fallback_counts()
    v, g = torch.randn(3, 4), torch.rand(3, 1) + 0.5
    vn, gn = v.to("neuron"), g.to("neuron")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y1 = torch._weight_norm(vn, gn, 0)
        y2 = torch._weight_norm(vn, gn, 0)
    msgs = [str(m.message) for m in w if issubclass(m.category, backend.NeuronFallbackWarning)]
    assert len(msgs) <= 1      # once per op and process (an earlier test in this process may have warned)
    if msgs:
        assert msgs[0] == ("aten::_weight_norm_interface is not implemented for the neuron device and ran on the "
                           "CPU; on hardware this copies to the host")
    assert y1.device.type == "neuron" and torch.equal(y1.cpu(), torch._weight_norm(v, g, 0))
    assert torch.equal(y2.cpu(), y1.cpu())
    assert backend.fallback_counts() == {"aten::_weight_norm_interface": 2}
    backend.set_fallback_mode("error")
    with pytest.raises(backend.NeuronFallbackError, match="aten::_weight_norm_interface is not implemented"):
        torch._weight_norm(vn, gn, 0)


def test_fallback_error_in_backward_raises_on_the_caller():
    v = torch.rand(3, 4, device="neuron", requires_grad=True)
    g = torch.rand(3, 1, device="neuron", requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch._weight_norm(v, g, 0).sum()
    backend.set_fallback_mode("error")
    with pytest.raises(backend.NeuronFallbackError, match="aten::_weight_norm_interface_backward"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y.backward()


def test_simulated_time_profile_rows_and_events():
    x = torch.randn(256, 512, device="neuron")
    w = torch.randn(512, 256, device="neuron")
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with trnsim.profile_torch() as p:
            start.record()
            y = torch.relu(x @ w)                 # native, library kernels
            z = torch._weight_norm(y, y[:, :1] + 1, 0)     # fallback
            e = torch.nn.functional.embedding(torch.tensor([1, 2], device="neuron"), w)   # estimated
            end.record()
    ops = [r.op for r in p.rows]
    assert ops[:2] == ["aten::mm", "aten::relu"] and "aten::_weight_norm_interface" in ops and \
        "aten::embedding" in ops
    kinds = {r.op: r.kind for r in p.rows}
    assert kinds["aten::mm"] == "native" and kinds["aten::_weight_norm_interface"] == "fallback"
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
    b3 = costs.matmul_cost(TRN2, 512, 512, 512, "bfloat16", batch=3)
    # one launch over the batch (library.matmul_batched): the next product's loads overlap this one's matmuls
    assert a[0] < b3[0] < 3 * a[0] and b3[1] == 3 * a[1]


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
