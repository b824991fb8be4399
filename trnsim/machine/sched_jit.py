"""``njit`` for the scheduler's loop (``sched_events``, ``sched_state`` and their helpers): numba's, or, when numba cannot be
imported, a decorator that leaves each function plain Python (with ``py_func`` pointing at itself), so the one
loop still runs, slowly, and gives the same timelines.  numba is a dependency of trnsim (pyproject.toml); this
only keeps a broken install usable."""

from __future__ import annotations

__all__ = ["njit", "HAVE_NUMBA"]

try:
    from numba import njit
    HAVE_NUMBA = True
except ImportError:          # pragma: no cover (exercised in a subprocess by tests/machine/test_sched_fast.py)
    HAVE_NUMBA = False

    def njit(*args, **kwargs):
        def deco(fn):
            fn.py_func = fn
            return fn
        if args and callable(args[0]):
            return deco(args[0])
        return deco
