"""The dynamo patches the ``neuron`` device needs, applied once, as soon as dynamo exists in the process: its own
module so that the package's ``__init__`` (which applies them when dynamo imports it), ``backend.neuron`` (which makes
sure of them before compiling) and device registration (which arranges for them when dynamo is imported, or now if
it already is) share it without importing each other.

Dynamo must see ``neuron`` tensors the same way whatever ran first: ``torch._dynamo.explain`` or a
``torch.compile(backend=...)`` with another backend in a fresh process must not trace them as opaque objects (graph
breaks) just because the ``neuron`` backend was never compiled with.  Importing dynamo costs about a second, so
registration never imports it: :func:`patch_when_dynamo_loads` puts a finder on ``sys.meta_path`` that runs
:func:`ensure_patched` right after ``torch._dynamo`` has been executed, then removes itself."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import warnings

_DONE = False
# (class, method name): Python callbacks of the device that torch's C++ calls while dynamo's frame hook is active
# (the device guard's ``type_``, asked by the current-stream guard dynamo installs on every compiled frame of neuron
# tensors); dynamo would otherwise try to compile each such frame, fail ("Unexpected type in sourceless builder:
# DeviceType") and report a graph break that is no break in the user's code.  Made ``torch.compiler.disable``d.
_UNTRACED = []


def untraced(cls, name):
    """Have dynamo run ``cls.<name>`` without tracing it, from when dynamo loads (now if it is loaded and patched)."""
    _UNTRACED.append((cls, name))
    if _DONE:
        _disable(cls, name)


def _disable(cls, name):
    fn = cls.__dict__[name]
    if getattr(fn, "_trnsim_untraced", False):
        return
    import torch
    off = torch.compiler.disable(fn)
    off._trnsim_untraced = True
    setattr(cls, name, off)


def ensure_patched():
    """Apply the dynamo patch that lets dynamo trace device tensors (trnsim.backend.patches) and enable the
    flex-attention lowering."""
    global _DONE
    if _DONE:
        return
    from .. import patches
    from ..tensor import NeuronTensor
    patches.dynamo_wrap_tensor(NeuronTensor)
    patches.inductor_on_neuron()            # inductor graphs of device tensors go to the neuron backend
    from .. import nki_bridge
    nki_bridge.auto_functionalized_on_device(NeuronTensor)      # mutating custom ops in graphs (issue 21)
    from . import flex
    flex.enable()
    for cls, name in _UNTRACED:
        _disable(cls, name)
    _DONE = True


@contextlib.contextmanager
def guard_latency_unmeasured():
    """Inside, dynamo does not time the guards of each frame it compiles.  After building a frame's guards dynamo
    flushes the CPU cache and evaluates them once to log their latency (``torch._dynamo.guards``: "We first do a
    cache flush to measure the guard latency more accurately. This cache flush is expensive"), a figure it only
    logs (``guard_latency_us``); it changes nothing that is compiled or run.  The cost estimator compiles its
    template layers inside this (measured: 0.145 s of CPU over the 6 frames of a cold compiled Qwen3-32B
    estimate, benchmarks/speed-estim13.md).  Restores torch's function on exit."""
    import torch._dynamo.guards as guards
    prev = getattr(guards, "profile_guard_manager", None)
    if prev is None:            # a torch without the timing (written for 2.13): nothing to skip
        yield
        return
    guards.profile_guard_manager = _no_guard_profile
    try:
        yield
    finally:
        guards.profile_guard_manager = prev


def _no_guard_profile(*args, **kwargs):
    return 0.0


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds ``torch._dynamo`` with the other finders and wraps its loader so that the patches follow its
    execution."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo":
            return None
        _unhook()
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                ensure_patched()
            except Exception as e:      # noqa: BLE001 -- never break dynamo's import; compiling applies them again
                warnings.warn(f"trnsim could not patch dynamo for neuron tensors when it loaded ({type(e).__name__}: "
                              f"{e}); they are applied when a model is compiled with backend='neuron'",
                              RuntimeWarning, stacklevel=2)
        spec.loader.exec_module = exec_module
        return spec


_HOOK = _AfterDynamoImport()


def _unhook():
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def patch_when_dynamo_loads():
    """Apply the patches now if dynamo is loaded, else when it is (called by device registration)."""
    if "torch._dynamo" in sys.modules:
        ensure_patched()
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
