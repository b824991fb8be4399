"""Stand-in for ``neuronxcc.starfish.support.dtype``, a module of AWS's Neuron compiler package (not public): the
MX-quantisation tests of nki-library's ``test_qkv_cte.py`` import its ``static_cast`` to make their inputs on the
host (fp8 arrays packed four to an element, and back).  It is the same host cast as the Neuron dtype package's
``static_cast``, so this module re-exports that one: the installed ``neuron_dtypes`` if there is one, else the
stand-in in ``standins/neuron_dtypes``.  Nothing here is part of trnsim."""

from neuron_dtypes import static_cast

__all__ = ["static_cast"]
