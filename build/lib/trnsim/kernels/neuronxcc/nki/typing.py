"""``neuronxcc.nki.typing`` as trnsim provides it."""
from ...v1 import typing as _m
globals().update({n: getattr(_m, n) for n in dir(_m) if not n.startswith("__")})
