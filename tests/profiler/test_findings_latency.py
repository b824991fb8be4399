"""The Timeline's findings on dependent instructions' fixed latency and on descriptor generation (DGE): each
figure is checked against the formula of the timing model (targets.py figures), never against wall-clock time."""
import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule
from trnsim.profiler.findings import dependency_latency, dge_time, findings
from trnsim.targets import TRN1, TRN2

trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def timeline(fn, *args, target="trn2", **kwargs):
    return schedule(run_kernel(fn, args, kwargs, (1,), target, execute=False).cores)


def vector_chain(x, n):
    """A memset, then ``n`` dependent 1-element tensor_scalar instructions on the Vector Engine (no DMA)."""
    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(t, 1.0, engine=nisa.vector_engine)
    for _ in range(n):
        nisa.tensor_scalar(t, t, nl.multiply, 1.0, engine=nisa.vector_engine)
    return None


def one_load(x, mode):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x, dge_mode=mode)
    return None


def stream(x, mode):
    R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128, :], dge_mode=mode)
        nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(out[i * 128:(i + 1) * 128, :], t, dge_mode=mode)
    return out


@pytest.mark.parametrize("tg", [TRN1, TRN2], ids=lambda t: t.name)
def test_dependency_latency_of_a_one_engine_chain(tg):
    n = 20
    tl = timeline(vector_chain, None, n, target=tg.name)
    clk = tg.engine_clock_hz["vector"] * 1e-9
    cost = tg.min_ii_cycles                                       # 1 element: max(MIN_II, 1)
    mem_lat = tg.static_overhead_cycles + tg.access_request_cycles          # memset: one write
    ts_lat = tg.static_overhead_cycles + 2 * tg.access_request_cycles       # one read, one write
    # each instruction starts when the previous one's result is committed: the chain's total is all of it
    assert tl.total_ns == pytest.approx(((cost + mem_lat) + n * (cost + ts_lat)) / clk)
    # the critical path is the whole chain; its part after each cost is the fixed latency
    assert dependency_latency(tl) == pytest.approx((mem_lat + n * ts_lat) / ((cost + mem_lat) + n * (cost + ts_lat)))
    text = "\n".join(findings(tl))
    # each tensor_scalar waits on its own engine for the one before (the first for the memset)
    own = (mem_lat + (n - 1) * ts_lat) / ((cost + mem_lat) + n * (cost + ts_lat))
    assert f"Vector Engine idle waiting for its own previous instructions' results {100 * own:.0f}%" in text
    assert f"{100 * dependency_latency(tl):.0f}% of the critical path is dependent instructions' fixed latency" in text
    assert "semaphores" not in text                               # no other engine is involved


def test_independent_instructions_hide_the_latency():
    # 1-element memsets into distinct tiles: the Vector Engine issues one per MIN_II; only the last one's latency
    # is on the critical path
    def k(x, n):
        for _ in range(n):
            t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(t, 1.0, engine=nisa.vector_engine)
        return None
    n = 50
    tl = timeline(k, None, n)
    lat = TRN2.static_overhead_cycles + TRN2.access_request_cycles
    assert tl.total_ns == pytest.approx((n * TRN2.min_ii_cycles + lat) / (TRN2.engine_clock_hz["vector"] * 1e-9))
    assert dependency_latency(tl) == pytest.approx(lat / (n * TRN2.min_ii_cycles + lat))
    assert not any("own previous instructions" in f for f in findings(tl))


def test_dge_time_of_a_lone_hwdge_transfer():
    x = np.zeros((128, 1), np.float32)
    tl = timeline(one_load, x, nisa.dge_mode.hwdge)
    dma = [r for r in tl.rows() if r.engine == "dma"]
    assert len(dma) == 1
    g = TRN2.dma_dge_instruction_ns                               # docs/hardware.md: about 600 ns per DMA instruction
    per, waiting, on_path = dge_time(tl)
    assert per == {"hwdge": (1, pytest.approx(g))}
    # the transfer is the whole critical path; it waited for its descriptors from its trigger (t=0) for 600 ns
    assert tl.total_ns > g + TRN2.dma_fixed_ns
    assert waiting == pytest.approx(g / tl.total_ns)
    assert on_path == pytest.approx(g / tl.total_ns)
    text = "\n".join(findings(tl))
    assert "hwdge for 1 DMA instructions, 0.6 us on the two hardware DGE blocks" in text
    assert f"{100 * on_path:.0f}% of the critical path" in text
    # the same transfer with pre-computed descriptors: no DGE, no sentence
    tl0 = timeline(one_load, x, nisa.dge_mode.none)
    assert dge_time(tl0) == ({}, 0.0, 0.0)
    assert not any("descriptor generation" in f for f in findings(tl0))
    assert tl.total_ns - tl0.total_ns == pytest.approx(g)


def test_dge_time_of_a_swdge_stream_counts_gpsimd_time_and_its_share_of_the_path():
    x = np.zeros((2048, 512), np.float32)
    tl = timeline(stream, x, nisa.dge_mode.swdge)
    n_dma = sum(r.engine == "dma" for r in tl.rows())
    per, waiting, on_path = dge_time(tl)
    assert set(per) == {"swdge"} and per["swdge"][0] == n_dma == 32
    # swdge runs on the GpSimd Engine: its busy time there is the DGE time (no GpSimd instruction in the kernel)
    assert per["swdge"][1] == pytest.approx(sum(e - s for _, _, _, s, e in tl.dge))
    assert per["swdge"][1] == pytest.approx(tl.busy_ns()[(0, "gpsimd")])
    assert 0.0 < on_path <= waiting <= 1.0
    assert any("swdge for 32 DMA instructions" in f for f in findings(tl, limit=10))
