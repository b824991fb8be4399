"""A layer run and an optimizer step measure on a device clock of their own (``step.own_clock``): their figures are
the same bits whatever the process's device clock read before them, so an estimate does not depend on what a
search (or a test session) ran first; the process's clock still moves on by what they took."""

import dataclasses

import pytest

from trnsim.backend.device_state import STATE
from trnsim.cost import estimator, step
from trnsim.cost.models import ModelSpec

TINY = ModelSpec(name="tiny-own-clock", hidden=256, layers=2, heads=8, kv_heads=4, head_dim=32, ffn=512, vocab=2048)


@pytest.fixture
def clock():
    saved = STATE.now_ns
    yield
    STATE.now_ns = saved


def _layer():
    _, job = step._key_job("layer", TINY, kind="dense", tp=1, micro_batch=1, seq=256, target="trn2")
    return step._run(*job())


def test_a_layer_run_gives_the_same_bits_whatever_the_clock_read_before(clock):
    STATE.now_ns = 0.0
    a = _layer()
    after_a = STATE.now_ns
    STATE.now_ns = 1.234567891e15          # about 14 days of simulated time: float64 spacing ~0.25 ns there
    b = _layer()
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert a.fwd_ns > 0 and a.bwd_ns > 0
    assert after_a >= a.fwd_ns + a.bwd_ns                   # the process's clock moved on by the run
    assert STATE.now_ns > 1.234567891e15


def test_an_optimizer_step_gives_the_same_seconds_whatever_the_clock_read_before(clock, monkeypatch):
    from trnsim import config
    from trnsim.targets import get_target
    tg = get_target("trn2")
    seconds = []
    with config.override(cost_cache=False):             # each call runs the step (no disk cache) ...
        for before in (0.0, 9.87654321e14):
            monkeypatch.setattr(estimator, "_OPT", {})   # ... and no memo
            STATE.now_ns = before
            seconds.append(estimator.optimizer_s((1 << 20) + 3, tg))
            assert STATE.now_ns > before
    assert seconds[0] == seconds[1] > 0
