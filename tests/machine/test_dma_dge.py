"""DMA queues (in order within a queue) and descriptor generation (none / swdge / hwdge): isa/dma_dge.py and the
scheduler, against the rules of docs/hardware.md#dma-in-detail; the compiled loop gives the same timeline."""

import numpy as np
import pytest

import trnsim
from trnsim.isa.dma_dge import DGE_HW, DGE_NONE, DGE_SW, NO_QUEUE, dge_of
from trnsim.isa.errors import NkiValidationError
from trnsim.kernels.jit import run_kernel
from trnsim.machine import dma_share, schedule, sched_fast
from trnsim.profiler.trace import trace_events
from trnsim.targets import get_target

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

TG = get_target("trn2")
E = nisa.engine


class _Core:
    target = TG


def test_dge_of_resolves_modes_queues_and_costs():
    c = _Core()
    assert dge_of(c, "dma_copy", None, None, None, 1) == (DGE_NONE, NO_QUEUE, 0.0)
    assert dge_of(c, "dma_copy", None, nisa.dge_mode.unknown, None, 1) == (DGE_NONE, NO_QUEUE, 0.0)
    # plain ints are nki.isa.dge_mode's values (nki-library passes 3 for none)
    assert [dge_of(c, "dma_copy", None, v, None, 1)[0] for v in (0, 1, 2, 3)] == [DGE_NONE, DGE_SW, DGE_HW,
                                                                                   DGE_NONE]
    # unknown on an indirect gather/scatter: swdge, the only mode for it (nki-dge)
    assert dge_of(c, "dma_copy", None, nisa.dge_mode.unknown, None, 3, gathered=True)[0] == DGE_SW
    m, q, cost = dge_of(c, "dma_copy", None, nisa.dge_mode.swdge, None, 3)
    assert (m, q, cost) == (DGE_SW, NO_QUEUE, TG.gpsimd_fixed_cycles + 3)
    m, q, cost = dge_of(c, "dma_copy", None, nisa.dge_mode.hwdge, E.scalar, 1)
    assert m == DGE_HW and cost == 600.0 and q >= 0
    # one queue per (trigger engine, DGE mode)
    keys = {dge_of(c, "dma_copy", None, md, en, 1)[1] for md in (nisa.dge_mode.none, nisa.dge_mode.hwdge)
            for en in (E.sync, E.scalar, E.gpsimd)}
    assert len(keys) == 6


@pytest.mark.parametrize("kw, what", [({"dge_mode": "fast"}, "dge_mode"), ({"dge_mode": 7}, "dge_mode"),
                                      ({"engine": "pe"}, "engine")])
def test_bad_dge_mode_or_trigger_engine_is_refused(kw, what):
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, **kw)
        return None
    with pytest.raises(NkiValidationError, match=what):
        k(np.zeros((128, 4), np.float32))


def _store_then_load(store_engine, load_engine, mode=None):
    def k(src, other):
        a = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(a, src)
        c = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(c, a, nl.multiply, 2.0, engine=nisa.vector_engine)
        for _ in range(6):
            nisa.tensor_scalar(c, c, nl.multiply, 2.0, engine=nisa.vector_engine)
        out = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.private_hbm)
        nisa.dma_copy(out, c, engine=store_engine, dge_mode=mode)
        b = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(b, other, engine=load_engine, dge_mode=mode)
        return None
    return k


def _timelines(kernel, *arrays, target="trn2", execute=False):
    """The python and the compiled schedules of one run (asserted identical when numba is there)."""
    res = run_kernel(kernel, arrays, {}, (1,), target, execute=execute)
    tl = schedule(res.cores, impl="python")
    if sched_fast.fast_available():
        assert schedule(res.cores, impl="numba") == tl
    return tl


def _dma(tl):
    return [r for r in tl.rows() if r.engine == "dma"]


def test_transfers_on_one_queue_move_in_program_order():
    x = np.zeros((128, 512), np.float32)
    # the queue order under the round robin (on by default): the load waits for its queue's store
    rr = _dma(_timelines(_store_then_load(E.sync, E.sync), x, x))
    assert rr[2].start < rr[1].start and rr[2].data_start == pytest.approx(rr[1].end)
    assert rr[2].bind == rr[1].index
    # the same and the other queues without the round robin (TRNSIM_DMA_ROUND_ROBIN=0)
    prev = dma_share.set_enabled(False)
    try:
        same = _dma(_timelines(_store_then_load(E.sync, E.sync), x, x))
        other = _dma(_timelines(_store_then_load(E.scalar, E.sync), x, x))
        default = _dma(_timelines(_store_then_load(None, None), x, x))
    finally:
        dma_share.set_enabled(prev)
    store, load = same[1], same[2]
    assert load.start < store.start                       # the load was ready long before the store
    assert load.data_start == pytest.approx(store.end)    # but its queue's last transfer went first
    assert load.bind == store.index
    # on another queue (or with no queue named) the load does not wait for the store
    assert other[2].end < store.start and default[2].end == other[2].end
    assert other[1].end == store.end
    # with the round robin: it moves at once with the first load (of no named queue: another class), the
    # engines serve the two in turn, both end at 2 x their engine time, and the compute and the store come that
    # much later than with one queue, where the first load moved alone
    other = _dma(_timelines(_store_then_load(E.scalar, E.sync), x, x))
    w = other[0].work
    assert other[0].end == pytest.approx(other[0].data_start + 2 * w) == pytest.approx(other[2].end)
    assert same[0].end == pytest.approx(same[0].data_start + w)
    assert other[1].end == pytest.approx(store.end + w)


def test_hwdge_costs_600_ns_on_one_of_two_blocks_before_the_fixed_cost():
    def k(src):
        for i in range(5):
            t = nl.ndarray((1, 1), dtype=src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, src[i:i + 1, :], dge_mode=nisa.dge_mode.hwdge)
        return None
    tl = _timelines(k, np.zeros((8, 1), np.float32))
    spans = sorted(tl.dge)
    assert [(m, u, s, e) for _, m, u, s, e in spans] == [
        (2, 0, 0.0, 600.0), (2, 1, 0.0, 600.0), (2, 0, 600.0, 1200.0), (2, 1, 600.0, 1200.0),
        (2, 0, 1200.0, 1800.0)]
    for (r, *_, e), row in zip(spans, _dma(tl)):
        assert row.index == r and row.data_start >= e + TG.dma_fixed_ns - 1e-9
    assert not any(en in ("scalar", "gpsimd") for en in tl.engine)      # no compute engine is used


def test_swdge_occupies_the_gpsimd_engine_in_program_order():
    clk = TG.engine_clock_hz["gpsimd"] * 1e-9

    def k(src):
        t = nl.ndarray((128, 4), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, src, dge_mode=nisa.dge_mode.swdge)
        g = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(g, 0.0, engine=nisa.gpsimd_engine)
        return None
    tl = _timelines(k, np.zeros((128, 4), np.float32))
    [(r, m, u, s, e)] = tl.dge
    assert (m, u, s) == (1, -1, 0.0) and e == pytest.approx((TG.gpsimd_fixed_cycles + 1) / clk)
    ms = next(x for x in tl.rows() if x.opcode == "memset")
    assert ms.engine == "gpsimd" and ms.start == pytest.approx(e)        # behind the descriptor generation
    assert tl.busy_ns()[(0, "gpsimd")] == pytest.approx(e + ms.end - ms.start)
    assert _dma(tl)[0].data_start == pytest.approx(e + TG.dma_fixed_ns)


def test_a_gather_generates_its_descriptors_on_gpsimd():
    def k(cache, idx):
        ix = nl.ndarray((3, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        back = nl.ndarray((3, 4), dtype=cache.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=back, src=cache.ap(pattern=[[4, 3], [1, 4]], offset=0, vector_offset=ix,
                                             indirect_dim=0))
        return None
    tl = _timelines(k, np.zeros((12, 4), np.float32), np.array([[9], [1], [4]], np.int32), execute=True)
    # the front end moves a gather row by row; the one DMA instruction's descriptors (one per partition) are
    # generated once, on the GpSimd Engine, and the later rows wait for them there
    assert [m for _, m, *_ in tl.dge] == [1, 1, 1]
    clk = TG.engine_clock_hz["gpsimd"] * 1e-9
    spans = [e - s for *_, s, e in tl.dge]
    assert spans[0] == pytest.approx((TG.gpsimd_fixed_cycles + 1) / clk) and spans[1:] == [0.0, 0.0]
    assert tl.busy_ns()[(0, "gpsimd")] == pytest.approx(spans[0])


def test_compiled_loop_matches_with_queues_dge_and_partial_engines():
    def k(src):
        for i in range(12):
            rows = 128 if i % 3 == 0 else 16
            t = nl.ndarray((rows, 256), dtype=src.dtype, buffer=nl.sbuf)
            eng = (E.sync, E.scalar, None)[i % 3]
            mode = (nisa.dge_mode.hwdge, nisa.dge_mode.swdge, nisa.dge_mode.none, None)[i % 4]
            nisa.dma_copy(t, src[0:rows, :], engine=eng, dge_mode=mode)
            u = nl.ndarray((rows, 256), dtype=src.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(u, t, nl.multiply, 2.0, engine=nisa.gpsimd_engine if i % 2 else
                               nisa.vector_engine)
            o = nl.ndarray((rows, 256), dtype=src.dtype, buffer=nl.private_hbm)
            nisa.dma_copy(o, u, engine=eng, dge_mode=mode)
        return None
    if not sched_fast.fast_available():
        pytest.skip("numba unavailable")
    tl = _timelines(k, np.zeros((128, 256), np.float32))
    assert {m for _, m, *_ in tl.dge} == {1, 2}


def test_trace_shows_dge_spans():
    def k(src):
        for mode in (nisa.dge_mode.swdge, nisa.dge_mode.hwdge):
            t = nl.ndarray((128, 4), dtype=src.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, src, dge_mode=mode)
        return None
    tl = _timelines(k, np.zeros((128, 4), np.float32))
    ev = trace_events(tl, flows=False)
    dge = [e for e in ev if e.get("cat") == "dge"]
    assert len(dge) == 2
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert names[dge[0]["tid"]] == "gpsimd engine" and names[dge[1]["tid"]] == "hardware DGE 0"
    assert dge[1]["dur"] == pytest.approx(0.6)
