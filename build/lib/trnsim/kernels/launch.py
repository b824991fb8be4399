"""Launching a kernel's programs: one per program of the grid (v1 SPMD grid, v2 ``kernel[lnc]``), each on its
own NeuronCore with its own view of the kernel context, run interleaved in simulated-time order by
:class:`trnsim.machine.programs.Programs`, with shared-memory races reported by
:class:`trnsim.machine.races.RaceDetector`.  A kernel called from inside a running kernel runs inline in the
calling program (as a subroutine), not as a new launch."""

from __future__ import annotations

import copy

import numpy as np

from ..machine.programs import Programs
from ..machine.races import RaceDetector
from . import context

__all__ = ["run_programs", "inside_kernel", "program_ids"]


def inside_kernel() -> bool:
    """Whether a kernel is running on this thread (a call to another kernel is then a subroutine call)."""
    try:
        context.current()
    except context.NoKernelError:
        return False
    return True


def program_ids(pid, grid):
    """The grid coordinates of linear program ``pid`` (last axis fastest)."""
    ids = []
    rem = pid
    for g in reversed(grid):
        ids.append(rem % g)
        rem //= g
    return tuple(reversed(ids))


def run_programs(fn, args, kwargs, ctx, cores, strict_races=None):
    """Run ``fn(*args, **kwargs)`` as every program of ``ctx.grid`` (program ``i`` on ``cores[i]``); returns
    program 0's return value.  Races found are warned about when all programs have finished (or raised at the
    second access in strict mode)."""
    n = len(cores)
    races = RaceDetector(n, strict_races) if n > 1 else None
    progs = Programs(cores, races)
    errstate = np.geterr()              # NumPy's error state is per thread: programs run with the caller's

    def body_of(pid):
        pctx = copy.copy(ctx)            # shares the launch's lists (shared outputs...), own program fields
        pctx.program_id = program_ids(pid, ctx.grid)
        pctx.core = cores[pid]
        pctx._shared_index = 0

        def body():
            np.seterr(**errstate)
            prev = context.push(pctx)
            try:
                return fn(*args, **kwargs)
            finally:
                context.pop(prev)
        return body

    results = progs.run([body_of(i) for i in range(n)])
    for c in cores:
        c.check_capacity()          # the tiles' live ranges against SBUF/PSUM, as the compiler allocates them
    if races is not None:
        races.warn(stacklevel=_user_stacklevel())
    return results[0]


def _user_stacklevel():
    """``warnings.warn`` stacklevel (counted from ``RaceDetector.warn``'s caller) of the first frame outside
    trnsim: the user's kernel call."""
    import os
    import sys
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    f = sys._getframe(1)
    level = 1
    while f is not None and f.f_code.co_filename.startswith(pkg):
        f = f.f_back
        level += 1
    return level
