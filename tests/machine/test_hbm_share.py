"""The chip's HBM bandwidth shared over time by the DMA transfers in flight (``trnsim.machine.hbm_share``):
the processor-sharing model against hand-computed completions, and the scheduler's use of it on multi-core
launches (the reference and the compiled loops give the same timeline; the aggregate never exceeds the peak)."""

import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import hbm_share, sched_fast, schedule
from trnsim.targets import TRN2

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def test_a_lone_transfer_moves_at_its_own_rate():
    fin = hbm_share.share([5.0], [100.0], [4.0], 10.0)
    assert fin[0] == pytest.approx(5.0 + 100.0 / 4.0)
    # its own rate is never above the capacity
    assert hbm_share.share([0.0], [100.0], [50.0], 10.0)[0] == pytest.approx(10.0)


def test_equal_transfers_share_equally():
    # two transfers of 100 bytes at up to 10 B/ns each on 10 B/ns: 5 each, both done at 20
    fin = hbm_share.share([0.0, 0.0], [100.0, 100.0], [10.0, 10.0], 10.0)
    assert fin.tolist() == pytest.approx([20.0, 20.0])


def test_a_later_transfer_joins_the_share():
    # A alone from 0 to 5 (50 of its 100 bytes), then A and B at 5 each: B's 50 bytes and A's last 50 take 10
    fin = hbm_share.share([0.0, 5.0], [100.0, 50.0], [10.0, 10.0], 10.0)
    assert fin.tolist() == pytest.approx([15.0, 15.0])


def test_the_peak_is_shared_in_proportion_to_the_rates_asked():
    # capacity 8: A asks 2, B asks 7 (9 in all): each gets its rate x 8/9; A (20 bytes) ends at 20 / (2 x 8/9) =
    # 11.25, when B has moved 11.25 x 7 x 8/9 = 70 bytes
    fin = hbm_share.share([0.0, 0.0], [20.0, 70.0], [2.0, 7.0], 8.0)
    assert fin[0] == pytest.approx(20.0 / (2.0 * 8.0 / 9.0))
    assert fin[1] == pytest.approx(70.0 / (7.0 * 8.0 / 9.0))
    # B with 140 bytes: after A ends, B alone at its own 7 (below 8) moves the other 70
    fin = hbm_share.share([0.0, 0.0], [20.0, 140.0], [2.0, 7.0], 8.0)
    assert fin[1] == pytest.approx(20.0 / (2.0 * 8.0 / 9.0) + (140.0 - 70.0) / 7.0)


def test_a_cores_overlapping_transfers_share_its_engines_first():
    # one core (limit 10) with two transfers asking 10 each, on a chip of 100: 5 each, both end at 20
    fin = hbm_share.share([0.0, 0.0], [100.0, 100.0], [10.0, 10.0], 100.0, [0, 0], [10.0])
    assert fin.tolist() == pytest.approx([20.0, 20.0])


def test_slowdowns_are_one_when_the_rates_fit():
    f = hbm_share.slowdowns([0.0, 0.0], [10.0, 10.0], [40.0, 40.0], [1.0, 1.0], 10.0)
    assert f.tolist() == [1.0, 1.0]
    f = hbm_share.slowdowns([0.0, 0.0], [10.0, 10.0], [100.0, 100.0], [1.0, 1.0], 10.0)
    assert f.tolist() == pytest.approx([2.0, 2.0])


def stream_big(x, n):
    """Each program loads and stores its own [128, F] blocks (large transfers, at the engines' full rate)."""
    P, F = x.shape
    pid = nl.program_id(0)
    out = nl.ndarray((P * nl.num_programs(0), F), dtype=x.dtype, buffer=nl.shared_hbm)
    for _ in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out[pid * P:(pid + 1) * P, :], u)
    return out


@pytest.fixture(scope="module")
def eight_cores():
    x = np.zeros((128, 4096), np.float32)
    return run_kernel(stream_big, (x,), {"n": 6}, (8,), "trn2", execute=False)


def test_eight_streaming_cores_share_the_chip_peak(eight_cores):
    tl = schedule(eight_cores.cores, impl="python")
    cap = TRN2.hbm_peak_bytes_per_s * 1e-9
    one = schedule(run_kernel(stream_big, (np.zeros((128, 4096), np.float32),), {"n": 6}, (1,), "trn2",
                              execute=False).cores)
    hbm = sum(r.hbm_bytes for r in tl.rows())
    assert hbm == 8 * sum(r.hbm_bytes for r in one.rows())
    # the chip moves no more than its peak: the launch takes at least its HBM bytes at 2,900 GB/s after the first
    # transfer's fixed cost
    assert tl.total_ns >= hbm / cap + TRN2.dma_fixed_ns
    # each core's loads and stores are HBM-bound at 368 GB/s alone; 8 x 368 = 2,944 GB/s asked of 2,900 GB/s
    # slows them all by 2,944 / 2,900 (the ideal sharing; the rescheduling rounds leave it within 1%)
    ideal = one.total_ns * 8 * TRN2.dma_bytes_per_ns_per_core / cap
    assert ideal <= tl.total_ns <= 1.01 * ideal
    # deterministic
    assert schedule(eight_cores.cores, impl="python") == tl


def test_the_compiled_loop_gives_the_same_shared_timeline(eight_cores):
    if not sched_fast.fast_available():
        pytest.skip("numba is not available: only the reference scheduler runs")
    from tests.machine.test_sched_fast import assert_same
    assert_same(schedule(eight_cores.cores, impl="python"), schedule(eight_cores.cores, impl="numba"))


def test_a_single_core_launch_is_not_shared():
    # one core's 16 engines (2 x 368 GB/s HBM to HBM at most) cannot exceed 2,900 GB/s: the first placement stands
    res = run_kernel(stream_big, (np.zeros((128, 4096), np.float32),), {"n": 6}, (1,), "trn2", execute=False)
    tl = schedule(res.cores)
    assert hbm_share_rounds_changes(res) is None
    assert tl.total_ns > 0


def hbm_share_rounds_changes(res):
    from trnsim.machine import scheduler
    tg = res.cores[0].target
    cap = tg.hbm_peak_bytes_per_s * 1e-9
    first = scheduler._schedule_pass(res.cores, cap, "python", None, None, 0)
    return scheduler.share_rounds(res.cores, first, cap, lambda *ov: pytest.fail("rescheduled"))


def test_the_findings_name_the_chip_hbm_peak(eight_cores):
    from trnsim.profiler.findings import findings, hbm_peak_share
    tl = schedule(eight_cores.cores)
    share, span = hbm_peak_share(tl)
    # the launch's HBM bytes over the time transfers were in flight, against 2,900 GB/s: the cores' loads and
    # stores keep the peak busy (8 x 368 GB/s asked), so the share is close to 1 and never above it
    assert 0.9 <= share <= 1.0 + 1e-9
    assert 0 < span <= tl.total_ns
    assert any("HBM at the chip's peak" in f for f in findings(tl))
    one = schedule(run_kernel(stream_big, (np.zeros((128, 4096), np.float32),), {"n": 6}, (1,), "trn2",
                              execute=False).cores)
    # one core's 368 GB/s is an eighth of the peak: no such finding
    assert hbm_peak_share(one)[0] == pytest.approx(
        sum(one.hbm_bytes) / (hbm_peak_share(one)[1] * TRN2.hbm_peak_bytes_per_s * 1e-9))
    assert hbm_peak_share(one)[0] < 0.2
    assert not any("HBM at the chip's peak" in f for f in findings(one))
