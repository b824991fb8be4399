"""``trnsim.profile(kernel)(*args)``: simulate a kernel and schedule it, returning a :class:`Profile`.

Works with ``nki.jit`` kernels (v2), plain kernel functions, and any kernel object exposing ``fn`` (and
optionally ``grid``/``target``), such as v1 front-end kernels.
"""

from __future__ import annotations

import contextlib
import gc

__all__ = ["profile", "Profile", "profile_result", "gc_paused"]


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cycle collector: simulating and scheduling allocate many small objects and free them by
    reference counting, so the collector's passes over a large instruction record only cost time (about 20% of
    shape-only issue on a long kernel)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Profile:
    """A simulated launch and its timeline."""

    def __init__(self, result, timeline, name=""):
        self.result = result            # the SimulationResult (outputs and cores)
        self.timeline = timeline
        self.name = name

    @property
    def outputs(self):
        return self.result.outputs

    @property
    def total_ns(self) -> float:
        return self.timeline.total_ns

    @property
    def mfu(self) -> float:
        return self.timeline.mfu

    @property
    def mbu(self) -> float:
        return self.timeline.mbu

    @property
    def engine_active(self) -> dict:
        return self.timeline.engine_active

    @property
    def dma_utilisation(self) -> float:
        return self.timeline.dma_utilisation

    def summary(self) -> str:
        """The printable summary table."""
        from .profiler import format_summary
        return format_summary(self.timeline, title=f"trnsim profile: {self.name}" if self.name else "")

    def __str__(self):
        return self.summary()

    def save_trace(self, path):
        """Write a Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing)."""
        from .profiler import write_trace
        return write_trace(self.timeline, path)

    def plot(self, path, title=None):
        """Write a PNG timeline (needs matplotlib)."""
        from .profiler import plot_timeline
        return plot_timeline(self.timeline, path, title=title)


def _unwrap(kernel):
    fn = getattr(kernel, "fn", None)
    if fn is None:
        fn = getattr(kernel, "func", None)
    if fn is None:
        fn = kernel
    grid = getattr(kernel, "grid", None) or (1,)
    target = getattr(kernel, "target", None)
    return fn, grid, target


def profile_result(result, name="", progress=None) -> Profile:
    """Schedule an existing ``SimulationResult``."""
    from .machine import schedule
    return Profile(result, schedule(result.cores, progress=progress), name=name)


def profile(kernel, *, target=None, grid=None, execute=True, precise=None, progress=None):
    """``trnsim.profile(kernel)(*args, **kwargs) -> Profile``.

    ``execute=False`` runs in shape-only mode (no numerics: outputs are ``None``, the timeline is the same);
    ``target`` overrides the kernel's (default: ``NEURON_PLATFORM_TARGET_OVERRIDE`` or trn2); ``grid`` the launch
    grid (``kernel[2]`` works too); ``progress(done, total)`` is called while scheduling long runs."""
    from .kernels.jit import run_kernel

    fn, kgrid, ktarget = _unwrap(kernel)
    g = grid if grid is not None else kgrid
    if not isinstance(g, tuple):
        g = (g,)
    tg = target if target is not None else ktarget
    name = getattr(fn, "__name__", "kernel")

    def call(*args, **kwargs) -> Profile:
        k = kernel
        if grid is not None and hasattr(k, "fn") and hasattr(k, "__getitem__"):
            k = k[grid]
        with gc_paused():
            if execute and target is None and precise is None and hasattr(k, "run") and hasattr(k, "fn"):
                res = k.run(*args, **kwargs)       # the front end's own launch (v1 kernels wrap their arguments)
            else:
                body = k._body()[0] if hasattr(k, "_body") else fn
                res = run_kernel(body, args, kwargs, g, tg, execute=execute, precise=precise)
        return profile_result(res, name=name, progress=progress)

    return call
