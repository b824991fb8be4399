"""``neuronxcc.nki.compiler`` as trnsim provides it."""
from trnsim.kernels.v1 import compiler as _m
globals().update({n: getattr(_m, n) for n in dir(_m) if not n.startswith("__")})
