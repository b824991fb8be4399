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


# -- call bridges ---------------------------------------------------------------------------------------------
# A framework that runs kernels on its own tensors (the PyTorch device's bridge, trnsim/backend/nki_bridge.py)
# registers ``bridge(kernel, args, kwargs)`` here: it returns the call's result, or ``NotImplemented`` to let the
# kernel run as usual (NumPy arrays, torch CPU tensors).  This package imports no framework code.
_CALL_BRIDGES: list = []


def add_call_bridge(fn):
    """Offer every ``Kernel`` call to ``fn(kernel, args, kwargs)`` first (once per ``fn``); returns ``fn``."""
    if fn not in _CALL_BRIDGES:
        _CALL_BRIDGES.append(fn)
    return fn


def remove_call_bridge(fn):
    try:
        _CALL_BRIDGES.remove(fn)
    except ValueError:
        pass


def offer_call(kernel, args, kwargs):
    """The first bridge's result for this call, or ``NotImplemented`` when no bridge takes it."""
    for bridge in _CALL_BRIDGES:
        r = bridge(kernel, args, kwargs)
        if r is not NotImplemented:
            return r
    return NotImplemented
