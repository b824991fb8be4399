"""Helpers the benchmark scripts share: BLAS pinned to one thread, median wall time of repeated runs."""

import contextlib
import statistics
import time

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    threadpool_limits = None


def blas_one_thread():
    """A context pinning BLAS to one thread (a no-op without threadpoolctl)."""
    if threadpool_limits is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def timed(fn, repeats):
    """``(median seconds, last result)`` of ``repeats`` calls of ``fn``."""
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out
