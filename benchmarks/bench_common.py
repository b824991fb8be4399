"""Helpers the benchmark scripts share: BLAS pinned to one thread, median time of repeated runs (wall or process
CPU time).

BLAS threads: with threadpoolctl installed, ``blas_one_thread()`` pins them for a block.  Without it, importing
this module before NumPy sets ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` to 1 (unless already
set), which NumPy's BLAS reads when it loads; so benchmark scripts import ``bench_common`` first.  An unpinned
BLAS on a loaded 2-core machine spins two threads per 128x128x512 matmul and ran it 6-18x slower (0.18 ms pinned,
1.1-3.3 ms unpinned, process CPU time, measured on this project's machine), which swamped every matmul ratio.
"""

import contextlib
import os
import statistics
import sys
import time

_NUMPY_FIRST = "numpy" in sys.modules
if not _NUMPY_FIRST:
    for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, "1")

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    threadpool_limits = None


def blas_one_thread():
    """A context pinning BLAS to one thread (a no-op without threadpoolctl: then the environment pins it)."""
    if threadpool_limits is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def blas_note():
    """How BLAS is pinned in this run, for the report."""
    if threadpool_limits is not None:
        return "BLAS pinned to 1 thread (threadpoolctl)"
    n = os.environ.get("OPENBLAS_NUM_THREADS")
    if _NUMPY_FIRST:
        return f"BLAS threads: NumPy was imported before bench_common (OPENBLAS_NUM_THREADS={n}; may be unpinned)"
    return f"BLAS pinned by the environment (OPENBLAS_NUM_THREADS={n})"


def timed(fn, repeats, clock=time.perf_counter):
    """``(median seconds, last result)`` of ``repeats`` calls of ``fn``, timed with ``clock``."""
    times = []
    out = None
    for _ in range(repeats):
        t0 = clock()
        out = fn()
        times.append(clock() - t0)
    return statistics.median(times), out


def cpu_timed(fn, repeats):
    """:func:`timed` in process CPU time (``time.process_time``): what this process spent, whatever else runs on
    the machine (other processes only slow it through caches and frequency)."""
    return timed(fn, repeats, time.process_time)
