"""The device's op costs extrapolate large library kernels from the simulation of a few of their identical steps;
each extrapolation is compared here with the simulation of the whole kernel."""

import pytest

from trnsim.backend import costs
from trnsim.targets import TRN1, TRN2, TRN3


@pytest.fixture
def fresh():
    costs.clear_memo()
    yield
    costs.clear_memo()


def _whole(monkeypatch, f):
    monkeypatch.setattr(costs, "_linear", lambda run, n, n1, n2: run(n))
    monkeypatch.setattr(costs, "_tiles", lambda run, n, P: run(n))
    costs.clear_memo()
    return f()


_FT = 2048       # elementwise.FREE_TILE: columns a chunk (one tile of an elementwise kernel)


@pytest.mark.parametrize("target", [TRN1, TRN2, TRN3], ids=lambda t: t.name)
@pytest.mark.parametrize("name, f", [
    ("binary bf16, partial chunk", lambda t: costs.elementwise_cost(t, 128 * (_FT * 40 + 100), "bfloat16", "binary")),
    # per-chunk times repeat every second (trn2 fp32: 2,849 / 8,548 ns) or third chunk (trn2 bf16: 1,707, 1,707,
    # 5,152 ns), which an extrapolation from 4 and 8 chunks missed by up to 9.3%
    ("unary fp32", lambda t: costs.elementwise_cost(t, 128 * _FT * 38, "float32", "unary", "exp")),
    ("unary bf16, partial chunk", lambda t: costs.elementwise_cost(t, 128 * (_FT * 45 + 1024), "bfloat16", "unary",
                                                                   "exp")),
    # trn3: the start-up lasts 8 chunks before the period of 4 sets in
    ("unary bf16, long start-up", lambda t: costs.elementwise_cost(t, 128 * _FT * 50, "bfloat16", "unary", "exp")),
    ("copy fp32, partial chunk", lambda t: costs.elementwise_cost(t, 128 * (_FT * 37 + 2047), "float32", "copy")),
])
def test_elementwise_extrapolation_equals_the_whole_kernel(fresh, monkeypatch, target, name, f):
    """Elementwise kernels step over column chunks as row kernels over row tiles: the same two runs a whole number
    of periods apart past the start-up, a partial last chunk at the end of both."""
    ext = f(target)
    whole = _whole(monkeypatch, lambda: f(target))
    assert ext[2] == pytest.approx(whole[2], rel=1e-9)
    assert ext[0] == pytest.approx(whole[0], rel=1e-9)


@pytest.mark.parametrize("name, f", [
    ("reduction", lambda: costs.reduction_cost(TRN2, 128 * 40, 3000, "float32")),
    ("softmax", lambda: costs.softmax_cost(TRN2, 128 * 41, 4096, "float32")),
    ("rms_norm", lambda: costs.norm_cost(TRN2, 128 * 43, 4096, "bfloat16", "rms_norm")),
    # 64-column rows: per-tile times repeat every third tile (852, 852, 3,409 ns on trn2), which an extrapolation
    # from 2 and 4 tiles missed by 23% at 12 tiles
    ("reduction, short rows", lambda: costs.reduction_cost(TRN2, 128 * 40, 64, "float16", "maximum")),
    # a last, partial tile (rows not a multiple of 128): kept at the end of both runs
    ("reduction, partial tile", lambda: costs.reduction_cost(TRN2, 128 * 38 + 37, 3000, "float32")),
    ("reduction, short rows, partial tile", lambda: costs.reduction_cost(TRN2, 128 * 40 + 64, 64, "float16", "maximum")),
    ("softmax, partial tile", lambda: costs.softmax_cost(TRN2, 128 * 39 + 69, 197, "float32")),
    ("layer_norm, partial tile", lambda: costs.norm_cost(TRN2, 128 * 37 + 100, 768, "bfloat16")),
])
def test_row_kernel_extrapolation_equals_the_whole_kernel(fresh, monkeypatch, name, f):
    """Two runs a whole number of periods apart follow the steady state's repeating per-tile times exactly."""
    ext = f()
    whole = _whole(monkeypatch, f)
    assert ext[2] == pytest.approx(whole[2], rel=1e-9)
    assert ext[0] == pytest.approx(whole[0], rel=1e-9)


def test_row_kernels_simulate_few_tiles(fresh, monkeypatch):
    """602,176 rows (bitsandbytes' quantize_4bit of a 6,208 x 6,208 identity: 4,704 full tiles and a half) are
    charged from two runs of at most ``WARMUP + 2 PERIOD`` tiles, not one simulation of 4,705 tiles; small kernels
    are simulated whole."""
    sizes = []
    sim = costs._sim

    def counting(fn, args, kw, target):
        sizes.append(args[0].shape[0])
        return sim(fn, args, kw, target)
    monkeypatch.setattr(costs, "_sim", counting)
    ns, _, nbytes = costs.reduction_cost(TRN2, 602176, 64, "float16", "maximum")
    k1 = costs.WARMUP + (4704 - costs.WARMUP) % costs.PERIOD
    assert sorted(sizes) == [k1 * 128 + 64, (k1 + costs.PERIOD) * 128 + 64]
    assert max(sizes) < (costs.WARMUP + 2 * costs.PERIOD) * 128
    assert nbytes == pytest.approx(602176 * 64 * 2 + 602176 * 2, rel=1e-9)   # every input read, one value a row out
    sizes.clear()
    small = (costs.WARMUP + 2 * costs.PERIOD - 1) * 128 + 5
    costs.reduction_cost(TRN2, small, 64, "float16", "maximum")
    assert sizes == [small]


def test_blocked_matmul_extrapolation_matches_the_whole_kernel(fresh):
    m, k, n = 1536, 8192, 3072      # 3 block rows x 3 blocks, whole-K mode
    ext = costs.blocked_matmul_ns(TRN2, m, k, n, "bfloat16")
    whole = costs.blocked_matmul_ns(TRN2, m, k, n, "bfloat16", extrapolate=False)
    assert ext[1] == pytest.approx(whole[1]) and ext[2] == pytest.approx(whole[2])
    assert ext[0] == pytest.approx(whole[0], rel=0.01)


def test_large_matmuls_run_near_the_tensor_engine_peak(fresh):
    # the blocked kernel keeps the Tensor Engine busy: a 4096^3 bf16 product within 10% of 79 TFLOPS
    ns, flops, _ = costs.matmul_cost(TRN2, 4096, 4096, 4096, "bfloat16")
    assert flops == 2 * 4096 ** 3
    ideal = flops / TRN2.tensor_bf16_flops_per_core * 1e9
    assert ideal <= ns <= ideal / 0.90
