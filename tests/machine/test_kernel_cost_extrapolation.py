"""The device's op costs extrapolate large library kernels from the simulation of a few of their identical steps;
each extrapolation is compared here with the simulation of the whole kernel."""

import pytest

from trnsim.backend import costs
from trnsim.targets import TRN2


@pytest.fixture
def fresh():
    costs.clear_memo()
    yield
    costs.clear_memo()


def _whole(monkeypatch, f):
    monkeypatch.setattr(costs, "_linear", lambda run, n, n1, n2: run(n))
    costs.clear_memo()
    return f()


@pytest.mark.parametrize("name, f", [
    ("elementwise", lambda: costs.elementwise_cost(TRN2, 128 * 2048 * 20 + 128 * 100, "bfloat16", "binary")),
    ("reduction", lambda: costs.reduction_cost(TRN2, 128 * 9, 3000, "float32")),
    ("softmax", lambda: costs.softmax_cost(TRN2, 128 * 9, 4096, "float32")),
    ("rms_norm", lambda: costs.norm_cost(TRN2, 128 * 9, 4096, "bfloat16", "rms_norm")),
])
def test_linear_extrapolation_matches_the_whole_kernel(fresh, monkeypatch, name, f):
    ext = f()
    whole = _whole(monkeypatch, f)
    assert ext[2] == pytest.approx(whole[2], rel=1e-9)            # bytes moved: exact
    assert ext[0] == pytest.approx(whole[0], rel=0.02)            # time: the steady state holds within 2%


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
