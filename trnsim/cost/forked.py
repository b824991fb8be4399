"""A helper process for a compiled search's runner-up (``trnsim estimate --compile``; :func:`trnsim.cost.search.search`
with ``compile_top`` and ``fork``).

The default compiled search ranks every candidate eagerly, then compiles the two fastest one after the other.
With a helper, the runner-up is compiled in a second process while this one compiles the fastest, so on a host with
a second free CPU its compile (1.5-2 s of CPU for Qwen3-32B) no longer adds to the wall time.

The helper is forked *before* the eager ranking, once torch, dynamo and the compile backend are imported, and waits
for its job: PyTorch refuses a backward pass in a process forked after its parent ran one ("Unable to handle
autograd's threading in combination with fork-based multiprocessing", tried at stop 48:
benchmarks/speed-s48-estimate.md), and the ranking runs backward passes.  So the helper does not share the
ranking's memoised kernel costs; it simulates what it needs itself.  Its results come back as its new layer-cost
cache entries (:mod:`trnsim.cost.layer_cache`: JSON over a pipe, the cache's own layout, never pickle), which the
runner-up's estimate here then finds as it would find an earlier process's.  The figures are the same bits either
way (each layer run keeps its own clock: ``step.own_clock``; tests/cost/test_forked.py compares).

A helper that fails (an exception, a signal, output not in the cache's layout) is ignored: this process runs the
runner-up itself.  ``TRNSIM_ESTIMATE_FORK`` chooses (:func:`wanted`).
"""

from __future__ import annotations

import json
import os
import signal
import sys

from . import layer_cache

__all__ = ["wanted", "start", "Helper"]


def wanted() -> bool:
    """Whether to fork a helper: ``TRNSIM_ESTIMATE_FORK`` on, or ``auto`` (the default) with two cores usable by this
    process (``backend.host_threads.usable_cores``: affinity and cgroup quota); either way only where ``os.fork``
    exists, the layer-cost cache is on (the helper's results come back through it) and this process has run no layer
    yet (no backward pass: see the module docstring)."""
    from .. import config
    from ..backend import host_threads
    from . import step
    mode = config.estimate_fork
    if mode is False or not hasattr(os, "fork") or not layer_cache.enabled() or step.layers_run():
        return False
    return mode is True or host_threads.usable_cores() >= 2


def _read_all(fd):
    with os.fdopen(fd, "rb") as f:
        return f.read()          # to the end: the writer closed its end


class Helper:
    """A forked process waiting for one job (:meth:`send`), whose layer costs :meth:`collect` takes in."""

    def __init__(self, pid, job_fd, result_fd):
        self.pid = pid
        self._job = job_fd
        self._result = result_fd
        self.done = False

    def send(self, job):
        """Give the helper its job (JSON-able), once."""
        data = json.dumps(job).encode("utf-8")
        with os.fdopen(self._job, "wb") as f:
            f.write(data)
        self._job = None

    def collect(self) -> bool:
        """Wait for the helper and merge its new layer-cost entries into this process's cache; False (nothing
        merged) when it failed."""
        data = _read_all(self._result)
        self._result = None
        _, status = os.waitpid(self.pid, 0)
        self.done = True
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            return False
        try:
            layer_cache.merge(json.loads(data.decode("utf-8")))
        except (ValueError, UnicodeDecodeError):
            return False
        return True

    def cancel(self):
        """End the helper without its results (this process no longer needs them)."""
        if self.done:
            return
        for fd in (self._job, self._result):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._job = self._result = None
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.done = True


def _helper_main(job_fd, result_fd, work):
    """The helper's life: wait for the job (none when the parent closes the pipe), run it, hand back the layer-cost
    entries it added, save its kernel costs for later processes, exit without running the parent's exit hooks."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)                 # the parent's terminal is the parent's: no warning or progress twice
        os.dup2(devnull, 2)
        data = _read_all(job_fd)
        if data:
            before = set(layer_cache.entries())
            work(json.loads(data.decode("utf-8")))
            new = {k: v for k, v in layer_cache.entries().items() if k not in before}
            with os.fdopen(result_fd, "wb") as f:
                f.write(json.dumps(new).encode("utf-8"))
            from ..backend import cost_cache
            cost_cache.flush()
        code = 0
    except BaseException:                   # noqa: BLE001 (the parent then runs the job itself)
        code = 1
    finally:
        os._exit(code)


def start(work):
    """Fork a helper that waits for a job and runs ``work(job)`` (which must put its results in the layer-cost
    cache); returns the :class:`Helper`."""
    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(job_w)
        os.close(res_r)
        _helper_main(job_r, res_w, work)         # never returns
    os.close(job_r)
    os.close(res_w)
    return Helper(pid, job_w, res_r)
