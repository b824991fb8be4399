"""Observers of simulated kernel launches (opt-in; none by default).

An observer is called after every launch that computed numbers (shape-only launches, such as the PyTorch device's
cost estimates, are not reported) as ``observer(fn, args, kwargs, params, outputs)``: the kernel function, the
arguments as the caller passed them (NumPy arrays or torch CPU tensors), the kernel's parameter names and the
outputs as returned to the caller.  ``trnsim.difftest.record_kernels`` registers one to record kernels' inputs and
outputs; this module knows nothing of who observes.
"""

from __future__ import annotations

_OBSERVERS: list = []


def add_launch_observer(fn):
    """Call ``fn(kernel_fn, args, kwargs, params, outputs)`` after each launch; returns ``fn``."""
    _OBSERVERS.append(fn)
    return fn


def remove_launch_observer(fn):
    """Stop calling ``fn`` (no error if it was not registered)."""
    try:
        _OBSERVERS.remove(fn)
    except ValueError:
        pass


def notify_launch(fn, args, kwargs, params, outputs):
    for obs in list(_OBSERVERS):
        obs(fn, args, kwargs, params, outputs)
