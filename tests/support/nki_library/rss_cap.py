"""A resident-memory cap for one test of nki-library's suite (the runner's ``--max-memory``).

A cap on the address space (``RLIMIT_AS``) does not bound what a test holds: the interpreter, torch, numba and one
malloc arena per thread reserve far more address space than they touch, and address space that a large test once
reserved stays reserved, so after one large test every later test of the process failed with ``MemoryError`` on
small allocations (measured: a pytest process at 2.6 GB resident had 8 GiB of address space).  This cap watches
the resident set instead.

A watchdog thread reads ``VmRSS`` of ``/proc/self/status`` every :data:`POLL_S` seconds while a test runs:

- above the cap, it interrupts the test's thread (``SIGUSR1``; the handler raises :class:`ResidentMemoryExceeded`,
  a ``MemoryError``, at the next Python bytecode the thread runs): the test fails with that error, its memory is
  freed as the exception unwinds, and the run goes on;
- above the cap plus :data:`HARD_MARGIN` (a single C call -- a NumPy operation -- kept allocating before the
  interrupt could be delivered), it writes the test and the figure to ``<results>.killed`` and ends the process
  with ``SIGKILL`` before the machine runs out of memory; the runner records the test as killed by the cap and
  starts pytest again on the tests not yet run;
- after a test it interrupted, if the process still holds more than half the cap once the test is over (something
  keeps the test's arrays), the plugin ends the process at the test's teardown (its result already recorded) and
  the runner starts pytest again, rather than every later test starting above the cap.
"""

from __future__ import annotations

import os
import signal
import threading

POLL_S = 0.05              # trnsim's choice: 20 reads a second of a small /proc file cost nothing measurable
HARD_MARGIN = 2 ** 30      # 1 GiB above the cap: the process is ended (see the module docstring)


class ResidentMemoryExceeded(MemoryError):
    """The test's process went above the runner's resident-memory cap."""


def vmrss_bytes(status="/proc/self/status"):
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Cap:
    """The watchdog of one pytest process (see the module docstring).  ``killed_path``: where the test and figure
    are written before a hard kill."""

    def __init__(self, cap_bytes, killed_path=None, poll_s=POLL_S, hard_margin=HARD_MARGIN, read=vmrss_bytes,
                 kill=None):
        if cap_bytes <= 0:
            raise ValueError(f"rss_cap: the cap must be > 0 bytes, got {cap_bytes}")
        self.cap = int(cap_bytes)
        self.hard = self.cap + int(hard_margin)
        self.killed_path = killed_path
        self.poll_s = poll_s
        self.read = read
        self.kill = kill or (lambda: os.kill(os.getpid(), signal.SIGKILL))
        self.test = None              # the node id of the running test (None between tests)
        self.fired = False            # the interrupt was sent for the running test
        self.seen = 0                 # the largest RSS read during the running test
        self.main = threading.main_thread().ident
        self._stop = threading.Event()
        self.thread = None

    def install(self):
        """Install the signal handler (main thread only) and start the watchdog; False where there is no
        ``/proc/self/status`` (the cap cannot be read: not enforced)."""
        if self.read() is None:
            return False
        signal.signal(signal.SIGUSR1, self._handler)
        self.thread = threading.Thread(target=self._watch, name="trnsim-rss-cap", daemon=True)
        self.thread.start()
        return True

    def stop(self):
        self._stop.set()

    def start_test(self, nodeid):
        self.fired, self.seen, self.test = False, 0, nodeid
        self.test_thread = threading.get_ident()

    def end_test(self):
        self.test = None

    def _handler(self, signum, frame):
        if self.test is not None:          # a late signal after the test ended is ignored
            raise ResidentMemoryExceeded(
                f"resident memory {self.seen / 2 ** 30:.2f} GiB went above the runner's cap of "
                f"{self.cap / 2 ** 30:g} GiB (--max-memory) while this test ran")

    def check(self):
        """One poll (the watchdog calls it every ``poll_s``); returns what it did: None, "interrupt" or "kill"."""
        if self.test is None:
            return None
        rss = self.read()
        if rss is None:
            return None
        self.seen = max(self.seen, rss)
        if rss > self.hard:
            if self.killed_path:
                with open(self.killed_path, "a") as f:
                    f.write(f"{self.test}\t{rss}\t{self.cap}\n")
            self.kill()
            return "kill"
        if rss > self.cap and not self.fired:
            self.fired = True
            if getattr(self, "test_thread", self.main) == self.main:
                signal.pthread_kill(self.main, signal.SIGUSR1)     # the handler runs on the main thread
            else:                                                   # a test run on another thread
                import ctypes
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.test_thread),
                                                           ctypes.py_object(ResidentMemoryExceeded))
            return "interrupt"
        return None

    def _watch(self):
        while not self._stop.wait(self.poll_s):
            self.check()
