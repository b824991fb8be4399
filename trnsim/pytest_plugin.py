"""trnsim's pytest plugin (entry point ``pytest11``).

Under ``TORCHNEURON_TARGET=sim``: ``import nki`` in the tests' kernel files resolves to trnsim, the simulated
``neuron`` PyTorch device is registered, a header line names the target, the ``neuron_device`` fixture gives
``torch.device("neuron")``, ``--neuron-default-device`` runs tests that never name a device on "neuron",
``--neuron-strict`` makes a CPU fallback an error, and the terminal summary lists the simulated device time per test
(slowest first) and the ops that fell back to the CPU, with counts.  With the variable unset it does nothing (and
never imports torch).
"""

import pytest

from . import config


def _sim():
    return config.torchneuron_target == "sim"


def pytest_addoption(parser):
    g = parser.getgroup("trnsim", "trnsim simulated neuron device (TORCHNEURON_TARGET=sim)")
    g.addoption("--neuron-default-device", action="store_true", default=False,
                help="run tests that never name a device on the simulated 'neuron' device")
    g.addoption("--neuron-strict", action="store_true", default=False,
                help="a CPU fallback of an op is an error (does the code run fully on the device?)")
    g.addoption("--neuron-summary-top", type=int, default=15, help="tests listed in the simulated-time summary")
    g.addoption("--trnsim-record", metavar="DIR", default=None,
                help="record each test's tensors into DIR/<test>/rank<r>/ on any device (trnsim.difftest); "
                     "compare two runs with `trnsim compare A B`")
    g.addoption("--trnsim-record-what", default="modules", choices=("io", "modules", "ops", "all"),
                help="with --trnsim-record: io (the trnsim_record fixture's inputs/outputs), modules (+ every "
                     "module's output, default), ops (+ every op's outputs), all (+ module input gradients)")


class _NeuronSession:
    def __init__(self, config):
        self.config = config
        self.times = {}         # nodeid -> simulated ns
        self.fallbacks = {}     # "aten::op" -> calls
        self.prev_mode = None

    def start(self):
        from trnsim import backend
        backend.register()
        if self.config.getoption("neuron_strict"):
            self.prev_mode = backend.set_fallback_mode("error")

    def stop(self):
        from trnsim import backend
        if self.prev_mode is not None:
            backend.set_fallback_mode(self.prev_mode)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        import torch

        from trnsim.backend.device_state import STATE
        t0 = STATE.now_ns
        f0 = dict(STATE.fallback_counts)
        prev = None
        if self.config.getoption("neuron_default_device"):
            prev = torch.get_default_device()
            torch.set_default_device("neuron")
        try:
            return (yield)
        finally:
            if prev is not None:
                torch.set_default_device(prev)
            dt = STATE.now_ns - t0
            if dt:
                self.times[item.nodeid] = self.times.get(item.nodeid, 0.0) + dt
            for k, v in STATE.fallback_counts.items():
                d = v - f0.get(k, 0)
                if d:
                    self.fallbacks[k] = self.fallbacks.get(k, 0) + d

    # -- pytest-xdist: workers send their figures to the controller -----------------------------
    def pytest_sessionfinish(self, session):
        out = getattr(self.config, "workeroutput", None)
        if out is not None:
            out["trnsim_times"] = self.times
            out["trnsim_fallbacks"] = self.fallbacks

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        out = getattr(node, "workeroutput", {}) or {}
        self.times.update(out.get("trnsim_times", {}))
        for k, v in out.get("trnsim_fallbacks", {}).items():
            self.fallbacks[k] = self.fallbacks.get(k, 0) + v

    def pytest_terminal_summary(self, terminalreporter):
        if getattr(self.config, "workeroutput", None) is not None:
            return
        tr = terminalreporter
        top = self.config.getoption("neuron_summary_top")
        tr.write_sep("=", "trnsim: simulated neuron device time per test")
        if not self.times:
            tr.write_line("no test ran ops on the neuron device")
        for nodeid, ns in sorted(self.times.items(), key=lambda kv: -kv[1])[:top]:
            tr.write_line(f"{ns / 1e3:12.1f} us  {nodeid}")
        tr.write_line(f"total {sum(self.times.values()) / 1e3:.1f} us of simulated device time "
                      f"over {len(self.times)} tests")
        tr.write_sep("=", "trnsim: ops that fell back to the CPU")
        if not self.fallbacks:
            tr.write_line("none: every op ran natively on the neuron device")
        for op, n in sorted(self.fallbacks.items(), key=lambda kv: (-kv[1], kv[0])):
            tr.write_line(f"{n:8d}  {op}")


def pytest_configure(config):
    if config.getoption("trnsim_record", None):            # differential-testing recordings, any device
        from trnsim.difftest.pytest_support import RecordSession
        config.pluginmanager.register(RecordSession(config), "trnsim-record-session")
    if not _sim():
        return
    import trnsim
    trnsim.install_nki()
    sess = _NeuronSession(config)
    sess.start()
    config._trnsim_neuron = sess
    config.pluginmanager.register(sess, "trnsim-neuron-session")


def pytest_unconfigure(config):
    sess = getattr(config, "_trnsim_neuron", None)
    if sess is not None:
        sess.stop()
        config.pluginmanager.unregister(sess)
        del config._trnsim_neuron


def pytest_report_header(config):
    if not _sim():
        return None
    import trnsim
    tg = trnsim.get_target()
    from trnsim.backend.device_state import STATE
    return (f"trnsim {trnsim.__version__}: simulated {tg.marketing_name} ({tg.name}), LNC={STATE.lnc}, "
            "PyTorch device neuron:0")


@pytest.fixture
def neuron_device():
    """``torch.device("neuron")`` on the simulator (skips the test unless ``TORCHNEURON_TARGET=sim``)."""
    if not _sim():
        pytest.skip("the simulated neuron device needs TORCHNEURON_TARGET=sim")
    import torch
    return torch.device("neuron", 0)


@pytest.fixture
def trnsim_record(request):
    """The test's ``trnsim.difftest`` recorder under ``--trnsim-record DIR`` (``rec.input``, ``rec.output``,
    ``rec.call``, ``rec.kernel``); without the option one that records nothing."""
    from trnsim.difftest.pytest_support import recorder_for
    return recorder_for(request)
