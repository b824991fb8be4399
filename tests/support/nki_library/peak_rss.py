"""Peak resident memory of one test, for the nki-library runner's per-test record.

On Linux the kernel keeps a process's peak resident set size (``VmHWM`` in ``/proc/self/status``) and resets it to
the current resident size when ``5`` is written to ``/proc/self/clear_refs`` (proc(5), "clear_refs", since Linux
4.0).  :func:`reset` does that before a test, :func:`peak` reads the peak after it: the figure covers that test
alone.  Where either file is missing or refuses (not Linux, a locked-down /proc), :func:`peak` falls back to
``getrusage(RUSAGE_SELF).ru_maxrss``, the process's peak since it started, and says so in its ``how``: that figure
is an upper bound of the test's peak (it includes every earlier test of the worker), not the test's own.

Attribution (:class:`TestMemory`): the plugin also brackets the harness's simulate call.  Before it, the peak so
far is kept, the resident size is read (``VmRSS``: the harness's inputs, its golden if already computed, the
process) and the peak is reset; after it, the peak is the simulate call's own.  ``sim_peak - rss_before_sim`` is
what trnsim added on top of what the process held when the harness called it.
"""

from __future__ import annotations

import contextlib
import os

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
HOW_TEST = "VmHWM"                     # per-test peak, reset before the test
HOW_LIFETIME = "ru_maxrss"             # the process's peak since it started (fallback)


def release_freed():
    """Return freed memory to the system before a test (a cycle collection, then glibc's ``malloc_trim(0)`` where
    there is one), so that the resident size a test starts from holds what earlier tests still reference, not what
    the allocator kept of what they freed."""
    import gc
    import sys
    # pytest keeps the last failure's traceback in sys.last_* (for post-mortem debugging): its frames hold the
    # failed test's arrays (a test stopped by the memory cap holds GBs), so the next test would start with them
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset(clear_refs=CLEAR_REFS) -> bool:
    """Reset the process's peak RSS to its current RSS; False when the system does not allow it."""
    try:
        with open(clear_refs, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _vmhwm_bytes(status=STATUS, field="VmHWM"):
    try:
        with open(status) as f:
            for line in f:
                if line.startswith(field + ":"):
                    value, unit = line.split()[1:3]
                    if unit != "kB":
                        raise ValueError(f"{status}: {field} in unit {unit!r}, expected kB")
                    return int(value) * 1024
    except OSError:
        return None
    return None


def rss_now(status=STATUS):
    """The process's resident size now (``VmRSS``, bytes), or None where it cannot be read."""
    return _vmhwm_bytes(status, "VmRSS")


def peak(was_reset: bool, status=STATUS):
    """``(bytes, how)``: the peak RSS since :func:`reset` (``how`` = ``"VmHWM"``) when the reset worked and
    ``VmHWM`` is readable, else the process's lifetime peak (``how`` = ``"ru_maxrss"``), else ``(None, None)``."""
    if was_reset:
        b = _vmhwm_bytes(status)
        if b is not None:
            return b, HOW_TEST
    try:
        import resource
        import sys
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in KiB on Linux and in bytes on macOS (getrusage(2) of each)
        return (kib if sys.platform == "darwin" else kib * 1024), HOW_LIFETIME
    except (ImportError, OSError):
        return None, None



class TestMemory:
    """One test's peak RSS, with the part of it inside the simulate call (see the module docstring)."""

    def __init__(self, clear_refs=CLEAR_REFS, status=STATUS):
        self.clear_refs, self.status = clear_refs, status
        self.ok = reset(clear_refs)
        self.earlier = 0            # the peak before the last reset (bytes)
        self.sim = None             # {"rss_before": .., "peak": ..} of the simulate call with the highest peak
        self.phases = {}            # harness phase -> the highest resident size seen while it was open (bytes)

    def checkpoint(self, phase):
        """Charge the peak since the last reset to ``phase`` (the harness phase that was open, ``phase_times``)
        and reset the peak: the per-phase peaks of the record (``peak_rss_phase_bytes``).  The test's own peak
        keeps every checkpointed figure."""
        if not self.ok:
            return None
        pk = _vmhwm_bytes(self.status)
        if pk is None:
            return None
        self.earlier = max(self.earlier, pk)
        if phase is not None:
            self.phases[phase] = max(self.phases.get(phase, 0), pk)
        self.ok = reset(self.clear_refs)
        return pk

    @contextlib.contextmanager
    def simulate(self):
        """Bracket a simulate call (nothing measured where the per-test peak cannot be)."""
        if not self.ok:
            yield
            return
        before = _vmhwm_bytes(self.status, "VmRSS")
        self.checkpoint(None)       # the phase that was open before the call was charged when it was entered
        tracer = _PeakSites() if os.environ.get("TRNSIM_NKILIB_TRACEMALLOC") else None
        try:
            yield
        finally:
            if tracer is not None:
                self.sites = tracer.stop()
            if self.ok:
                pk = self.checkpoint("simulate") or 0
                if self.sim is None or pk > self.sim["peak"]:
                    self.sim = {"rss_before": before, "peak": pk}
                # what the launch freed goes back to the system before the harness builds its golden: tiles of
                # under 128 KiB come from the heap, which glibc keeps (3 GB of them stayed resident after one
                # attention kernel and the golden then took the process above the cap)
                release_freed()
                self.ok = reset(self.clear_refs)

    def record(self):
        """The fields of the test's record: ``peak_rss_bytes``, ``peak_rss_how`` and, when a simulate call was
        bracketed, ``sim_rss_before_bytes`` and ``sim_peak_bytes``."""
        b, how = peak(self.ok, self.status)
        if b is None:
            return {}
        out = {"peak_rss_bytes": max(b, self.earlier) if how == HOW_TEST else b, "peak_rss_how": how}
        if self.sim is not None and how == HOW_TEST:
            out.update(sim_rss_before_bytes=self.sim["rss_before"], sim_peak_bytes=self.sim["peak"])
        if getattr(self, "sites", None):
            out["sim_alloc_sites"] = self.sites
        if self.phases and how == HOW_TEST:
            out["peak_rss_phase_bytes"] = dict(self.phases)
        return out


class _PeakSites:
    """Diagnosis (``TRNSIM_NKILIB_TRACEMALLOC=1``): tracemalloc during the simulate call, a snapshot taken by a
    thread whenever the traced size reaches a new high (every 0.5 s at most), and the largest allocation sites of
    the highest one (file:line, MiB).  Slows the call several times; for finding where a test's memory goes."""

    def __init__(self, frames=12, every_s=0.5, top=12):
        import threading
        import tracemalloc
        self.tm, self.top, self.best, self.snap = tracemalloc, top, 0, None
        tracemalloc.start(frames)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, args=(every_s,), daemon=True)
        self.thread.start()

    def _watch(self, every_s):
        while not self.done.wait(every_s):
            cur = self.tm.get_traced_memory()[0]
            if cur > self.best * 1.05:
                self.best, self.snap = cur, self.tm.take_snapshot()

    def stop(self):
        self.done.set()
        self.thread.join()
        self.tm.stop()
        if self.snap is None:
            return []
        out = []
        for st in self.snap.statistics("traceback")[:self.top]:
            frames = [f"{os.path.basename(f.filename)}:{f.lineno}" for f in st.traceback
                      if "/trnsim/" in f.filename or "nkilib" in f.filename][-4:]
            out.append(f"{st.size / 2 ** 20:.0f} MiB in {st.count} blocks: " + " <- ".join(reversed(frames)))
        return [f"traced high {self.best / 2 ** 20:.0f} MiB"] + out


CURRENT = None       # the running test's TestMemory (set by the plugin at setup)


@contextlib.contextmanager
def around_simulate():
    """``with around_simulate(): <the simulate call>`` -- brackets it in the running test's TestMemory."""
    cur = CURRENT
    if cur is None:
        yield
        return
    with cur.simulate():
        yield
