"""``nki.jit`` and ``nki.simulate``: run a kernel on simulated NeuronCores with NumPy or torch CPU tensors."""

from __future__ import annotations

import collections
import functools
import gc
import inspect

import numpy as np

from ..machine import Chip, NeuronCore
from ..memory import Tensor, dtype_of
from ..memory.dtypes import from_real, to_real
from ..memory.reinterpret import Native
from ..memory.space import native_ok
from ..targets import get_target
from . import context, hooks, launch, loop_replay
from .tensor import NkiTensor

__all__ = ["jit", "simulate", "Kernel", "SimulationResult", "ShapeOnlyInput"]


class ShapeOnlyInput:
    """An input of a shape-only launch (``run_kernel(..., execute=False)``): a shape and a trnsim dtype (a name or
    :class:`~trnsim.memory.DType`), no values, as an HBM tensor of them.  What an empty NumPy array of that shape
    and dtype gives such a launch (the same tensor: only its shape and dtype are read), without making one: a
    NumPy bfloat16 or fp8 array needs ml_dtypes' dtypes, whose import a shape-only run does not otherwise pay."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"ShapeOnlyInput: shape {self.shape} has a negative dimension")
        self.dtype = dtype_of(dtype)

    def __repr__(self):
        return f"ShapeOnlyInput({self.shape}, {self.dtype.name})"


def _shape_only_input(core, shape, dt, name, kind, x):
    """A shape-only run's HBM tensor for an input: the buffer keeps no values (``wrap_input`` drops them when not
    executing), so the array is not converted to its storage type (a full-size float32 copy of a bf16 array)."""
    buf = core.wrap_input(None, shape, dt, name=name)
    return NkiTensor.whole(buf, name), (kind, x)


def _to_input(core, x, name):
    """An HBM tensor for a NumPy array or torch CPU tensor; other values pass through unchanged."""
    kind = None
    if isinstance(x, np.ndarray):
        kind = "numpy"
        arr = x
        dt = dtype_of(arr.dtype)
        if dt.packed and arr.dtype != dt.np:
            arr = arr.view(dt.np)      # a NumPy dtype standing for an MX format: its packed integers
        if not core.execute:
            return _shape_only_input(core, arr.shape, dt, name, kind, x)
    elif isinstance(x, ShapeOnlyInput):
        if core.execute:
            raise ValueError(f"kernel argument {name!r} is a ShapeOnlyInput (no values): only a shape-only launch "
                             f"(execute=False) takes one")
        return _shape_only_input(core, x.shape, x.dtype, name, "numpy", x)
    elif type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        import torch
        kind = "torch"
        if x.device.type != "cpu":
            raise TypeError(f"kernel argument {name!r} is on device {x.device}; nki.simulate takes CPU tensors")
        dt = dtype_of(x.dtype)
        if not core.execute:
            return _shape_only_input(core, tuple(x.shape), dt, name, kind, x)
        t = x.detach()
        arr = t.float().numpy() if dt.is_float and t.dtype != torch.float32 else t.numpy()
    else:
        return x, None
    if kind == "numpy" and arr.dtype == dt.np and native_ok(dt, arr.size, core.execute, core.precise):
        # a large narrow-float input is held in HBM as its own bits (2 or 1 bytes an element, not a float32 each);
        # views convert at access, the DMA boundary (memory/reinterpret.py Native).  A contiguous one is borrowed,
        # not copied: the buffer gets a read-only view of the caller's array and copies it at the kernel's first
        # write into it (space.Buffer.writable), so the caller's array never changes
        if arr.flags.c_contiguous:
            src = arr.view()
            src.flags.writeable = False
        else:
            src = np.array(arr, copy=True)
        buf = core.wrap_input(src, arr.shape, dt, name=name, native=True)
        return NkiTensor.whole(buf, name), (kind, x)
    src = from_real(dt, arr) if dt.is_float and arr.dtype == dt.np and arr.dtype != np.float32 else (
        arr.astype(np.float32) if dt.is_float and arr.dtype != np.float32 else arr)   # bit patterns kept
    buf = core.wrap_input(src, arr.shape, dt, name=name)
    return NkiTensor.whole(buf, name), (kind, x)


def _registered_packed(dt):
    """The NumPy dtype registered under an MX packed format's name (AWS's ``neuron_dtypes`` registers them, as
    does the nki-library stand-in), if one of the format's size is; else None."""
    try:
        npd = np.dtype(dt.name)
    except TypeError:
        return None
    return npd if npd.itemsize == dt.itemsize and npd.kind == "V" else None


def _to_output(t, kind, own=(), inputs=frozenset()):
    """The host value of output ``t``.  ``own``: ids of buffers the launch is done with and that no other output
    views (run_kernel's outputs), whose arrays may be handed over rather than copied; ``inputs``: ids of buffers
    holding kernel inputs (a float32 input's buffer may be the caller's own array: copied)."""
    if not isinstance(t, Tensor):
        return t
    if t.buf.data is None:
        return None
    rv = t._rv
    if kind == "numpy" and isinstance(rv, Native) and t._bad is None:
        # held in its own encoding: the bits, with no float32 round trip; a whole buffer only this output views
        # is handed over as it is (it goes with the launch), anything else copied
        buf = t.buf
        if buf.id in own and not buf.borrowed and t.offset == 0 and t.size == buf.nelem and t.is_contiguous():
            return buf.data.reshape(t.shape)      # (a borrowed buffer is the caller's input array: copied)
        return np.array(rv.bits(t))
    buf = t.buf
    if (kind == "numpy" and rv is None and t._bad is None and buf.id in own and buf.id not in inputs
            and not t.dtype.packed and t.offset == 0 and t.size == buf.nelem and t.is_contiguous()
            and buf.data.dtype == t.dtype.np):
        # a whole buffer held in the dtype's own NumPy type (float32, integers; not an MX packed format, which
        # comes back in its registered dtype below) that only this output views and that is no kernel input:
        # handed over, not copied (the launch is done with it)
        return buf.data.reshape(t.shape)
    a = np.ascontiguousarray(t.np)
    if t.dtype.packed and kind != "torch":
        # an MX output comes back in the format's NumPy dtype where one is registered (as the Neuron runtime's
        # outputs are), else as its packed integers
        npd = _registered_packed(t.dtype)
        return a.copy().view(npd) if npd is not None else a.copy()
    real = to_real(t.dtype, a) if t.dtype.np != a.dtype else a.copy()     # bit patterns kept (NaN payloads)
    if kind == "torch":
        import torch
        if t.dtype.name == "bfloat16":
            return torch.from_numpy(a.copy()).to(torch.bfloat16)
        if t.dtype.name in ("float8_e4m3fn", "float8_e5m2"):
            return torch.from_numpy(a.copy()).to(getattr(torch, t.dtype.name))
        return torch.from_numpy(real)
    return real


def _tensors(out, acc):
    if isinstance(out, (tuple, list)):
        for o in out:
            _tensors(o, acc)
    elif isinstance(out, dict):
        for o in out.values():
            _tensors(o, acc)
    elif isinstance(out, Tensor):
        acc.append(out.buf.id)
    return acc


def _convert(out, kind, own=None, inputs=frozenset()):
    """``inputs``: ids of the buffers holding kernel inputs (a float32 one may be the caller's own array)."""
    if own is None:          # the buffers exactly one output views
        own = {i for i, n in collections.Counter(_tensors(out, [])).items() if n == 1}
    if isinstance(out, (tuple, list)):
        return type(out)(_convert(o, kind, own, inputs) for o in out)
    if isinstance(out, dict):
        return {k: _convert(v, kind, own, inputs) for k, v in out.items()}
    return _to_output(out, kind, own, inputs)


class SimulationResult:
    """What one simulated launch produced: the outputs and the cores (with their instruction records)."""

    def __init__(self, outputs, cores):
        self.outputs = outputs
        self.cores = cores

    @property
    def instructions(self):
        return [r for c in self.cores for r in c.instructions]


GC_YOUNG = 10_000       # allocations between collections of the youngest generation while a launch runs


def run_kernel(fn, args, kwargs, grid=(1,), target=None, execute=True, precise=None, strict=None,
               strict_races=None):
    """Simulate one launch of ``fn`` over ``grid`` programs (run interleaved: ``launch.py``); returns a
    :class:`SimulationResult`.  Called from inside a running kernel, ``fn`` runs inline in the calling program."""
    if launch.inside_kernel():
        return SimulationResult(fn(*args, **kwargs), [])
    tg = get_target(target)
    grid = tuple(int(g) for g in grid) or (1,)
    nprog = 1
    for g in grid:
        nprog *= g
    chip = Chip(tg)
    cores = [NeuronCore(tg, execute=execute, precise=precise, strict=strict, chip=chip, core_id=i)
             for i in range(nprog)]
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    kind = "numpy"
    wrapped = []
    for i, a in enumerate(args):
        nm = params[i] if i < len(params) else f"arg{i}"
        t, k = _to_input(cores[0], a, nm)
        if k is not None:
            kind = k[0]
        wrapped.append(t)
    wkw = {}
    for k_, v in kwargs.items():
        t, k = _to_input(cores[0], v, k_)
        if k is not None:
            kind = k[0]
        wkw[k_] = t
    ctx = context.KernelContext(cores, grid)
    prev = context.push(ctx)
    # the cycle collector's youngest generation collected every GC_YOUNG allocations instead of every 700 during
    # the launch: an instruction allocates a dozen small objects (its record, operand tuples), all freed by
    # reference counting or kept in the record, so frequent passes only cost time (~15% of a functional
    # small-tile run); cycles are still collected, later
    thr = gc.get_threshold()
    raised = 0 < thr[0] < GC_YOUNG
    if raised:
        gc.set_threshold(GC_YOUNG, *thr[1:])
    run_fn = fn
    if nprog == 1 and not execute and loop_replay.enabled():
        # shape-only, one program: eligible loops append their later iterations in bulk (loop_replay.py)
        run_fn = loop_replay.rewritten(fn) or fn
    try:
        out = launch.run_programs(run_fn, wrapped, wkw, ctx, cores, strict_races)
    finally:
        context.pop(prev)
        if raised and gc.get_threshold()[0] == GC_YOUNG:     # (unless the kernel set it meanwhile)
            gc.set_threshold(*thr)
    ins = frozenset(t.buf.id for t in list(wrapped) + list(wkw.values()) if isinstance(t, Tensor))
    result = SimulationResult(_convert(out, kind, inputs=ins), cores)
    if execute and hooks._OBSERVERS:
        hooks.notify_launch(fn, args, kwargs, params, result.outputs)
    return result


class Kernel:
    """A kernel decorated with ``nki.jit``: call it to simulate (trnsim has no hardware path), index it with
    ``kernel[lnc]`` (v2) or ``kernel[g0, g1, ...]`` (v1 SPMD grid) to launch several programs."""

    def __init__(self, fn, grid=(1,), target=None, options=None):
        self.fn = fn
        self.grid = grid
        self.target = target
        self.options = dict(options or {})
        functools.update_wrapper(self, fn)

    def __getitem__(self, grid):
        if not isinstance(grid, tuple):
            grid = (grid,)
        return Kernel(self.fn, grid, self.target, self.options)

    def run(self, *args, **kwargs) -> SimulationResult:
        return run_kernel(self.fn, args, kwargs, self.grid, self.target,
                          strict_races=self.options.get("strict_races"))

    def __call__(self, *args, **kwargs):
        if hooks._CALL_BRIDGES:       # e.g. neuron tensors: the PyTorch device runs the call (hooks.py)
            r = hooks.offer_call(self, args, kwargs)
            if r is not NotImplemented:
                return r
        return self.run(*args, **kwargs).outputs


def jit(fn=None, **kwargs):
    """Mark ``fn`` as an NKI kernel.  Options such as ``mode=``, ``debug_kernel=`` or ``experimental_flags=``
    are accepted and ignored: under trnsim every call is simulated."""
    if fn is None:
        return lambda f: jit(f, **kwargs)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn, options=kwargs)


def simulate(kernel, target=None):
    """``nki.simulate(kernel)(*args)``: run ``kernel`` on the simulator; NumPy arrays or torch CPU tensors in,
    the same type out."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    if target is not None:
        k = Kernel(k.fn, k.grid, target, k.options)
    return k
