import pytest

import trnsim


@pytest.fixture(scope="session")
def nki():
    return trnsim.install_nki()


@pytest.fixture(scope="session")
def nl(nki):
    import nki.language as nl
    return nl


@pytest.fixture(scope="session")
def nisa(nki):
    import nki.isa as nisa
    return nisa


# CI runs a fixed set of hypothesis examples (derandomized); local runs explore new ones.
import os as _os

from hypothesis import settings as _settings

_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if _os.environ.get("CI"):
    _settings.load_profile("ci")

# the suite is hermetic: no op cost is read from (or written to) the persistent cache of earlier processes
_os.environ.setdefault("TRNSIM_COST_CACHE", "0")


# numba compiles the scheduler's kernels (trnsim/machine/sched_events.py, sched_state.py; ``cache=True``) on
# first use and caches them on disk.  Under pytest-xdist every worker that reaches the compiled scheduler before
# the cache exists compiles them itself, each paying the full compile (15-18 s of CPU each when this was written;
# 80-90 s since the loop grew, benchmarks/speed-s47-sched-cold.md).  So that a session compiles each function
# once: every numba compile (which first tries the disk cache) holds one lock file shared by the session's
# processes; a worker that waits for another's compile then loads the cached result.  The patch is installed
# when numba's dispatcher is first imported (sessions that never use numba do not import it).
import importlib.abc as _abc
import importlib.util as _iu
import sys as _sys
import tempfile as _tempfile
import zlib as _zlib

_NUMBA_LOCK = _os.path.join(_tempfile.gettempdir(), "trnsim-numba-compile-%08x.lock" % _zlib.crc32(
    _os.path.abspath(__file__).encode()))          # one lock per checkout: all of its test processes share it


def _lock_numba_compiles(dispatcher_module):
    from filelock import FileLock

    disp = dispatcher_module.Dispatcher
    if getattr(disp.compile, "_trnsim_locked", False):
        return
    lock = FileLock(_NUMBA_LOCK)
    compile_ = disp.compile

    def compile(self, sig):
        with lock:
            return compile_(self, sig)
    compile._trnsim_locked = True
    compile._trnsim_lock_path = _NUMBA_LOCK
    disp.compile = compile


class _OnNumbaDispatcherImport(_abc.MetaPathFinder):
    """Patches ``numba.core.dispatcher`` right after it is imported."""
    NAME = "numba.core.dispatcher"

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        _sys.meta_path.remove(self)
        spec = _iu.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _lock_numba_compiles(module)
        spec.loader.exec_module = exec_and_patch
        return spec


if _OnNumbaDispatcherImport.NAME in _sys.modules:
    _lock_numba_compiles(_sys.modules[_OnNumbaDispatcherImport.NAME])
else:
    _sys.meta_path.insert(0, _OnNumbaDispatcherImport())


@pytest.fixture
def graphs(monkeypatch):
    """The ``CompiledGraph``s the neuron compile backend makes while the test runs, in order."""
    from trnsim.backend.compile import runtime as RT
    made = []
    init = RT.CompiledGraph.__init__

    def record(self, *a, **k):
        init(self, *a, **k)
        made.append(self)
    monkeypatch.setattr(RT.CompiledGraph, "__init__", record)
    return made
