"""Ops that write an argument (``out=``, in place) on ``neuron``, written as user code and compared with the CPU.

Found by the OpInfo sweep (s12): low-precision ops that the device accumulates in fp32 (mm, sum, addmm, ...) ran on
upcast copies, so ``torch.mm(a, b, out=o)`` returned the right values but left ``o`` unwritten (torch's chunked
``F.linear_cross_entropy`` read garbage from its buffers); and an ``out=`` of the wrong size was resized on the
host while the tensor kept reporting its old shape."""

import pytest
import torch
import torch.nn.functional as F

D = "neuron"


def _close_to_f64(got, ref64, dtype):
    """within a few ulps of the dtype at the reference's magnitude (fp32 accumulation, one rounding)"""
    eps = torch.finfo(dtype).eps
    tol = 2 * eps * ref64.abs().clamp_min(1.0)
    assert got.shape == ref64.shape
    assert bool(((got.double() - ref64).abs() <= tol).all()), (got, ref64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("out_shape", [(5, 4), (0,)])
def test_out_argument_is_written_and_resized(dtype, out_shape):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 3, generator=g).to(dtype), torch.randn(3, 4, generator=g).to(dtype)
    o = torch.full(out_shape, 7.0, dtype=dtype).to(D)
    r = torch.mm(a.to(D), b.to(D), out=o)
    assert r is o and o.shape == (5, 4)
    _close_to_f64(o.cpu(), a.double() @ b.double(), dtype)
    s = torch.empty(0, dtype=dtype).to(D)
    torch.sum(a.to(D), 1, out=s)
    assert s.shape == (5,)
    _close_to_f64(s.cpu(), a.double().sum(1), dtype)
    x = torch.randn(5, 4, generator=g).to(dtype)
    xd = x.to(D)
    xd.addmm_(a.to(D), b.to(D))
    _close_to_f64(xd.cpu(), x.double() + a.double() @ b.double(), dtype)


def test_out_into_a_view_of_a_buffer_reaches_the_buffer():
    buf = torch.zeros(4, 6, dtype=torch.bfloat16).to(D)
    a, b = torch.randn(2, 3).bfloat16(), torch.randn(3, 4).bfloat16()
    torch.mm(a.to(D), b.to(D), out=buf.narrow(0, 1, 2).narrow(1, 2, 4))
    ref = torch.zeros(4, 6, dtype=torch.bfloat16)
    torch.mm(a, b, out=ref.narrow(0, 1, 2).narrow(1, 2, 4))
    torch.testing.assert_close(buf.cpu(), ref, rtol=0, atol=2 ** -6)
    assert bool((buf.cpu()[0] == 0).all() and (buf.cpu()[:, :2] == 0).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_chunked_linear_cross_entropy_low_precision(dtype):
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(6, 8, generator=g).to(dtype), torch.randn(5, 8, generator=g).to(dtype)
    t = torch.randint(0, 5, (6,), generator=g)
    ref = F.cross_entropy(x.double() @ w.double().T, t)
    for kw in ({}, {"acc_policy": "compact", "acc_dtype": dtype}):
        opts = LinearCrossEntropyOptions(batch_chunk_size=2, **kw)
        got = F.linear_cross_entropy(x.to(D), w.to(D), t.to(D), options=opts).cpu()
        cpu = F.linear_cross_entropy(x, w, t, options=opts)
        # the device may round differently from the CPU's kernel, but not be farther from float64 than a few ulps
        # or than twice the CPU's own error
        err, cpu_err = abs(got.double() - ref), abs(cpu.double() - ref)
        assert err <= max(4 * torch.finfo(dtype).eps * abs(ref), 2 * cpu_err), (kw, got, cpu, ref)
