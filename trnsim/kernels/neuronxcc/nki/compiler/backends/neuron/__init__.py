"""``neuronxcc.nki.compiler.backends.neuron``: only the names public NKI kernels import (``tensor``, ``indexing``)."""
