"""More of the estimator's claims, each checked against the model it says it implements: the deferred (parallel)
kernel simulations change nothing, the blocked matmul's contraction extrapolation matches the whole kernel, data
parallelism, tensor parallelism, memory with what would fit, fp8, compiled mode, prices, and the search."""

import json

import pytest

from trnsim.backend import costs
from trnsim.cost import estimator as E
from trnsim.cost import step
from trnsim.cost.models import ModelSpec, load_model
from trnsim.targets import TRN2


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


TINY = ModelSpec(name="tiny", hidden=256, layers=4, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)
SEQ = 256


def _fresh():
    step._MEMO.clear()
    step._SEEN.clear()
    costs.clear_memo()


# -- speed paths: same numbers -------------------------------------------------------------------------------
@pytest.mark.parametrize("jobs", [1, 2])
def test_deferred_parallel_kernel_simulations_give_the_same_layer_costs(jobs):
    spec = ModelSpec(name="tiny2", hidden=384, layers=2, heads=6, kv_heads=2, head_dim=64, ffn=1024, vocab=4096)
    _fresh()
    direct = step.layer_cost(spec, "dense", tp=2, seq=SEQ), step.head_cost(spec, tp=2, seq=SEQ)
    _fresh()
    n = step.prepare([("layer", spec, dict(kind="dense", tp=2, seq=SEQ)), ("head", spec, dict(tp=2, seq=SEQ))],
                     jobs=jobs)
    # kernel costs were missing: simulated by prepare, in parallel (counted) or in this process as the run met them
    assert n > 0 if jobs > 1 else n == 0
    sims = []
    orig = costs._sim
    costs._sim = lambda *a, **k: sims.append(a) or orig(*a, **k)
    try:
        prepared = step.layer_cost(spec, "dense", tp=2, seq=SEQ), step.head_cost(spec, tp=2, seq=SEQ)
    finally:
        costs._sim = orig
    assert sims == []                              # ... all of them: the real runs simulate nothing
    import dataclasses
    for a, b in zip(prepared, direct):   # the same, up to the rounding of the device clock's absolute time
        for f in dataclasses.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            assert x == (pytest.approx(y, rel=1e-12) if isinstance(y, float) else y), f.name


@pytest.mark.parametrize("m, k, n", [(512, 4096, 1024),      # whole-K mode, one block, 32 k-tiles
                                     (512, 12288, 1024)])    # chunked mode, 5.3 chunks
def test_blocked_matmul_contraction_extrapolation_matches_the_whole_kernel(m, k, n):
    from trnsim.kernels.library import matmul_blocked
    mb, nb, kc = matmul_blocked.block_shape(TRN2, m, n, k, 2)
    whole_k = kc >= k
    assert k > (24 * 128 if whole_k else 5 * kc)             # the extrapolated path is the one tested
    ext = costs.blocked_matmul_ns(TRN2, m, k, n, "bfloat16")
    whole = costs.blocked_matmul_ns(TRN2, m, k, n, "bfloat16", extrapolate=False)
    assert ext[1] == pytest.approx(whole[1], rel=1e-12)      # flops and bytes are linear in k: exact
    assert ext[2] == pytest.approx(whole[2], rel=1e-12)
    assert ext[0] == pytest.approx(whole[0], rel=0.005)


def test_blocked_matmul_extrapolation_of_a_wide_block_row_matches_the_whole_kernel_and_its_bounds():
    # 4096^3 bf16: block rows of 8 stationary tiles (1024 rows); extrapolated over 32 k-tiles from 8 and 16
    from trnsim.kernels.library import matmul_blocked
    m = k = n = 4096
    mb, nb, kc = matmul_blocked.block_shape(TRN2, m, n, k, 2)
    assert (mb, kc) == (1024, k)
    ext = costs.blocked_matmul_ns(TRN2, m, k, n, "bfloat16")[0]
    whole = costs.blocked_matmul_ns(TRN2, m, k, n, "bfloat16", extrapolate=False)[0]
    assert ext == pytest.approx(whole, rel=0.02)
    # never faster than the Tensor Engine's matmuls: (m/128)(n/512)(k/128) of 512 moving columns each
    pe = (m // 128) * (n // 512) * (k // 128) * 512 / TRN2.engine_clock_hz["tensor"] * 1e9
    assert min(ext, whole) >= pe


# -- data parallelism -----------------------------------------------------------------------------------------
def test_doubling_dp_from_one_halves_compute_and_adds_exactly_the_exposed_gradient_all_reduce():
    from trnsim.collectives import collective_time
    kw = dict(tp=8, pp=4, cp=2, fsdp=False, seq=SEQ, global_batch=32)
    one = E.estimate(TINY, "trn2.48xlarge", 1, **kw)
    two = E.estimate(TINY, "trn2.48xlarge", 2, **kw)
    assert (one.parallelism.dp, two.parallelism.dp) == (1, 2)
    for k in ("compute: tensor engine", "compute: vector/scalar/dma", "launch overhead"):
        assert two.breakdown[k] == pytest.approx(one.breakdown[k] / 2, rel=1e-12), k
    assert "dp gradient all_reduce" not in one.collectives
    # the all-reduce of the rank's bf16 gradients over the DP group, minus the last backward it overlaps
    params = sum(E.state_memory(TINY, two.parallelism).values()) / 16          # 2 + 2 + 12 bytes per parameter
    topo = E._topology("trn2.48xlarge", 2, 2)
    group = E.rank_layout(two.parallelism)["dp"][0]
    ar = collective_time("all_reduce", int(params * 2), topo, nranks=topo.ranks, group=group).time_ns * 1e-9
    c = step.layer_cost(TINY, "dense", tp=8, seq=SEQ // 2, target="trn2", sp=True)
    h = step.head_cost(TINY, tp=8, seq=SEQ // 2, target="trn2", sp=True)
    bwd = (1 * c.bwd_ns + h.bwd_ns) / 2 * 1e-9                                  # 1 layer per stage, LNC=2
    assert two.collectives["dp gradient all_reduce"] == pytest.approx(max(0.0, ar - bwd), rel=1e-9)
    assert two.tokens_per_s > one.tokens_per_s


# -- tensor parallelism ---------------------------------------------------------------------------------------
def test_tp_collectives_are_four_per_layer_per_micro_batch_step_of_the_activation():
    from trnsim.collectives import collective_time
    topo = E._topology("trn2.48xlarge", 1, 2)

    def coll(op, e):
        group = E.rank_layout(e.parallelism)["tp"][0]
        return collective_time(op, SEQ * TINY.hidden * 2, topo, nranks=topo.ranks, group=group).time_ns * 1e-9
    e = E.estimate(TINY, "trn2.48xlarge", 1, tp=4, seq=SEQ, global_batch=64, sequence_parallel=False)
    mbs = e.global_batch // e.parallelism.dp
    assert e.breakdown["comm: tp all_reduce"] == pytest.approx(mbs * 4 * TINY.layers * coll("all_reduce", e),
                                                              rel=1e-9)
    # sequence parallel: each all-reduce becomes an all-gather and a reduce-scatter of the same activation, and
    # the norms and residuals of a rank work on 1/tp of the sequence; the LM head all-gathers its normed input
    # (and reduce-scatters its gradient): one pair more per micro-batch
    s = E.estimate(TINY, "trn2.48xlarge", 1, tp=4, seq=SEQ, global_batch=64)
    both = coll("all_gather", s) + coll("reduce_scatter", s)
    assert s.breakdown["comm: tp all_gather/reduce_scatter (sequence parallel)"] == pytest.approx(
        mbs * (4 * TINY.layers + 1) * both, rel=1e-9)
    assert s.memory["activations"] < e.memory["activations"]
    # and the matmul work per micro-batch shrinks with TP: 4-way TP does less than 1/2 of TP1's Tensor Engine flops
    # per rank, in less time (not in proportion: this tiny layer's kernels are mostly their fixed costs, and the
    # attention kernel is one launch over the rank's heads whichever their number)
    t1 = step.layer_cost(TINY, "dense", tp=1, seq=SEQ, target="trn2")
    t4 = step.layer_cost(TINY, "dense", tp=4, seq=SEQ, target="trn2")
    assert t4.flops < t1.flops / 2
    assert t4.tensor_ns < t1.tensor_ns


# -- memory ---------------------------------------------------------------------------------------------------
def test_out_of_memory_names_the_numbers_and_what_it_suggests_does_fit():
    big = load_model("llama3-70b")
    bad = E.estimate(big, "trn2.48xlarge", 1, tp=1, pp=1, fsdp=False, seq=SEQ, global_batch=64)
    note = bad.notes[-1]
    need = f"{bad.hbm_per_rank_bytes / 2 ** 30:.1f} GiB per rank"
    assert f"does not fit: needs {need}, has 24.0 GiB" in note
    assert "FSDP" in note and "more tensor or pipeline parallelism" in note
    good = E.estimate(big, "trn2.48xlarge", 1, tp=8, pp=8, fsdp=True, checkpointing=True, seq=SEQ, global_batch=64)
    assert good.fits and good.hbm_per_rank_bytes <= good.hbm_capacity_bytes


# -- fp8 ------------------------------------------------------------------------------------------------------
def test_fp8_double_row_matmul_takes_about_half_the_bf16_kernel_time():
    ns16 = costs.matmul_cost(TRN2, 4096, 4096, 4096, "bfloat16")[0]
    mm8, cast = step.fp8_matmul_ns(TRN2, 4096, 4096, 4096)
    assert mm8 == pytest.approx(ns16 / 2, rel=0.10)
    assert cast > 0


def test_fp8_estimate_moves_time_from_the_tensor_engine_to_casts_and_is_refused_on_trn1():
    spec = ModelSpec(name="mid", hidden=1024, layers=2, heads=8, kv_heads=8, head_dim=128, ffn=4096, vocab=4096)
    b = E.estimate(spec, "trn2.48xlarge", 1, tp=4, seq=1024, global_batch=16)
    f = E.estimate(spec, "trn2.48xlarge", 1, tp=4, seq=1024, global_batch=16, precision="fp8")
    assert f.breakdown["compute: tensor engine"] < 0.8 * b.breakdown["compute: tensor engine"]
    assert f.breakdown["compute: vector/scalar/dma"] > b.breakdown["compute: vector/scalar/dma"]
    assert any(n.startswith("fp8:") for n in f.notes)
    with pytest.raises(ValueError, match="precision fp8 on trn1.32xlarge"):
        E.estimate(spec, "trn1.32xlarge", 1, tp=4, seq=1024, global_batch=32, precision="fp8")


# -- compiled -------------------------------------------------------------------------------------------------
def test_compiled_mode_runs_the_compile_backend_and_prices_its_compile_time(tmp_path):
    from trnsim.backend.compile.stats import HW_COMPILE_FIXED_S, HW_COMPILE_PER_OP_S
    eager = step.layer_cost(TINY, "dense", tp=1, seq=SEQ, target="trn2")
    comp = step.layer_cost(TINY, "dense", tp=1, seq=SEQ, target="trn2", compiled=True)
    assert comp.graphs >= 2 and comp.graph_ops > 0                  # forward and backward graphs compiled
    assert comp.launches < eager.launches / 4                       # a launch per graph, not per op
    prices = tmp_path / "p.json"
    prices.write_text(json.dumps({"rows": [{"instance": "trn2.48xlarge", "usd_per_hour": 40.0, "source": "test",
                                            "retrieved": "today"}]}))
    e = E.estimate(TINY, "trn2.48xlarge", 1, tp=1, seq=SEQ, global_batch=64, compiled=True, prices=str(prices))
    head = step.head_cost(TINY, tp=1, seq=SEQ, target="trn2", compiled=True)
    assert e.compile_s == pytest.approx(2 * HW_COMPILE_FIXED_S +
                                        HW_COMPILE_PER_OP_S * (TINY.layers * comp.graph_ops + head.graph_ops))
    assert e.usd_for_compile == pytest.approx(40.0 * e.compile_s / 3600)
    assert e.breakdown["launch overhead"] < E.estimate(TINY, "trn2.48xlarge", 1, tp=1, seq=SEQ,
                                                       global_batch=64).breakdown["launch overhead"]


# -- prices ---------------------------------------------------------------------------------------------------
def test_every_built_in_price_row_is_dated_and_sourced_and_user_rows_replace_them(tmp_path):
    rows = json.load(open(E._DATA + "/prices.json"))["rows"]
    for r in rows:
        assert r["source"].strip() and r["retrieved"].strip() and r["usd_per_hour"] > 0
        assert "http" in r["source"]
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"rows": [{"instance": "trn1.32xlarge", "usd_per_hour": 9.0, "source": "my deal",
                                          "retrieved": "2026-12-01", "kind": "reserved"}]}))
    merged = E.load_prices(str(mine))
    assert merged["trn1.32xlarge"]["usd_per_hour"] == 9.0
    assert set(merged) >= {r["instance"] for r in rows}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": [{"instance": "trn2.48xlarge", "usd_per_hour": -1, "source": "x",
                                         "retrieved": "y"}]}))
    with pytest.raises(ValueError, match=r"bad.json: row 0 \(trn2.48xlarge\): usd_per_hour -1 is not a positive"):
        E.load_prices(str(bad))
    bad.write_text(json.dumps({"rows": [{"instance": "trn9.huge", "usd_per_hour": 1, "source": "x",
                                         "retrieved": "y"}]}))
    with pytest.raises(ValueError, match="unknown instance 'trn9.huge'"):
        E.load_prices(str(bad))


# -- search ---------------------------------------------------------------------------------------------------
def test_search_prunes_by_training_state_first_and_matches_single_estimates():
    from trnsim.cost.search import candidates, search
    big = ModelSpec(name="wide", hidden=4096, layers=4, heads=8, kv_heads=8, head_dim=512, ffn=14336,
                    vocab=128256)
    res, front, rejected = search(big, "trn2.48xlarge", counts=(1,), micro_batches=(1,), seq=128, jobs=1,
                                  fsdp=False)
    cands = candidates(big, "trn2.48xlarge", (1,), (1,), 128)
    assert len(res) + len(rejected) == len(cands)
    state = [r for r in rejected if "the training state alone needs" in r[1]]
    assert state, "some candidate cannot hold its weights and optimizer"
    for c, why in state:
        par = E.Parallelism(c["dp"], c["tp"], c["pp"], 1, c["ep"], False, c["micro_batch"])
        assert sum(E.state_memory(big, par).values()) > E.capacity_per_rank("trn2.48xlarge")
    for e in front:
        p = e.parallelism
        again = E.estimate(big, "trn2.48xlarge", e.count, dp=p.dp, tp=p.tp, pp=p.pp, ep=p.ep, seq=128,
                           checkpointing=p.checkpointing, fsdp=False)
        assert again.step_time_s == e.step_time_s and again.fits
    # the front: nothing feasible is better on both time and cost
    for e in front:
        assert not any(o.step_time_s < e.step_time_s and o.count <= e.count for o in res)
