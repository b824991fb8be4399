"""Device ops whose result bits cannot depend on the host's thread count run their numerics on one host thread
(``backend/host_threads.py``, ``config.serial_host_ops``): the count is 1 inside such an op and the caller's after
it (also after an error); the other ops keep the caller's count; values and simulated time are the same with the
switch on and off."""

import pytest
import torch

from trnsim import config
from trnsim.backend import host_threads
from trnsim.backend.device_state import STATE


@pytest.fixture
def two_threads():
    """Two host threads, and serial ops on one thread always (not ``auto``, which asks the host's load)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    with config.override(serial_host_ops=True):
        yield
    torch.set_num_threads(prev)


def test_serial_runs_on_one_thread_and_puts_the_count_back(two_threads):
    seen = host_threads.serial(lambda: torch.get_num_threads())
    assert seen() == 1
    assert torch.get_num_threads() == 2

    def boom():
        assert torch.get_num_threads() == 1
        raise ValueError("inside")
    with pytest.raises(ValueError, match="inside"):
        host_threads.serial(boom)()
    assert torch.get_num_threads() == 2
    with config.override(serial_host_ops=False):
        assert seen() == 2


def test_which_ops_are_serial():
    for name, cat in [("add", "binary"), ("mul", "binary"), ("abs", "unary"), ("_to_copy", "copy"),
                      ("cat", "copy"), ("index_select", "gather"), ("index", "gather"), ("max", "reduce_max"),
                      ("amax", "reduce_max"), ("sort", "sort"), ("bucketize", "roofline")]:
        assert host_threads.is_serial(name, cat), name
    for name, cat in [("sum", "reduce"), ("mean", "reduce"), ("mm", "mm"), ("addmm", "addmm"),
                      ("index_put_", "gather"), ("scatter_add", "gather"), ("index_add_", "gather"),
                      ("native_dropout", "binary"), ("normal_", "random"), ("_softmax", "softmax"),
                      ("avg_pool2d_backward", "roofline")]:
        assert not host_threads.is_serial(name, cat), name


def _calls(monkeypatch, fn):
    """The thread counts ``host_threads`` set while ``fn`` ran."""
    seen = []
    real = host_threads._set_threads

    def spy(n):
        seen.append(n)
        real(n)
    monkeypatch.setattr(host_threads, "_set_threads", spy)
    try:
        fn()
    finally:
        monkeypatch.setattr(host_threads, "_set_threads", real)
    assert torch.get_num_threads() == 2
    return seen


def test_device_ops_set_one_thread_only_where_bits_cannot_change(two_threads, monkeypatch):
    x = torch.randn(300, 257).to("neuron")
    y = torch.randn(300, 257).to("neuron")
    b = torch.linspace(-1, 1, 15).to("neuron")
    a = x.abs()
    i = torch.tensor([3, 1]).to("neuron")
    for serial_op in (lambda: x + y, lambda: x * 2.0, lambda: x.abs(), lambda: x.to(torch.bfloat16),
                      lambda: a.max(dim=-1), lambda: torch.bucketize(x, b, out_int32=True),
                      lambda: x.index_select(0, i)):
        assert _calls(monkeypatch, serial_op) == [1, 2]
    for other in (lambda: x.sum(), lambda: x.mean(dim=0), lambda: x @ y.t(), lambda: x.t(), lambda: x.view(-1)):
        assert _calls(monkeypatch, other) == []
    with config.override(serial_host_ops=False):
        assert _calls(monkeypatch, lambda: x + y) == []


def _program(x, y, b, idx):
    return [x + y, x * y, (x - y) / (y.abs() + 1), torch.exp(x), x.to(torch.bfloat16), x.abs().max(dim=-1)[0],
            torch.bucketize(x, b, out_int32=True), x.reshape(-1)[idx], torch.cat([x, y]), torch.sort(x, dim=-1)[0],
            torch.clamp(x, -0.5, 0.5), ((x.to(torch.int32) << 4) | 3)]


def test_values_and_simulated_time_are_the_same_on_one_thread(two_threads):
    torch.manual_seed(0)
    xc, yc = torch.randn(512, 300), torch.randn(512, 300)       # past torch's 32,768-element grain: threaded
    bc = torch.linspace(-2, 2, 255)
    ic = torch.randint(0, xc.numel(), (70_000,))
    args = [t.to("neuron") for t in (xc, yc, bc, ic)]
    res, clock = {}, {}
    for on in (True, False):
        with config.override(serial_host_ops=on):
            t0, STATE.now_ns = STATE.now_ns, 0.0        # each run's charges summed from 0: the same additions
            res[on] = [o.cpu() for o in _program(*args)]
            clock[on] = STATE.now_ns
            STATE.now_ns += t0
    assert clock[True] == clock[False] > 0
    for a, b in zip(res[True], res[False]):
        assert torch.equal(a, b)
    # and against float64: one correctly rounded operation gives the float32 of the exact result
    assert torch.equal(res[True][0], (xc.double() + yc.double()).float())
    assert torch.equal(res[True][1], (xc.double() * yc.double()).float())
    assert torch.equal(res[True][5], xc.double().abs().max(dim=-1)[0].float())


@pytest.mark.parametrize("generated", [True, False])
def test_compiled_graph_steps_set_one_thread_only_where_bits_cannot_change(two_threads, monkeypatch, generated):
    """A compiled graph's steps follow the eager rule step by step: a graph of an elementwise chain and a sum sets
    one thread around the elementwise steps only, through the generated function and the interpreted steps alike,
    and gives the same values and simulated time as eager."""
    from trnsim.backend.compile import runtime

    def f(x, y):
        z = torch.abs(x * y) + 1.0
        return z, (x * y).sum()
    x = torch.randn(300, 257).to("neuron")
    y = torch.randn(300, 257).to("neuron")
    monkeypatch.setattr(runtime.CompiledGraph, "GENERATED", generated)
    torch._dynamo.reset()
    cf = torch.compile(f, backend="neuron")
    cf(x, y)                                        # compiled (and the function generated) outside the spy
    seen = _calls(monkeypatch, lambda: cf(x, y))
    ones = seen.count(1)
    assert seen == [1, 2] * ones and ones >= 2      # each serial step sets 1 and puts 2 back
    with config.override(serial_host_ops=False):
        assert _calls(monkeypatch, lambda: cf(x, y)) == []
    z, s = cf(x, y)
    zr = (x.cpu().double() * y.cpu().double()).abs() + 1.0
    torch.testing.assert_close(z.cpu().double(), zr, rtol=1e-6, atol=0)
    torch.testing.assert_close(s.cpu().double(), (x.cpu().double() * y.cpu().double()).sum(), rtol=1e-5, atol=1e-3)
    t0 = STATE.now_ns
    cf(x, y)
    t1 = STATE.now_ns
    with config.override(serial_host_ops=False):
        cf(x, y)
    assert STATE.now_ns - t1 == t1 - t0


class _Host:
    """A scripted host for HostLoad: a clock, the busy core-seconds of 2 cpus, this process's CPU seconds."""

    def __init__(self, cpus=2):
        self.t, self.busy, self.own, self.cpus, self.reads = 100.0, 5000.0, 3.0, cpus, 0

    def stat(self):
        self.reads += 1
        return self.busy, self.cpus

    def run(self, seconds, own_cores, other_cores):
        self.t += seconds
        self.own += own_cores * seconds
        self.busy += (own_cores + other_cores) * seconds


def _load(host, quota=None):
    return host_threads.HostLoad(window_s=0.25, margin=0.75, stat=host.stat, own=lambda: host.own,
                                 clock=lambda: host.t, quota=lambda: quota)


@pytest.mark.parametrize("own, others, free", [
    (1.0, 0.0, True),       # this process alone on one core: the other is free
    (2.0, 0.0, True),       # this process's own worker threads busy too: still nobody else's load
    (1.0, 0.2, True),       # a little load from others leaves 0.8 of a core
    (1.0, 0.3, False),      # 0.7 of a core left: under the margin
    (1.0, 1.0, False),      # another process on the other core (pytest -n 2, a build beside)
    (0.1, 1.9, False),
])
def test_a_core_is_free_when_others_leave_one(own, others, free):
    assert _first_and_after_a_window(own, others) == (False, free)     # no window closed yet: one thread


def _first_and_after_a_window(own, others, cpus=2, quota=None):
    """HostLoad's answer at its first call and after 0.3 s of this load."""
    h = _Host(cpus)
    load = _load(h, quota)
    first = load.free_core()
    h.run(0.3, own, others)
    return first, load.free_core()


def test_the_answer_holds_for_a_window_and_follows_the_load():
    h = _Host()
    load = _load(h)
    load.free_core()
    h.run(0.3, 1.0, 0.0)
    assert load.free_core() is True and h.reads == 2
    h.run(0.1, 1.0, 1.0)                        # inside the window: no new read, the same answer
    assert load.free_core() is True and h.reads == 2
    h.run(0.2, 1.0, 1.0)
    assert load.free_core() is False and h.reads == 3
    h.run(0.3, 1.0, 0.0)
    assert load.free_core() is True


def test_no_proc_stat_or_a_small_quota_means_one_thread():
    load = host_threads.HostLoad(stat=lambda: None)
    assert load.free_core() is False
    # a cgroup quota of 1.5 cores: the other half core is no core; of 3 cores on 4 cpus: one is left
    assert _first_and_after_a_window(1.0, 0.0, quota=1.5) == (False, False)
    assert _first_and_after_a_window(1.0, 1.0, cpus=4, quota=3.0) == (False, True)


def test_reset_forgets_the_window():
    h = _Host()
    load = _load(h)
    load.free_core()
    h.run(0.3, 1.0, 0.0)
    assert load.free_core() is True
    load.reset()                                # as a forked child does: its CPU time starts again
    h.own = 0.0
    assert load.free_core() is False
    h.run(0.3, 1.0, 0.0)
    assert load.free_core() is True


def test_proc_stat_reads_busy_seconds_of_this_process_cpus():
    st = host_threads._proc_stat()
    if st is None:
        pytest.skip("no /proc/stat on this host")
    busy, cpus = st
    import os
    assert cpus == len(os.sched_getaffinity(0)) and busy > 0


@pytest.mark.parametrize("mode, free, one", [(True, True, True), (True, False, True), (False, False, False),
                                             (False, True, False), ("auto", True, False), ("auto", False, True)])
def test_one_thread_follows_the_switch(mode, free, one, monkeypatch):
    monkeypatch.setattr(host_threads.HOST, "free_core", lambda: free)
    with config.override(serial_host_ops=mode):
        assert host_threads.one_thread() is one


def test_auto_runs_serial_ops_on_the_callers_threads_when_a_core_is_free(monkeypatch):
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = host_threads.serial(lambda: torch.get_num_threads())
        with config.override(serial_host_ops="auto"):
            monkeypatch.setattr(host_threads.HOST, "free_core", lambda: True)
            assert seen() == 2
            monkeypatch.setattr(host_threads.HOST, "free_core", lambda: False)
            assert seen() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(prev)


@pytest.mark.parametrize("text, value", [("auto", "auto"), (" AUTO ", "auto"), ("1", True), ("off", False),
                                         ("", "auto")])
def test_the_switch_reads_auto_or_on_off(text, value, monkeypatch):
    monkeypatch.setenv("TRNSIM_SERIAL_HOST_OPS", text)
    assert config.serial_host_ops == value


def test_the_switch_refuses_other_values(monkeypatch):
    monkeypatch.setenv("TRNSIM_SERIAL_HOST_OPS", "sometimes")
    with pytest.raises(config.ConfigError, match="TRNSIM_SERIAL_HOST_OPS='sometimes': expected auto, or one of"):
        config.serial_host_ops
    with pytest.raises(config.ConfigError, match="expected True, False or 'auto'"):
        with config.override(serial_host_ops="yes"):
            pass
