"""``neuronxcc.nki.compiler.backends.neuron.tensor``: ``local_tile``, a compiler-internal name some kernels import.

Importing it works (public kernels import it without calling it); calling it raises ``NotImplementedError`` naming
itself, as trnsim does for every legacy name it does not model.
"""

__all__ = ["local_tile"]


def local_tile(*args, **kwargs):
    raise NotImplementedError("neuronxcc.nki.compiler.backends.neuron.tensor.local_tile is a compiler-internal "
                              "construct that trnsim does not model; allocate tiles with nl.ndarray instead")
