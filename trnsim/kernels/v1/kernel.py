"""Legacy NKI entry points: ``nki.jit(mode=...)``, ``nki.baremetal``, ``nki.simulate_kernel``, ``nki.benchmark``,
``nki.profile``.  All of them simulate: trnsim has no hardware path.  NumPy arrays (or torch CPU tensors) go in,
the same come out."""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np

from .. import hooks
from ..jit import Kernel, run_kernel
from .tile import as_tile

__all__ = ["V1Kernel", "jit", "trace", "baremetal", "simulate_kernel", "benchmark", "profile", "BenchmarkResult"]

_MODES = ("auto", "simulation", "baremetal", "benchmark", "profile", "trace")
# framework modes: the kernel still runs here, on host (NumPy / torch CPU) arrays; array-likes are converted
_FRAMEWORK_MODES = ("jax", "torchxla", "pytorch", "torch")


def _grid_dims(grid):
    """The launch grid ``kernel[g0, g1, ...]`` as a tuple of program counts per axis.

    An nl.spmd_dim(nl.nc(2), 4) entry is one grid dimension of their product (8 programs).  A dimension of 0
    launches one program on that axis (``program_id`` 0, ``num_programs`` 1), with a warning: legacy NKI puts
    "no restriction ... on the size of each dimension" of an SPMD grid (NKI programming model, "SPMD"), and AWS's
    contributed pipelined_attention launches ``flash_fwd[0]`` on a batch of one, reading ``nl.program_id(0)`` as
    the batch index, and checks the whole output, which only a single program with id 0 produces.  A negative
    dimension has no meaning and is refused."""
    raw = grid if isinstance(grid, tuple) else (grid,)
    dims = []
    for g in raw:
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
            try:
                g = int(g)
            except (TypeError, ValueError):
                raise TypeError(f"SPMD launch grid {list(raw)}: dimension {g!r} is not an integer") from None
        dims.append(int(g))
    for d in dims:
        if d < 0:
            raise ValueError(f"SPMD launch grid {dims}: dimension {d} is negative; every dimension must be >= 0")
    if 0 in dims:
        fixed = [d if d else 1 for d in dims]
        warnings.warn(f"SPMD launch grid {dims}: a dimension of 0 launches one program on that axis (grid run as "
                      f"{fixed}), as legacy NKI does", UserWarning, stacklevel=3)
        dims = fixed
    return tuple(dims)


class V1Kernel(Kernel):
    """A legacy NKI kernel: ``kernel[g0, g1, ...](*arrays)`` launches an SPMD grid of any rank."""

    def __init__(self, fn, grid=(1,), target=None, options=None, mode="auto"):
        super().__init__(fn, grid, target, options)
        self.mode = mode
        self.benchmark_result = None

    def __getitem__(self, grid):
        k = V1Kernel(self.fn, _grid_dims(grid), self.target, self.options, self.mode)
        return k

    def _body(self):
        fn = self.fn
        seen = []

        @functools.wraps(fn)
        def body(*args, **kwargs):
            args = [as_tile(a) for a in args]
            kwargs = {k: as_tile(v) for k, v in kwargs.items()}
            if not seen:
                seen.append((args, kwargs))
            return fn(*args, **kwargs)
        return body, seen

    def run(self, *args, **kwargs):
        if self.mode == "jax":
            # jax arrays (and other array-likes) become host NumPy arrays; the kernel runs on the simulator
            args = tuple(a if isinstance(a, np.ndarray) or not hasattr(a, "__array__") or
                         type(a).__module__.startswith("torch") else np.asarray(a) for a in args)
        body, seen = self._body()
        res = run_kernel(body, args, kwargs, self.grid, self.target, strict_races=self.options.get("strict_races"))
        if seen:
            _write_back(args, kwargs, seen[0], res)
        return res

    def __call__(self, *args, **kwargs):
        if hooks._CALL_BRIDGES:       # e.g. neuron tensors: the PyTorch device runs the call (hooks.py)
            r = hooks.offer_call(self, args, kwargs)
            if r is not NotImplemented:
                return r
        res = self.run(*args, **kwargs)
        if self.mode == "benchmark":
            self.benchmark_result = BenchmarkResult(res, **self.options)
        elif self.mode == "profile":
            _write_profile(self, res)
        return res.outputs


def _write_back(args, kwargs, wrapped, res):
    """Legacy kernels may write into an input (an output array passed by the caller): copy such writes back
    into the caller's NumPy array, as the kernel's effect on its argument."""
    written = set()
    for c in res.cores:
        for r in c.instructions:
            for w in r.writes:
                written.add(w[0])
    pairs = list(zip(args, wrapped[0])) + [(kwargs[k], wrapped[1][k]) for k in kwargs]
    for orig, t in pairs:
        if not isinstance(orig, np.ndarray) or not hasattr(t, "buf") or t.buf.id not in written:
            continue
        if t.buf.data is None:
            continue
        data = t.buf.data.reshape(orig.shape)
        orig[...] = data.astype(orig.dtype) if data.dtype != orig.dtype else data


def jit(func=None, mode="auto", **kwargs):
    """``nki.jit(func, mode=...)``: every mode simulates.  ``trace`` (a kernel other launchers call, e.g.
    ``simulate_kernel``) runs as ``simulation``; the framework modes ``jax``/``torchxla`` run the kernel here on
    host arrays (a device array is refused when called, naming the mode)."""
    if func is None:
        return lambda f: jit(f, mode=mode, **kwargs)
    m = str(mode).lower()
    if m not in _MODES and m not in _FRAMEWORK_MODES:
        raise ValueError(f"nki.jit(mode={mode!r}): unknown mode; expected one of "
                         f"{', '.join(_MODES + _FRAMEWORK_MODES)}")
    if isinstance(func, V1Kernel):
        func = func.fn
    return V1Kernel(func, options=kwargs, mode=m)


def trace(func=None, **kwargs):
    """``nki.trace(func)``: a kernel for other launchers (``simulate_kernel``, frameworks); calling it simulates."""
    if func is None:
        return lambda f: trace(f, **kwargs)
    return jit(func, mode="trace", **kwargs)


def baremetal(kernel=None, **kwargs):
    """``nki.baremetal(kernel)``: run on the simulated NeuronCore with NumPy inputs and outputs."""
    if kernel is None:
        return lambda k: baremetal(k, **kwargs)
    return jit(kernel.fn if isinstance(kernel, Kernel) else kernel, mode="baremetal", **kwargs)


def simulate_kernel(kernel, *args, **kwargs):
    """``nki.simulate_kernel(kernel, *arrays)``: run ``kernel`` once and return its outputs."""
    k = kernel if isinstance(kernel, V1Kernel) else jit(kernel.fn if isinstance(kernel, Kernel) else kernel,
                                                           mode="simulation")
    return k(*args, **kwargs)


def benchmark(kernel=None, **kwargs):
    """``nki.benchmark(kernel, warmup=, iters=)``: the call returns the outputs and sets
    ``kernel.benchmark_result.nc_latency.get_latency_percentile(p)`` (microseconds, from the timing model)."""
    if kernel is None:
        return lambda k: benchmark(k, **kwargs)
    return jit(kernel.fn if isinstance(kernel, Kernel) else kernel, mode="benchmark", **kwargs)


def profile(func=None, **kwargs):
    """``nki.profile(working_directory=..., save_trace_name=...)``: run and write a trace of the simulated
    timeline."""
    if func is None:
        return lambda f: profile(f, **kwargs)
    return jit(func.fn if isinstance(func, Kernel) else func, mode="profile", **kwargs)


def _schedule(res):
    try:
        from ...machine import schedule
    except ImportError:
        raise NotImplementedError(
            "nki.benchmark needs trnsim's timing model (trnsim.machine.schedule), which this build does not have; "
            "trnsim does not report a latency it has not modelled") from None
    return schedule(res.cores)


class _Latency:
    """Latency percentiles of the simulated runs, in microseconds.  The simulation is deterministic, so every
    iteration takes the same time and every percentile is that time."""

    def __init__(self, us, iters):
        self._us = us
        self.iters = iters

    def get_latency_percentile(self, p):
        p = float(p)
        if not 0 <= p <= 100:
            raise ValueError(f"latency percentile {p} is outside [0, 100]")
        return self._us

    def __repr__(self):
        return f"<nc_latency {self._us:.3f} us x {self.iters} iterations (simulated)>"


class BenchmarkResult:
    """``kernel.benchmark_result``: ``.nc_latency.get_latency_percentile(p)`` in microseconds."""

    def __init__(self, res, warmup=2, iters=10, **_):
        self.timeline = _schedule(res)
        self.warmup = int(warmup)
        self.iters = int(iters)
        self.nc_latency = _Latency(self.timeline.total_ns / 1000.0, self.iters)


def _write_profile(kernel, res):
    tl = _schedule(res)
    opts = kernel.options
    wd = opts.get("working_directory") or os.getcwd()
    name = opts.get("save_trace_name") or f"{getattr(kernel.fn, '__name__', 'kernel')}.trace.json"
    from ...profiler import write_trace
    os.makedirs(wd, exist_ok=True)
    write_trace(tl, os.path.join(wd, name))
