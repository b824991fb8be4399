"""Causal attention with a sliding window: the flash kernel's window (numerics against float64, the key tiles it
skips), its charge (``costs.attention_cost(window=)``), and ``trnsim_attn::sliding_window_attention`` on the CPU, on
the ``neuron`` device and in a compiled graph."""

import numpy as np
import pytest
import torch

from trnsim.backend import costs
from trnsim.backend.shape_only import device_target
from trnsim.backend.window_attention import sliding_window_attention
from trnsim.kernels.jit import run_kernel
from trnsim.kernels.library import attention

from test_attention_cost import _ref as _attention_ref  # noqa: E402  (tests/backend on sys.path)


def _ref(q, k, v, scale, window):
    """float64 softmax attention where query i keeps keys i - window < j <= i."""
    return _attention_ref(q, k, v, scale, causal=True, window=window)


def _run(q, k, v, **kw):
    qT = np.ascontiguousarray(q.transpose(0, 2, 1))
    kT = np.ascontiguousarray(k.transpose(0, 2, 1))
    return np.asarray(run_kernel(attention.flash_attention, (qT, kT, v), kw, target="trn2").outputs)


@pytest.mark.parametrize("H,L,S,D,window,group", [
    (2, 512, 512, 32, 128, 2),      # one tile wide: each query tile computes its diagonal tile and the one before
    (1, 512, 512, 16, 200, 1),      # a window that is no multiple of 128: its start crosses two key tiles
    (1, 384, 384, 16, 64, 1),       # narrower than a tile: the diagonal tile holds both bounds
    (1, 2304, 2304, 16, 300, 1),    # two key blocks: the window's tiles straddle the block boundary
    (1, 512, 384, 16, 200, 1),      # more queries than keys
    (1, 256, 512, 16, 1, 1),        # each query keeps itself only: the output is v's row
])
def test_window_numerics_against_float64(H, L, S, D, window, group):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((H, n, D)).astype(np.float32) for n in (L, S, S))
    o = _run(q, k, v, group=group, causal=True, window=window)
    np.testing.assert_allclose(o, _ref(q, k, v, D ** -0.5, window), rtol=0, atol=2e-6)
    assert np.abs(o - _ref(q, k, v, D ** -0.5, 10 ** 9)).max() > 1e-2      # the window is applied


def test_window_skips_the_key_tiles_before_it():
    """L = S = 4096 with a 128-key window: query tile t computes the tiles t - 1 and t only (tile 0: itself), so
    63 of 32 x 33 / 2 = 528 causal score tiles, one 256-column score matmul each (128 for tile 0), and as many P V
    products and P transposes as tiles."""
    L = 4096
    args = (costs._inp((1, 64, L), "bfloat16"), costs._inp((1, 64, L), "bfloat16"), costs._inp((1, L, 64), "bfloat16"))

    def products(kw):
        res = run_kernel(attention.flash_attention, args, kw, target="trn2", execute=False)
        ops = res.cores[0].columns.opcode
        return (sum(1 for op in ops if op == "nc_matmul"), sum(1 for op in ops if op == "nc_transpose"),
                costs.kernel_duration_ns(res))
    m, t, ns = products({"causal": True, "window": 128})
    assert t == 1 + 2 * 31
    assert m == (1 + 1) + 31 * (1 + 2)
    _, _, ns_causal = products({"causal": True})
    assert ns < 0.5 * ns_causal


def test_band_tiles():
    # window 128: the tile before the diagonal is crossed by the window's start; window 200 crosses two tiles
    assert attention.key_range(512, 128, 1024, True, 128) == (384, 640)
    assert attention.band_tiles(512, 384, 640, 128, 128) == [384, 512]
    assert attention.key_range(512, 128, 1024, True, 200) == (256, 640)
    assert attention.band_tiles(512, 256, 640, 128, 200) == [256, 384, 512]
    assert attention.key_range(0, 128, 1024, True, 200) == (0, 128)


def test_window_bad_arguments_are_refused():
    z = np.zeros
    args = (z((1, 16, 256), np.float32), z((1, 16, 256), np.float32), z((1, 256, 16), np.float32))
    with pytest.raises(ValueError, match="needs causal=True"):
        run_kernel(attention.flash_attention, args, {"window": 64}, target="trn2", execute=False)
    with pytest.raises(ValueError, match="at least 1 key"):
        run_kernel(attention.flash_attention, args, {"causal": True, "window": 0}, target="trn2", execute=False)
    args = (z((1, 16, 512), np.float32), z((1, 16, 256), np.float32), z((1, 256, 16), np.float32))
    with pytest.raises(ValueError, match="query rows from 319 of 512 keep no key"):
        run_kernel(attention.flash_attention, args, {"causal": True, "window": 64}, target="trn2", execute=False)


def test_kept_scores_with_a_window():
    assert costs._kept_scores(4, 4, True, 2) == 1 + 2 + 2 + 2
    assert costs._kept_scores(5, 3, True, 2) == 1 + 2 + 2 + 1 + 0
    assert costs._kept_scores(6, 6, True, 10) == costs._kept_scores(6, 6, True)
    L, w = 4096, 128
    assert costs._kept_scores(L, L, True, w) == w * (w + 1) // 2 + (L - w) * w


def test_window_charge():
    """The charge is the windowed kernel's simulation: flops count the kept scores, the time is below the causal
    kernel's (the same loads, fewer products), a window reaching past every query is the causal charge itself, and
    the backward is the ratio times the windowed forward."""
    costs.clear_memo()
    with device_target("trn2") as tg:
        H, L, D, w = 2, 2048, 64, 128
        win = costs.attention_cost(tg, H, L, L, D, "bfloat16", causal=True, window=w)
        causal = costs.attention_cost(tg, H, L, L, D, "bfloat16", causal=True)
        assert win[1] == H * (4.0 * D + 5.0) * costs._kept_scores(L, L, True, w)
        assert win[0] < causal[0]
        G = attention.head_group(L, L, D, 2, tg.dma_knee_bytes_per_partition)
        args = (costs._inp((H, D, L), "bfloat16"), costs._inp((H, D, L), "bfloat16"), costs._inp((H, L, D), "bfloat16"))
        assert H <= 2 * G
        assert win[0] == costs._sim(attention.flash_attention, args,
                                    {"group": G, "dropout_p": 0.0, "causal": True, "window": w}, tg)[0]
        assert costs.attention_cost(tg, H, L, L, D, "bfloat16", causal=True, window=L) == causal
        bw = costs.attention_backward_cost(tg, H, L, L, D, "bfloat16", causal=True, window=w)
        assert bw == tuple(costs.ATTN_BWD_RATIO * x for x in win)
        with pytest.raises(ValueError, match="needs causal"):
            costs.attention_cost(tg, H, L, L, D, "bfloat16", window=w)


# -- the operator ------------------------------------------------------------------------------------------------

def test_op_values_and_gradients_against_float64():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 8, dtype=torch.float32, requires_grad=True) for _ in range(3))
    g = torch.randn(2, 3, 40, 8)
    o = sliding_window_attention(q, k, v, 7)
    want = _ref(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), 8 ** -0.5, 7)
    np.testing.assert_allclose(o.detach().numpy(), want, rtol=0, atol=2e-6)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), g)
    # float64 gradients of the same masked attention, by autograd on float64 copies
    q6, k6, v6 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    i, j = torch.arange(40).unsqueeze(1), torch.arange(40).unsqueeze(0)
    s = (q6 @ k6.transpose(-1, -2)) * 8 ** -0.5
    s = s.masked_fill(~((j <= i) & (j > i - 7)), float("-inf"))
    o6 = torch.softmax(s, -1) @ v6
    for got, want in zip((dq, dk, dv), torch.autograd.grad(o6, (q6, k6, v6), g.double())):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-5)


def test_op_bad_arguments():
    q = torch.zeros(1, 2, 16, 8)
    with pytest.raises(ValueError, match="window 0: a window keeps at least 1 key"):
        sliding_window_attention(q, q, q, 0)
    with pytest.raises(ValueError, match="do not match"):
        sliding_window_attention(q, torch.zeros(1, 2, 16, 4), q, 4)
    with pytest.raises(ValueError, match="keep no key"):
        sliding_window_attention(torch.zeros(1, 2, 64, 8), q, q, 4)


def test_op_on_the_device_is_charged_the_windowed_kernel():
    """On ``neuron``: the values (against float64), one fused kernel charged ``attention_cost(window=)`` forward
    and the ratio times it backward (the profiler names the trnsim_attn ops), no CPU fallback."""
    from trnsim import backend
    from trnsim.backend.device_state import STATE
    torch.manual_seed(1)
    B, H, L, D, w = 1, 2, 256, 32, 64
    qc, kc, vc = (torch.randn(B, H, L, D) for _ in range(3))
    q, k, v = (t.to("neuron").requires_grad_(True) for t in (qc, kc, vc))
    with backend.profile_torch() as prof:
        o = sliding_window_attention(q, k, v, w)
        o.sum().backward()
    np.testing.assert_allclose(o.detach().cpu().numpy(), _ref(qc.numpy(), kc.numpy(), vc.numpy(), D ** -0.5, w),
                               rtol=0, atol=2e-6)
    rows = {r.op: r for r in prof.rows}
    tg = STATE.target
    fwd = costs.attention_cost(tg, B * H, L, L, D, "float32", causal=True, window=w)
    assert rows["trnsim_attn::sliding_window_attention"].duration_ns == pytest.approx(
        costs.launch_ns(tg) + fwd[0], rel=1e-9)     # (a row is end - start of the clock)
    assert rows["trnsim_attn::sliding_window_attention_backward"].duration_ns == pytest.approx(
        costs.launch_ns(tg) + costs.ATTN_BWD_RATIO * fwd[0], rel=1e-9)
    assert not any(r.kind == "fallback" for r in prof.rows)
    # the timeline puts the attention kernels on the Tensor Engine's row, as it does matmuls
    eng = {r.opcode: r.engine for r in prof.timeline().rows()}
    assert eng["trnsim_attn::sliding_window_attention"] == "tensor"
    assert eng["trnsim_attn::sliding_window_attention_backward [estimated]"] == "tensor"
    assert eng["aten::sum"] == "vector"


def test_op_in_a_compiled_graph_is_one_kernel_charged_as_eager():
    from torch.fx.experimental.proxy_tensor import make_fx
    from trnsim.backend.compile import costing, ops as O
    q = torch.randn(1, 2, 256, 32)
    gm = make_fx(lambda q, k, v: sliding_window_attention(q, k, v, 64))(q, q, q)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [O.kind(n.target) for n in nodes] == ["opaque"]
    with device_target("trn2") as tg:
        ns, fl, nb, est = costing.eager_kernel_cost(nodes[0])
        want = costs.attention_cost(tg, 2, 256, 256, 32, "float32", causal=True, window=64)
        assert (ns, fl, nb, est) == (pytest.approx(want[0], rel=1e-12), want[1], want[2], False)
