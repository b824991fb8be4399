"""The native ops added for models (issue 12), written as user code: each runs on ``neuron`` with the CPU fallback
turned into an error, and is compared with the same code on the CPU or with a float64 reference (bf16 inputs:
accumulated in fp32 and rounded once).  Timing checks compare the simulated clock with the formulas the cost
module states (convolution = the im2col matmul kernel; nonzero = an estimate plus a host read)."""

import math

import pytest
import torch
import torch.nn.functional as F

from trnsim import backend

D = "neuron"


@pytest.fixture(autouse=True)
def _strict():
    prev = backend.set_fallback_mode("error")      # any CPU fallback raises NeuronFallbackError
    yield
    backend.set_fallback_mode(prev)


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _one_rounding_ok(got, ref64, dtype=torch.bfloat16):
    """``got`` (low precision) is the float64 reference rounded once, up to fp32 accumulation noise: within one
    ulp of the dtype at the reference's magnitude."""
    mant = {torch.bfloat16: 7, torch.float16: 10}[dtype]
    ulp = ref64.abs() * 2.0 ** -mant + 2.0 ** -126
    return bool(((got.double() - ref64).abs() <= ulp + 1e-6 * ref64.abs().max()).all())


# -- histc, bincount, bucketize ---------------------------------------------------------------------------
def _histc_cuda(values, bins, lo, hi):
    """CUDA's integer histc, written out: bounds truncated to integers, data extremes when equal, values outside
    ignored, bin (v - lo) * bins // (hi - lo), the maximum in the last bin."""
    vals = [int(v) for v in values.reshape(-1).tolist()]
    lo, hi = int(lo), int(hi)
    if lo == hi and vals:
        lo, hi = min(vals), max(vals)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    out = [0] * bins
    for v in vals:
        if lo <= v <= hi:
            out[min(bins - 1, (v - lo) * bins // (hi - lo))] += 1
    return out


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
@pytest.mark.parametrize("bins,lo,hi", [(8, 0, 7), (5, 0, 0), (3, 2, 9), (7, -3, 20), (4, 1.7, 6.2)])
def test_histc_on_integers_matches_cuda_semantics(dtype, bins, lo, hi):
    lo_v = 0 if dtype == torch.uint8 and lo < 0 else lo
    x = torch.randint(0, 12, (257,), generator=_g(), dtype=torch.int64).to(dtype)
    got = torch.histc(x.to(D), bins=bins, min=lo_v, max=hi)
    assert got.device.type == D and got.dtype == dtype and got.shape == (bins,)
    assert got.cpu().tolist() == _histc_cuda(x, bins, lo_v, hi)


def test_histc_integer_edge_cases():
    x = torch.full((5,), 3, dtype=torch.int32)
    assert torch.histc(x.to(D), bins=3).cpu().tolist() == [0, 5, 0]          # equal extremes -> [2, 4]
    assert torch.histc(torch.empty(0, dtype=torch.int32).to(D), bins=2).cpu().tolist() == [0, 0]
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x.to(D), bins=3, min=5, max=1)
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x.to(D), bins=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_histc_on_floats(dtype):
    x = torch.randn(300, generator=_g()).to(dtype)
    got = torch.histc(x.to(D), bins=10, min=-2, max=2).cpu()
    want = torch.histc(x.float(), bins=10, min=-2, max=2).to(dtype)          # binned in fp32, counts rounded once
    assert got.dtype == dtype and torch.equal(got, want)


def test_moe_routing_runs_natively_like_cuda():
    """The routing step of transformers' MoE blocks: top-k experts per token, tokens per expert with histc on an
    integer tensor, a weighted index_add back."""
    E, T, H, K = 6, 40, 8, 2
    logits = torch.randn(T, E, generator=_g(1))
    x = torch.randn(T, H, generator=_g(2))

    def route(logits, x):
        w, ids = torch.topk(torch.softmax(logits, -1), K, dim=-1)
        counts = torch.histc(ids.int(), bins=E, min=0, max=E - 1)
        order = torch.argsort(ids.reshape(-1), stable=True)
        out = torch.zeros_like(x).index_add_(0, order // K, x[order // K] * w.reshape(-1)[order, None])
        return counts, out, torch.cumsum(counts, 0)
    c_d, o_d, cs_d = route(logits.to(D), x.to(D))
    ids_cpu = torch.topk(torch.softmax(logits, -1), K, dim=-1).indices
    assert c_d.dtype == torch.int32
    assert c_d.cpu().tolist() == torch.bincount(ids_cpu.reshape(-1), minlength=E).tolist()
    assert cs_d.cpu().tolist() == torch.cumsum(torch.bincount(ids_cpu.reshape(-1), minlength=E), 0).tolist()
    w, ids = torch.topk(torch.softmax(logits, -1), K, dim=-1)
    order = torch.argsort(ids.reshape(-1), stable=True)
    o_c = torch.zeros_like(x).index_add_(0, order // K, x[order // K] * w.reshape(-1)[order, None])
    torch.testing.assert_close(o_d.cpu(), o_c)


def test_bincount_bucketize_searchsorted():
    v = torch.randint(0, 9, (50,), generator=_g())
    w = torch.rand(50, generator=_g(3))
    assert torch.equal(torch.bincount(v.to(D)).cpu(), torch.bincount(v))
    torch.testing.assert_close(torch.bincount(v.to(D), weights=w.to(D), minlength=12).cpu(),
                               torch.bincount(v, weights=w, minlength=12))
    b = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    x = torch.randn(4, 6, generator=_g())
    for right in (False, True):
        assert torch.equal(torch.bucketize(x.to(D), b.to(D), right=right).cpu(), torch.bucketize(x, b, right=right))
        assert torch.equal(torch.searchsorted(b.to(D), x.to(D), right=right).cpu(),
                           torch.searchsorted(b, x, right=right))


# -- sorting ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_sort_topk_argsort_kthvalue_median_exact(dtype):
    x = (torch.randn(5, 33, generator=_g()) * 10).to(dtype)
    xd = x.to(D)
    for fn in (lambda t: torch.sort(t, dim=-1, stable=True), lambda t: torch.sort(t, dim=0, descending=True,
                                                                                  stable=True),
               lambda t: torch.topk(t, 4, dim=-1), lambda t: torch.topk(t, 2, dim=0, largest=False),
               lambda t: torch.argsort(t, dim=-1, stable=True), lambda t: torch.kthvalue(t, 3, dim=1),
               lambda t: torch.median(t, dim=1), lambda t: torch.msort(t)):
        got, want = fn(xd), fn(x)
        got = got if isinstance(got, torch.Tensor) else tuple(got)
        want = want if isinstance(want, torch.Tensor) else tuple(want)
        if isinstance(want, torch.Tensor):
            assert torch.equal(got.cpu(), want)
        else:
            assert all(torch.equal(a.cpu(), b) for a, b in zip(got, want))


def test_nonzero_and_masked_select_charge_a_host_read():
    x = torch.randn(64, 32, generator=_g())
    xd = x.to(D)
    with backend.profile_torch() as prof:
        nz = torch.nonzero(xd > 0)
    assert torch.equal(nz.cpu(), torch.nonzero(x > 0))
    assert torch.equal(torch.masked_select(xd, xd > 0).cpu(), torch.masked_select(x, x > 0))
    row = next(r for r in prof.rows if r.op == "aten::nonzero")
    from trnsim.backend import costs
    from trnsim.backend.device_state import STATE
    tg = STATE.target
    # the count's read back to the host is part of the op's time
    assert row.kind == "estimated"
    assert row.duration_ns >= costs.launch_ns(tg) + costs.host_transfer_ns(tg, 8)


# -- convolution --------------------------------------------------------------------------------------------
_CONVS = [
    (F.conv1d, (2, 4, 17), (6, 4, 3), dict(stride=2, padding=1)),
    (F.conv1d, (1, 6, 9), (6, 2, 4), dict(groups=3, dilation=2)),
    (F.conv2d, (2, 3, 9, 8), (5, 3, 3, 3), dict(padding=1)),
    (F.conv2d, (1, 4, 7, 7), (4, 1, 3, 3), dict(groups=4, stride=2)),
    (F.conv3d, (1, 2, 5, 6, 5), (3, 2, 2, 3, 2), dict(padding=(1, 0, 1))),
    (F.conv_transpose1d, (2, 4, 7), (4, 3, 3), dict(stride=2)),
    (F.conv_transpose2d, (1, 4, 5, 5), (4, 2, 3, 3), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("fn,xs,ws,kw", _CONVS)
def test_convolution_forward_backward_fp32_matches_cpu(fn, xs, ws, kw):
    x = torch.randn(xs, generator=_g(1), requires_grad=True)
    w = torch.randn(ws, generator=_g(2), requires_grad=True)
    b = torch.randn(ws[1] * kw.get("groups", 1) if fn.__name__.startswith("conv_transpose") else ws[0],
                    generator=_g(3), requires_grad=True)
    y = fn(x, w, b, **kw)
    go = torch.randn(y.shape, generator=_g(4))
    y.backward(go)
    xd, wd, bd = (t.detach().to(D).requires_grad_() for t in (x, w, b))
    yd = fn(xd, wd, bd, **kw)
    yd.backward(go.to(D))
    torch.testing.assert_close(yd.detach().cpu(), y.detach())
    for a, c in ((xd, x), (wd, w), (bd, b)):
        torch.testing.assert_close(a.grad.cpu(), c.grad)


@pytest.mark.parametrize("fn,xs,ws,kw", _CONVS[:5])
def test_convolution_bf16_accumulates_in_fp32_rounds_once(fn, xs, ws, kw):
    x = torch.randn(xs, generator=_g(1)).bfloat16()
    w = torch.randn(ws, generator=_g(2)).bfloat16()
    got = fn(x.to(D), w.to(D), **kw).cpu()
    ref = fn(x.double(), w.double(), **kw)
    assert got.dtype == torch.bfloat16 and _one_rounding_ok(got, ref)


def test_convolution_cost_is_the_im2col_matmul_kernel():
    from trnsim.backend import costs
    from trnsim.backend.device_state import STATE
    x = torch.randn(2, 8, 16, 16).to(D)
    w = torch.randn(16, 8, 3, 3).to(D)
    with backend.profile_torch() as prof:
        F.conv2d(x, w, padding=1)
    row = next(r for r in prof.rows if r.op == "aten::convolution")
    tg = STATE.target
    ns, flops, _ = costs.matmul_cost(tg, 2 * 16 * 16, 8 * 9, 16, "float32", 1)
    assert row.kind == "native"
    assert row.duration_ns == pytest.approx(costs.launch_ns(tg) + ns)
    assert row.flops == pytest.approx(2.0 * (2 * 16 * 16) * (8 * 9) * 16) == pytest.approx(flops)


# -- linear algebra, scans, complex, scatter ------------------------------------------------------------
def test_solve_triangular_matches_float64():
    A = torch.randn(3, 6, 6, generator=_g()).triu() + 4 * torch.eye(6)
    B = torch.randn(3, 6, 2, generator=_g(1))
    for upper, left in ((True, True), (False, True), (True, False)):
        Au = A if upper else A.transpose(-2, -1)
        Bx = B if left else B.transpose(-2, -1)
        got = torch.linalg.solve_triangular(Au.to(D), Bx.to(D), upper=upper, left=left).cpu()
        ref = torch.linalg.solve_triangular(Au.double(), Bx.double(), upper=upper, left=left)
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_cumsum_cumprod_bf16_in_fp32():
    x = (torch.rand(4, 64, generator=_g()) + 0.5).bfloat16()
    s = torch.cumsum(x.to(D), dim=1).cpu()
    assert s.dtype == torch.bfloat16 and _one_rounding_ok(s, torch.cumsum(x.double(), 1))
    y = (torch.rand(4, 20, generator=_g()) * 0.2 + 0.9).bfloat16()
    p = torch.cumprod(y.to(D), dim=1).cpu()
    assert p.dtype == torch.bfloat16 and _one_rounding_ok(p, torch.cumprod(y.double(), 1))


def test_polar_and_complex():
    r, th = torch.rand(7, generator=_g()), torch.rand(7, generator=_g(1)) * 6
    torch.testing.assert_close(torch.polar(r.to(D), th.to(D)).cpu(), torch.polar(r, th))


def test_scatter_index_family():
    x = torch.zeros(5, 4)
    idx = torch.tensor([0, 2, 2, 4, 1, 0])
    src = torch.randn(6, 4, generator=_g())
    for fn in (lambda a, i, s: a.index_add(0, i, s),
               lambda a, i, s: a.scatter_add(0, i[:, None].expand(6, 4), s),
               lambda a, i, s: a.scatter_reduce(0, i[:, None].expand(6, 4), s, "amax", include_self=False),
               lambda a, i, s: a.index_reduce(0, i, s, "prod", include_self=True)):
        torch.testing.assert_close(fn(x.to(D), idx.to(D), src.to(D)).cpu(), fn(x, idx, src))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_mm(dtype):
    a = torch.randn(12, 16, generator=_g()).to(dtype)
    b = torch.randn(3, 8, 16, generator=_g(1)).to(dtype).transpose(-2, -1)    # [3, 16, 8], column-major
    offs = torch.tensor([4, 4, 12], dtype=torch.int32)
    got = torch._grouped_mm(a.to(D), b.to(D), offs=offs.to(D)).cpu()
    ref = torch.cat([a[:4].double() @ b[0].double(), a[4:4].double() @ b[1].double(),
                     a[4:].double() @ b[2].double()])
    assert got.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    else:
        assert _one_rounding_ok(got, ref)


# -- nn.functional: pooling, interpolation, padding, normalisation, activations, losses ----------------
_NNF = [
    lambda x: F.max_pool2d(x, 2), lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
    lambda x: F.adaptive_avg_pool2d(x, (3, 2)), lambda x: F.adaptive_max_pool2d(x, 2),
    lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
    lambda x: F.interpolate(x, size=(5, 7), mode="nearest"), lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"),
    lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"), lambda x: F.pixel_shuffle(x[:, :4], 2),
    lambda x: F.batch_norm(x, None, None, training=True), lambda x: F.group_norm(x, 2),
    lambda x: F.hardswish(x), lambda x: F.hardsigmoid(x), lambda x: F.glu(x, 1), lambda x: F.celu(x),
    lambda x: F.softshrink(x), lambda x: F.logsigmoid(x), lambda x: F.soft_margin_loss(x, x.detach().sign()),
    lambda x: F.unfold(x, 2), lambda x: F.fold(F.unfold(x, 2), x.shape[-2:], 2),
]


@pytest.mark.parametrize("i", range(len(_NNF)))
def test_nn_functional_native_forward_backward(i):
    fn = _NNF[i]
    x = torch.randn(2, 4, 6, 6, generator=_g(i), requires_grad=True)
    y = fn(x)
    go = torch.randn(y.shape, generator=_g(100 + i))
    y.backward(go)
    xd = x.detach().to(D).requires_grad_()
    yd = fn(xd)
    yd.backward(go.to(D))
    torch.testing.assert_close(yd.detach().cpu(), y.detach())
    torch.testing.assert_close(xd.grad.cpu(), x.grad)


def test_batch_norm_bf16_statistics_in_fp32():
    x = (torch.randn(8, 3, 5, 5, generator=_g()) * 3 + 2).bfloat16()
    got = F.batch_norm(x.to(D), None, None, training=True).cpu()
    ref = F.batch_norm(x.double(), None, None, training=True)
    assert got.dtype == torch.bfloat16 and _one_rounding_ok(got, ref)
    assert math.isfinite(float(got.float().abs().max()))


def test_batch_norm_bf16_updates_running_stats_in_place():
    x = (torch.randn(8, 3, 5, generator=_g()) * 2 + 1).bfloat16()
    rm, rv = torch.zeros(3, dtype=torch.bfloat16), torch.ones(3, dtype=torch.bfloat16)
    rmd, rvd = rm.to(D), rv.to(D)
    F.batch_norm(x.to(D), rmd, rvd, training=True, momentum=0.5)
    x64 = x.double()
    mean = x64.mean((0, 2))
    var = x64.var((0, 2), unbiased=True)
    assert _one_rounding_ok(rmd.cpu(), 0.5 * mean) and _one_rounding_ok(rvd.cpu(), 0.5 + 0.5 * var)
