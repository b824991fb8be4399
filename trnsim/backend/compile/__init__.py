"""``torch.compile(model, backend="neuron")`` on the simulated device (see ``backend.py``).

Registered only by the ``torch_dynamo_backends`` entry point (``neuron = trnsim.backend.compile:neuron``): dynamo
imports this package when a model is compiled with ``backend="neuron"``, never at ``import torch`` or
``import trnsim``.  Public names: :func:`neuron` (the backend), :func:`compile_summary`, :func:`compile_records`,
:data:`CACHE`, the errors.
"""

from .errors import NeuronCacheWarning, NeuronCompileError, NeuronCompileWarning


def _ensure_patched():
    """Apply the dynamo patch that lets dynamo trace device tensors (trnsim.backend.patches)."""
    from .. import patches
    from ..tensor import NeuronTensor
    patches.dynamo_wrap_tensor(NeuronTensor)
    from .. import nki_bridge
    nki_bridge.auto_functionalized_on_device(NeuronTensor)      # mutating custom ops in graphs (issue 21)
    from . import flex
    flex.enable()


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
# anything: patch now, so that the first trace already sees device tensors as tensors.  This package is imported
# only for compiling (it imports dynamo), never by ``import torch`` or ``import trnsim``.
_ensure_patched()
