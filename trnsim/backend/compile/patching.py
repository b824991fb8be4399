"""The dynamo patches the ``neuron`` backend needs, applied once: its own module so that the package's
``__init__`` (which applies them when dynamo imports it) and ``backend.neuron`` (which makes sure of them before
compiling) share it without importing each other."""

from __future__ import annotations


def ensure_patched():
    """Apply the dynamo patch that lets dynamo trace device tensors (trnsim.backend.patches) and enable the
    flex-attention lowering."""
    from .. import patches
    from ..tensor import NeuronTensor
    patches.dynamo_wrap_tensor(NeuronTensor)
    from .. import nki_bridge
    nki_bridge.auto_functionalized_on_device(NeuronTensor)      # mutating custom ops in graphs (issue 21)
    from . import flex
    flex.enable()
