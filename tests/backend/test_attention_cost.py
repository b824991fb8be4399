"""The fused attention kernel (library/attention.py): its numerics against float64, and the sdpa charge built on
its simulation (costs.attention_cost, charging._sdpa_time)."""

import ml_dtypes
import numpy as np
import pytest
import torch

from trnsim.backend import charging, costs
from trnsim.backend.shape_only import device_target
from trnsim.kernels.jit import run_kernel
from trnsim.kernels.library import attention
from trnsim.targets import get_target


def _ref(q, k, v, scale, causal=False, window=None):
    """float64 softmax attention; ``causal``: query i keeps keys j <= i (torch's is_causal, top-left aligned);
    ``window`` (with causal): also j > i - window."""
    s = np.einsum("...ld,...sd->...ls", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        L, S = s.shape[-2:]
        i, j = np.arange(L)[:, None], np.arange(S)[None, :]
        s = np.where((j <= i) & (j > i - (window or L + S)), s, -np.inf)
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return np.einsum("...ls,...sd->...ld", p, v.astype(np.float64))


def _run(q, k, v, **kw):
    qT = np.ascontiguousarray(q.transpose(0, 2, 1))
    kT = np.ascontiguousarray(k.transpose(0, 2, 1))
    return np.asarray(run_kernel(attention.flash_attention, (qT, kT, v), kw, target="trn2").outputs)


@pytest.mark.parametrize("H,L,S,D,group", [(3, 128, 256, 64, 2), (2, 256, 128, 32, 1), (2, 256, 2048 + 256, 16, 2)])
def test_numerics_fp32_against_float64(H, L, S, D, group):
    # (2, 256, 2304, ...): two key blocks, so the online-softmax rescaling runs, pipelined across heads and tiles
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((H, n, D)).astype(np.float32) for n in (L, S, S))
    o = _run(q, k, v, group=group)
    assert o.shape == (H, L, D)
    np.testing.assert_allclose(o, _ref(q, k, v, D ** -0.5), rtol=0, atol=2e-6)


@pytest.mark.parametrize("H,L,S,D,group", [(2, 384, 384, 32, 2), (1, 256, 512, 16, 1), (2, 512, 256, 16, 1),
                                           (1, 2048 + 256, 2048 + 256, 16, 1)])
def test_causal_numerics_against_float64(H, L, S, D, group):
    # square, more keys than queries, more queries than keys (rows past the last key see every key), and two key
    # blocks (the diagonal in the second block of the last query tiles, the rescaling across blocks)
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((H, n, D)).astype(np.float32) for n in (L, S, S))
    o = _run(q, k, v, group=group, causal=True)
    np.testing.assert_allclose(o, _ref(q, k, v, D ** -0.5, causal=True), rtol=0, atol=2e-6)
    assert np.abs(o - _ref(q, k, v, D ** -0.5)).max() > 1e-2         # the mask is applied


def test_causal_skips_the_key_tiles_above_the_diagonal():
    """A causal launch runs the products of the key tiles up to each query tile's diagonal only: for L = S = 32
    tiles (two key blocks), 528 of the 1,024 score tiles and as many P V products, in about two thirds of the time
    of the full launch (the loads and the per-item softmax steps stay)."""
    tg = get_target("trn2")
    L = 4096
    args = (costs._inp((1, 64, L), "bfloat16"), costs._inp((1, 64, L), "bfloat16"), costs._inp((1, L, 64), "bfloat16"))

    def products(causal):
        res = run_kernel(attention.flash_attention, args, {"causal": causal}, target=tg, execute=False)
        ops = res.cores[0].columns.opcode
        return (sum(1 for op in ops if op == "nc_matmul"), sum(1 for op in ops if op == "nc_transpose"),
                costs.kernel_duration_ns(res))
    (m_full, t_full, ns_full), (m_causal, t_causal, ns_causal) = products(False), products(True)
    # full: 32 query tiles x (8 score matmuls of 512 columns + 32 P V products); causal: per query tile t (1..32),
    # ceil(128 t / 512) score matmuls and t P V products, t transposes of P
    assert (m_full, t_full) == (32 * (8 + 32), 32 * 32)
    assert m_causal == sum(-(-128 * t // 512) + t for t in range(1, 33))
    assert t_causal == sum(range(1, 33))
    assert ns_causal < 0.75 * ns_full


@pytest.mark.parametrize("H,L,S,D,causal", [(2, 128, 256, 192, False), (1, 256, 256, 192, True),
                                            (1, 128, 128, 320, True), (1, 128, 128, 512, False)])
def test_wide_heads_accumulate_the_contraction_in_chunks(H, L, S, D, causal):
    """A head over the 128 partitions (DeepSeek's 192) is loaded in partition chunks whose score matmuls
    accumulate in PSUM: the numerics hold against float64, one score matmul per chunk per 512 key columns."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((H, n, D)).astype(np.float32) for n in (L, S, S))
    o = _run(q, k, v, causal=causal)
    np.testing.assert_allclose(o, _ref(q, k, v, D ** -0.5, causal=causal), rtol=0, atol=2e-6)
    args = tuple(costs._inp(s, "bfloat16") for s in ((H, D, L), (H, D, S), (H, S, D)))
    ops = run_kernel(attention.flash_attention, args, {"causal": causal}, target="trn2",
                     execute=False).cores[0].columns.opcode
    chunks, tiles = -(-D // 128), L // 128
    keys = [min(S, 128 * (t + 1)) if causal else S for t in range(tiles)]
    score_mm = sum(chunks * -(-n // 512) for n in keys) * H
    pv_mm = sum(n // 128 for n in keys) * H
    assert sum(1 for op in ops if op == "nc_matmul") == score_mm + pv_mm


def test_wide_head_charge_is_the_chunked_kernel():
    """``attention_cost`` prices a 192-wide head as the chunked flash kernel (causal skip included) instead of two
    matmuls and a softmax; only heads past one PSUM bank (512) fall back."""
    costs.clear_memo()
    tg = get_target("trn2")
    L = 1024
    full = costs.attention_cost(tg, 2, L, L, 192, "bfloat16")
    causal = costs.attention_cost(tg, 2, L, L, 192, "bfloat16", causal=True)
    G = attention.head_group(L, L, 192, 2, tg.dma_knee_bytes_per_partition)
    assert full[0] == pytest.approx(_sim_heads(tg, 2, L, L, 192, G)[0], rel=1e-12)
    assert causal[0] < full[0]
    assert causal[1] == 2 * (4.0 * 192 + 5.0) * (L * (L + 1) // 2)
    # token rows with a wide head: the row kernel (128 at most) does not apply, the chunked one does
    assert costs.attention_cost(tg, 2, L, L, 192, "bfloat16", batch=1)[0] == full[0]
    assert costs.attention_cost(tg, 2, L, L, 640, "bfloat16") is None
    q = torch.empty(1, 2, L, 192, dtype=torch.bfloat16)
    with device_target("trn2"):
        ns = charging.op_time("_scaled_dot_product_flash_attention_for_cpu", "sdpa", (q, q, q, 0.0, True), None)[0]
    assert ns == costs.launch_ns(tg) + causal[0]


def test_numerics_bf16_and_scale():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 128, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = _run(q, k, v, group=2, scale=0.25).astype(np.float64)
    # bf16 probabilities feed the second product (as on the device): about 3 significant digits
    np.testing.assert_allclose(o, _ref(q, k, v, 0.25), rtol=0, atol=1e-2)
    assert np.abs(o - _ref(q, k, v, 0.125)).max() > 5e-2       # the scale is applied


def test_bad_shapes_are_refused():
    z = np.zeros
    with pytest.raises(ValueError, match="head dimension 640 exceeds 512"):
        run_kernel(attention.flash_attention, (z((1, 640, 128), np.float32), z((1, 640, 128), np.float32),
                                               z((1, 128, 640), np.float32)), {}, target="trn2", execute=False)
    with pytest.raises(ValueError, match="multiples of 128"):
        run_kernel(attention.flash_attention, (z((1, 64, 100), np.float32), z((1, 64, 128), np.float32),
                                               z((1, 128, 64), np.float32)), {}, target="trn2", execute=False)


def _sim_heads(tg, h, L, S, D, G, dt="bfloat16"):
    return costs._sim(attention.flash_attention, (costs._inp((h, D, L), dt), costs._inp((h, D, S), dt),
                                                  costs._inp((h, S, D), dt)), {"group": G, "dropout_p": 0.0}, tg)


def test_charge_is_one_and_two_groups_extrapolated():
    costs.clear_memo()
    tg = get_target("trn1")
    L, S, D = 128, 128, 64
    G = attention.head_group(L, S, D, 2, tg.dma_knee_bytes_per_partition)
    assert G > 1
    one, two = _sim_heads(tg, G, L, S, D, G), _sim_heads(tg, 2 * G, L, S, D, G)
    heads = 7 * G + 3
    ns = costs.attention_cost(tg, heads, L, S, D, "bfloat16")[0]
    assert ns == pytest.approx(one[0] + (heads / G - 1) * (two[0] - one[0]), rel=1e-12)
    # up to two groups: the whole simulation
    assert costs.attention_cost(tg, G + 1, L, S, D, "bfloat16")[0] == \
        pytest.approx(_sim_heads(tg, G + 1, L, S, D, G)[0], rel=1e-12)
    # the extrapolation is the steady state: a whole simulation of 6 groups agrees
    whole = _sim_heads(tg, 6 * G, L, S, D, G)[0]
    assert costs.attention_cost(tg, 6 * G, L, S, D, "bfloat16")[0] == pytest.approx(whole, rel=0.02)


@pytest.mark.parametrize("L,S,D", [(128, 128, 64), (256, 512, 128)])
def test_heads_overlap_but_never_beat_the_tensor_engine(L, S, D):
    costs.clear_memo()
    tg = get_target("trn1")
    lone = costs.attention_cost(tg, 1, L, S, D, "bfloat16")[0]
    many = costs.attention_cost(tg, 256, L, S, D, "bfloat16")[0] / 256
    assert many < lone                  # the next heads' loads overlap this head's compute
    roof = 4.0 * L * S * D / tg.tensor_bf16_flops_per_core * 1e9
    assert many >= roof


def test_sdpa_charge_and_backward():
    costs.clear_memo()
    q, k, v = (torch.empty(2, 8, 200, 64, dtype=torch.bfloat16) for _ in range(3))
    with device_target("trn1") as tg:
        ns, kind, fl, nb = charging.op_time("_scaled_dot_product_flash_attention_for_cpu", "sdpa",
                                            (q, k, v, 0.1, False), None)
        want = costs.attention_cost(tg, 16, 200, 200, 64, "bfloat16", 0.1)
        assert (ns, kind, fl) == (costs.launch_ns(tg) + want[0], "native", want[1])
        assert fl == 16 * (4.0 * 200 * 200 * 64 + 5.0 * 200 * 200)
        g = torch.empty_like(q)
        bns, bkind, bfl, _ = charging.op_time("_scaled_dot_product_flash_attention_for_cpu_backward",
                                              "backward:sdpa", (g, q, k, v, q, None, 0.1, False), None)
        assert bkind == "estimated"
        assert bns == pytest.approx(costs.launch_ns(tg) + costs.ATTN_BWD_RATIO * want[0], rel=1e-12)
        assert bfl == pytest.approx(costs.ATTN_BWD_RATIO * want[1])
        # dropout adds its Vector Engine pass
        assert costs.attention_cost(tg, 16, 200, 200, 64, "bfloat16", 0.0)[0] < want[0]


# -- batched matmuls (bmm / baddbmm): one launch of library.matmul_batched over the batch ---------------------------
def test_batched_matmul_numerics_against_float64():
    from trnsim.kernels.library import matmul_batched
    rng = np.random.default_rng(2)
    at = rng.standard_normal((5, 256, 128)).astype(np.float32)
    b = rng.standard_normal((5, 256, 512)).astype(np.float32)
    o = np.asarray(run_kernel(matmul_batched.batched_matmul, (at, b), {"group": 2}, target="trn2").outputs)
    ref = np.einsum("bkm,bkn->bmn", at.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(o, ref, rtol=0, atol=1e-4)


def test_bmm_charge_is_one_and_two_groups_extrapolated():
    from trnsim.kernels.library import matmul_batched
    costs.clear_memo()
    tg = get_target("trn1")
    M, K, N = 128, 64, 128          # padded to 128 x 128 x 128
    G = matmul_batched.batch_group(tg, 128, 128, 128, 2)
    assert G > 1

    def sim(b):
        return costs._sim(matmul_batched.batched_matmul, (costs._inp((b, 128, 128), "bfloat16"),
                                                          costs._inp((b, 128, 128), "bfloat16")), {"group": G}, tg)
    one, two = sim(G), sim(2 * G)
    batch = 9 * G + 1
    ns, fl, _ = costs.matmul_cost(tg, M, K, N, "bfloat16", batch)
    assert ns == pytest.approx(one[0] + (batch / G - 1) * (two[0] - one[0]), rel=1e-12)
    assert fl == 2.0 * M * K * N * batch
    lone = costs.matmul_cost(tg, M, K, N, "bfloat16", 1)[0]
    assert ns / batch < lone                            # one launch, loads overlapping the previous products
    assert ns / batch >= 2.0 * M * K * N / tg.tensor_bf16_flops_per_core * 1e9
    assert costs.matmul_cost(tg, M, K, N, "bfloat16", 3)[0] == pytest.approx(sim(3)[0], rel=1e-12)
    # the steady state: a whole simulation of 5 groups agrees with the extrapolation
    assert costs.matmul_cost(tg, M, K, N, "bfloat16", 5 * G)[0] == pytest.approx(sim(5 * G)[0], rel=0.02)


def test_bmm_op_charge():
    costs.clear_memo()
    a, b = torch.empty(48, 128, 64, dtype=torch.bfloat16), torch.empty(48, 64, 128, dtype=torch.bfloat16)
    with device_target("trn1") as tg:
        ns, kind, fl, _ = charging.op_time("bmm", "bmm", (a, b), None)
        want = costs.matmul_cost(tg, 128, 64, 128, "bfloat16", 48)
        assert (ns, kind, fl) == (costs.launch_ns(tg) + want[0], "native", want[1])
        assert want[0] < 48 * costs.matmul_cost(tg, 128, 64, 128, "bfloat16", 1)[0]


# -- the row kernel: token rows [B, L, H x D] as the projections write them (library.attention.flash_attention_rows)
def _run_rows(q, k, v, H, **kw):
    """q, k, v as [B, H, n, D] -> the kernel's token rows [B, n, H x D] and back."""
    rows = [np.ascontiguousarray(t.transpose(0, 2, 1, 3)).reshape(t.shape[0], t.shape[2], -1) for t in (q, k, v)]
    o = np.asarray(run_kernel(attention.flash_attention_rows, tuple(rows), dict(heads=H, **kw),
                              target="trn2").outputs)
    B, L = q.shape[0], q.shape[2]
    return o.reshape(B, L, H, -1).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("B,H,L,S,D", [(2, 3, 128, 256, 64), (1, 5, 256, 128, 32), (2, 2, 128, 640, 128)])
def test_rows_numerics_fp32_against_float64(B, H, L, S, D):
    # H=3 with D=64: two heads per transpose and a last group of one; D=32: four per transpose (offsets 0..96);
    # S=640: two PSUM banks of scores; L=256: two query tiles
    rng = np.random.default_rng(3)
    q = rng.standard_normal((B, H, L, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(2))
    o = _run_rows(q, k, v, H)
    ref = _ref(q.reshape(B * H, L, D), k.reshape(B * H, S, D), v.reshape(B * H, S, D), D ** -0.5)
    np.testing.assert_allclose(o.reshape(B * H, L, D), ref, rtol=0, atol=2e-6)


def test_rows_numerics_bf16_and_scale():
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 4, 128, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = _run_rows(q, k, v, 4, scale=0.25).astype(np.float64).reshape(8, 128, 64)
    flat = [t.reshape(8, 128, 64) for t in (q, k, v)]
    np.testing.assert_allclose(o, _ref(*flat, 0.25), rtol=0, atol=1e-2)
    assert np.abs(o - _ref(*flat, 0.125)).max() > 5e-2


def test_rows_bad_shapes_are_refused():
    z = np.zeros
    with pytest.raises(ValueError, match="do not split into 3 heads"):
        run_kernel(attention.flash_attention_rows, (z((1, 128, 128), np.float32),) * 3, {"heads": 3},
                   target="trn2", execute=False)
    with pytest.raises(ValueError, match="exceeds one softmax block"):
        run_kernel(attention.flash_attention_rows, (z((1, 128, 64), np.float32), z((1, 4096, 64), np.float32),
                                                    z((1, 4096, 64), np.float32)), {"heads": 1},
                   target="trn2", execute=False)
    assert not attention.rows_fit(128, 4096, 64, 2, get_target("trn2"))


def _sim_rows(tg, b, L, S, H, D, dt="bfloat16"):
    return costs._sim(attention.flash_attention_rows, (costs._inp((b, L, H * D), dt), costs._inp((b, S, H * D), dt),
                                                       costs._inp((b, S, H * D), dt)), {"heads": H, "dropout_p": 0.0},
                      tg)


def test_rows_charge_is_one_and_two_batch_elements_extrapolated():
    costs.clear_memo()
    tg = get_target("trn1")
    B, H, L, S, D = 7, 16, 128, 128, 64
    one, two = _sim_rows(tg, 1, L, S, H, D), _sim_rows(tg, 2, L, S, H, D)
    ns, fl, _ = costs.attention_cost(tg, B * H, L, S, D, "bfloat16", batch=B)
    assert ns == pytest.approx(one[0] + (B - 1) * (two[0] - one[0]), rel=1e-12)
    assert fl == B * H * (4.0 * L * S * D + 5.0 * L * S)
    # the steady state: a whole simulation of 5 batch elements agrees with the extrapolation
    assert costs.attention_cost(tg, 5 * H, L, S, D, "bfloat16", batch=5)[0] == \
        pytest.approx(_sim_rows(tg, 5, L, S, H, D)[0], rel=0.02)
    # per head: never below the Tensor Engine's time for the two products
    assert ns / (B * H) >= 4.0 * L * S * D / tg.tensor_bf16_flops_per_core * 1e9
    # whole-row loads beat the head-major kernel's short rows (the point of the layout)
    assert ns < costs.attention_cost(tg, B * H, L, S, D, "bfloat16")[0]
    # rows that do not fit fall back to the head-major kernel
    long = costs.attention_cost(tg, 2 * H, 128, 4096, D, "bfloat16", batch=2)
    assert long == costs.attention_cost(tg, 2 * H, 128, 4096, D, "bfloat16")


@pytest.mark.parametrize("tg", ["trn1", "trn2", "trn3"])
def test_rows_fit_admits_only_what_psum_holds(tg):
    """The PSUM rule of rows_fit: the fp32 scores of the pipeline's in-flight items (S x 4 bytes each) within a
    partition's PSUM; at the largest key length it admits the kernel runs (the capacity check passes), and one key
    tile more is refused and priced by the head-major kernel instead of failing."""
    t = get_target(tg)
    n = attention._STAGE_GAP + 1
    s_max = (t.psum_partition_bytes // (4 * n)) // 128 * 128
    assert attention.rows_fit(256, s_max, 2 * 64, 2, t)
    assert not attention.rows_fit(256, s_max + 128, 2 * 64, 2, t)
    _sim_rows(t, 2, 256, s_max, 2, 64)                 # no CapacityError at the limit it admits
    with pytest.raises(Exception, match="PSUM allocation"):
        _sim_rows(t, 1, 256, 2048, 2, 64)              # what the rule keeps away from the row kernel
    costs.clear_memo()
    assert costs.attention_cost(t, 2 * 16, 2048, 2048, 64, "bfloat16", batch=2) == \
        costs.attention_cost(t, 2 * 16, 2048, 2048, 64, "bfloat16")


def test_sdpa_charge_picks_the_row_kernel_for_token_rows():
    costs.clear_memo()
    B, H, L, D = 2, 8, 128, 64
    rows = torch.empty(B, L, H * D, dtype=torch.bfloat16).view(B, L, H, D).transpose(1, 2)   # a projection's view
    dense = torch.empty(B, H, L, D, dtype=torch.bfloat16)
    with device_target("trn1") as tg:
        ns_rows = charging.op_time("_scaled_dot_product_flash_attention_for_cpu", "sdpa",
                                   (rows, rows, rows, 0.0, False), None)[0]
        ns_dense = charging.op_time("_scaled_dot_product_flash_attention_for_cpu", "sdpa",
                                    (dense, dense, dense, 0.0, False), None)[0]
        assert ns_rows == costs.launch_ns(tg) + costs.attention_cost(tg, B * H, L, L, D, "bfloat16", batch=B)[0]
        assert ns_dense == costs.launch_ns(tg) + costs.attention_cost(tg, B * H, L, L, D, "bfloat16")[0]
        assert ns_rows != ns_dense


@pytest.mark.parametrize("B,H,L,S,D", [(2, 3, 384, 384, 64), (1, 2, 256, 640, 32), (1, 2, 640, 256, 32)])
def test_rows_causal_numerics_against_float64(B, H, L, S, D):
    # the diagonal in the first and in a later PSUM bank of scores (384, 640 keys), more keys than queries, and
    # query tiles past the last key (every key kept)
    rng = np.random.default_rng(4)
    q = rng.standard_normal((B, H, L, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(2))
    o = _run_rows(q, k, v, H, causal=True).reshape(B * H, L, D)
    qs, ks, vs = q.reshape(B * H, L, D), k.reshape(B * H, S, D), v.reshape(B * H, S, D)
    np.testing.assert_allclose(o, _ref(qs, ks, vs, D ** -0.5, causal=True), rtol=0, atol=2e-6)
    assert np.abs(o - _ref(qs, ks, vs, D ** -0.5)).max() > 1e-2


def test_sdpa_causal_charge_forward_and_backward():
    """``is_causal=True`` (the argument after the dropout probability, forward and backward) is charged the causal
    kernels' simulation, both layouts; the flops count the kept scores only."""
    costs.clear_memo()
    B, H, L, D = 2, 4, 1024, 64
    rows = torch.empty(B, L, H * D, dtype=torch.bfloat16).view(B, L, H, D).transpose(1, 2)
    dense = torch.empty(B, H, L, D, dtype=torch.bfloat16)
    with device_target("trn2") as tg:
        for t, batch in ((dense, None), (rows, B)):
            ns, _, fl, _ = charging.op_time("_scaled_dot_product_flash_attention_for_cpu", "sdpa",
                                            (t, t, t, 0.0, True), None)
            want = costs.attention_cost(tg, B * H, L, L, D, "bfloat16", batch=batch, causal=True)
            full = costs.attention_cost(tg, B * H, L, L, D, "bfloat16", batch=batch)
            assert (ns, fl) == (costs.launch_ns(tg) + want[0], want[1])
            assert fl == B * H * (4.0 * D + 5.0) * (L * (L + 1) // 2)
            assert want[0] < full[0]
            # the memo key names causal: the full cost is its own entry, simulated from the full kernel
            assert full[1] == B * H * (4.0 * L * L * D + 5.0 * L * L)
            bns = charging.op_time("_scaled_dot_product_flash_attention_for_cpu_backward", "backward:sdpa",
                                   (t, t, t, t, t, None, 0.0, True), None)[0]
            assert bns == pytest.approx(costs.launch_ns(tg) + costs.ATTN_BWD_RATIO * want[0], rel=1e-12)
        # the math op's is_causal follows its dropout probability too
        m = charging.op_time("_scaled_dot_product_attention_math", "sdpa", (dense, dense, dense, None, 0.0, True),
                             None)[0]
        assert m == costs.launch_ns(tg) + costs.attention_cost(tg, B * H, L, L, D, "bfloat16", causal=True)[0]


def test_kept_scores():
    assert costs._kept_scores(4, 4, False) == 16
    assert costs._kept_scores(4, 4, True) == 10           # 1 + 2 + 3 + 4
    assert costs._kept_scores(2, 5, True) == 3            # 1 + 2
    assert costs._kept_scores(5, 2, True) == 1 + 2 + 2 + 2 + 2


def test_device_charges_each_layout_its_own_kernel_even_with_equal_shapes():
    """The device's charge memo keys attention by its operands' strides too: a token-rows ``q`` after a head-major
    one of the same shape is charged the row kernel, not the head-major charge remembered for that shape."""
    from trnsim import backend
    from trnsim.backend.device_state import STATE
    B, H, L, D = 2, 4, 512, 64
    dense = torch.randn(B, H, L, D).to("neuron")
    rows = torch.randn(B, L, H * D).to("neuron").view(B, L, H, D).transpose(1, 2)

    def charged(t):
        with backend.profile_torch() as p:
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(t, t, t, 0.0, True)
        return [r.duration_ns for r in p.rows if r.op.endswith("flash_attention_for_cpu")]
    tg = STATE.target
    (d,), (r,) = charged(dense), charged(rows)
    assert d == pytest.approx(costs.launch_ns(tg) + costs.attention_cost(tg, B * H, L, L, D, "float32",
                                                                       causal=True)[0], rel=1e-9)
    assert r == pytest.approx(costs.launch_ns(tg) + costs.attention_cost(tg, B * H, L, L, D, "float32", batch=B,
                                                                       causal=True)[0], rel=1e-9)
    assert r != pytest.approx(d, rel=1e-3)
