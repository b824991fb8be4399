"""``torch.compile(model, backend="neuron")`` on the simulated device (see ``backend.py``).

Registered only by the ``torch_dynamo_backends`` entry point (``neuron = trnsim.backend.compile:neuron``): dynamo
imports this package when a model is compiled with ``backend="neuron"``; device registration imports it for
``patching`` (which imports no dynamo).  Public names: :func:`neuron` (the backend), :func:`compile_summary`,
:func:`compile_records`, :data:`CACHE`, the errors.
"""

from .errors import NeuronCacheWarning, NeuronCompileError, NeuronCompileWarning
from .patching import patch_when_dynamo_loads as _patch_when_dynamo_loads


def neuron(gm, example_inputs, **kwargs):
    """The ``neuron`` dynamo backend."""
    from .backend import neuron as _neuron
    return _neuron(gm, example_inputs, **kwargs)


def compile_records():
    from . import stats
    return list(stats.RECORDS)


def compile_summary():
    from . import stats
    return stats.summary()


def __getattr__(name):
    if name == "CACHE":
        from .cache import CACHE
        return CACHE
    raise AttributeError(name)


__all__ = ["neuron", "compile_records", "compile_summary", "CACHE", "NeuronCompileError", "NeuronCompileWarning",
           "NeuronCacheWarning"]


# dynamo imports this package (entry point) when a model is compiled with backend="neuron", before it traces
# anything: patch now, so that the first trace already sees device tensors as tensors.  Device registration imports
# it too (for ``patching``), before dynamo is loaded: then the patches wait for dynamo's import (patching.py).
_patch_when_dynamo_loads()
