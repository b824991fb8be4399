"""pytest's ``--trnsim-record DIR``: every test runs inside a recording (``DIR/<node id>/rank<r>/``); the
``trnsim_record`` fixture gives the test its recorder for ``rec.input(...)``/``rec.output(...)``/``rec.call(...)``
(an inactive one, which records nothing, without the option)."""

from __future__ import annotations

import pytest

from .recorder import Recorder

_WHAT = {"io": {}, "modules": {"modules": True}, "ops": {"modules": True, "ops": True},
         "all": {"modules": True, "ops": True, "backward": True}}
WHAT_CHOICES = tuple(_WHAT)


def _make(item):
    cfg = item.config
    root = cfg.getoption("trnsim_record")
    what = _WHAT[cfg.getoption("trnsim_record_what")]
    return Recorder(root, item.nodeid, nodeid=item.nodeid, **what)


def recorder_for(request) -> Recorder:
    item = request.node
    if not request.config.getoption("trnsim_record", None):
        return Recorder("", item.nodeid)         # never entered: records nothing, calls pass through
    rec = getattr(item, "_trnsim_recorder", None)
    if rec is None:
        rec = item._trnsim_recorder = _make(item)
    return rec


class RecordSession:
    """Registered by trnsim's pytest plugin when ``--trnsim-record`` is given."""

    def __init__(self, config):
        self.config = config
        self.written = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        rec = getattr(item, "_trnsim_recorder", None)
        if rec is None:
            rec = item._trnsim_recorder = _make(item)
        with rec:
            res = yield
        self.written += 1
        return res

    def pytest_terminal_summary(self, terminalreporter):
        if getattr(self.config, "workeroutput", None) is not None:
            return
        terminalreporter.write_line(f"trnsim: recordings written under {self.config.getoption('trnsim_record')} "
                                    "(compare two runs with `trnsim compare A B`)")
