"""The host threads a device op's numerics run on.

A ``neuron`` op computes its values with torch's CPU kernels on the payloads, on the host's intra-op thread pool
(``torch.get_num_threads()``: the host's cores by default).  torch's OpenMP pool spin-waits between parallel regions:
on a loaded host a worker burns CPU while the main thread is descheduled, and a device op of a few hundred thousand
elements costs many times the CPU it costs on one thread.  Measured here (torch 2.13, 2 threads, a 2-core host at
load 6-8, ``time.process_time``): a float32 multiply of 2^20 elements 7.9 ms on 2 threads against 0.34 ms on 1;
``abs().max(dim=-1)`` over 4,096 rows of 256 16 against 1.7 ms; bitsandbytes' ``gemv_4bit`` test body at dim 256 on
``neuron`` 112 against 17 ms an iteration.  The simulated device time is the cost model's, whatever the host does.

So the ops whose result bits cannot depend on how many threads compute them run on one host thread
(``config.serial_host_ops``; ``auto`` by default, below): each output element is computed from its inputs alone
(elementwise ops, copies, gathers, max / min reductions, sorts, bucketize), so a split of the work over threads
changes nothing but the host time.  Ops whose result can change with the split stay on the caller's thread count,
as the CPU runs them: sums and means (a full reduction's partial sums are per thread), matmuls (BLAS blocks by
thread), accumulating scatters and index puts, random draws (MKL's streams are per thread) and anything not listed.
With 1 thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``) nothing changes.  A compiled graph's steps
follow the same rule step by step (``compile/runtime.py``, ``CompiledGraph.serial``).

The count is set around the op and put back after it (``torch.set_num_threads`` twice: 0.3-0.5 us, measured as
above); an op nested in another (a decomposition) finds it at 1 already and leaves it.

On an idle host the other thread is free, and one thread loses wall time: bitsandbytes' slice on an idle 2-core host
(benchmarks/speed-bnb-s45.md) took 324 s of wall with one thread against 268 s with two, while under load one
thread won (404 against 526 s, speed-bnb-s44.md).  So by default (``auto``) :class:`HostLoad` decides: the caller's
threads while the cores this process may run on had, over the last quarter second, a core's worth of time free
beyond what this process used (``/proc/stat``'s busy time less this process's CPU time), one thread otherwise (and
wherever ``/proc/stat`` cannot be read, or a cgroup CPU quota allows fewer than two cores).  Which count runs an op
changes its host time only, never its values or simulated time."""

from __future__ import annotations

import os
import time

import torch

from .. import config

_get_threads = torch.get_num_threads
_set_threads = torch.set_num_threads

# categories of op_table.TABLE whose every op computes each output element from its inputs alone
SERIAL_CATEGORIES = frozenset({"unary", "binary", "copy", "reduce_max", "sort", "gather"})
# ops of those categories that accumulate into an output (the order of the additions is the threads'), or draw
# random numbers
NOT_SERIAL = frozenset({
    "index_add", "index_add_", "index_put", "index_put_", "_unsafe_index_put", "_unsafe_masked_index_put_accumulate",
    "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
    "embedding_dense_backward", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "native_dropout", "masked_scatter", "masked_scatter_",
})
# ops of other categories that are as elementwise (a search per element)
SERIAL_NAMES = frozenset({"bucketize", "searchsorted"})


def is_serial(name, cat):
    """Whether op ``name`` of category ``cat`` (``op_table.TABLE``) runs its numerics on one host thread."""
    if name in NOT_SERIAL:
        return False
    return cat in SERIAL_CATEGORIES or name in SERIAL_NAMES


def _proc_stat():
    """Busy core-seconds since boot of the CPUs this process may run on (``/proc/stat``: all time but idle and
    iowait), and how many they are; None where it cannot be read."""
    try:
        cpus = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        with open("/proc/stat", encoding="ascii") as f:
            lines = [ln.split() for ln in f if ln.startswith("cpu") and not ln.startswith("cpu ")]
    except (OSError, AttributeError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    busy = n = 0
    for ln in lines:
        if ln[0] in cpus:
            v = [int(x) for x in ln[1:9]]           # user nice system idle iowait irq softirq steal
            busy += sum(v) - v[3] - v[4]
            n += 1
    return (busy / ticks, n) if n else None


def _quota_cores():
    """The cores a cgroup-v2 CPU quota allows this process (``/sys/fs/cgroup/cpu.max``), None without one."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def usable_cores():
    """How many cores this process may use: the CPUs of its affinity (else ``os.cpu_count()``), fewer when a
    cgroup-v2 quota allows fewer (rounded down, at least 1)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    q = _quota_cores()
    return max(1, min(n, int(q))) if q is not None else n


class HostLoad:
    """Whether a core beyond this process's own is free: over each window of ``window_s`` seconds, the busy
    core-seconds of the CPUs it may run on (``stat()``: ``(busy seconds, cpus)`` or None) less this process's CPU
    seconds (``own()``) are the other processes' load; a core is free when the cpus less one (this process's
    calling thread) less that load leave at least ``margin`` of a core.  The answer holds for a window (one read of
    ``/proc/stat`` a quarter second, a clock read per op); before the first window closes, and without
    ``/proc/stat``, it is no."""

    def __init__(self, window_s=0.25, margin=0.75, stat=_proc_stat, own=time.process_time, clock=time.monotonic,
                 quota=_quota_cores):
        self.window_s, self.margin = window_s, margin
        self._stat, self._own, self._clock, self._quota = stat, own, clock, quota
        self.reset()

    def reset(self):
        """Forget the window (after a fork: the child's CPU time starts again from zero)."""
        self._start = None          # (clock, busy seconds, own seconds) at the window's start
        self._free = False
        self._cap = None            # cores a cgroup quota allows (read once)

    def free_core(self):
        now = self._clock()
        if self._start is not None and now - self._start[0] < self.window_s:
            return self._free
        st = self._stat()
        own = self._own()
        if st is None:
            self._start, self._free = (now, None, own), False
            return False
        busy, cpus = st
        if self._cap is None:
            q = self._quota()
            self._cap = cpus if q is None else min(cpus, q)
        if self._start is not None and self._start[1] is not None and now > self._start[0]:
            dt = now - self._start[0]
            others = max(0.0, (busy - self._start[1]) - (own - self._start[2])) / dt
            self._free = self._cap - 1 - others >= self.margin
        self._start = (now, busy, own)
        return self._free


HOST = HostLoad()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=HOST.reset)


def one_thread():
    """Whether a serial op runs on one host thread now: ``config.serial_host_ops`` on, or ``auto`` and no core free
    beyond this process's (:class:`HostLoad`)."""
    mode = config.serial_host_ops
    if mode == "auto":
        return not HOST.free_core()
    return mode


def serial(fn):
    """``fn`` run on one host thread while :func:`one_thread` says so (the caller's count put back after)."""
    def run(*args, **kwargs):
        n = _get_threads()
        if n == 1 or not one_thread():
            return fn(*args, **kwargs)
        _set_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            _set_threads(n)
    run.__wrapped__ = fn
    run.__name__ = getattr(fn, "__name__", "op")
    return run
