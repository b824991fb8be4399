"""trnsim's stand-in for the ``neuronxcc`` package: only ``neuronxcc.nki`` (legacy NKI) is provided."""
from . import nki  # noqa: F401
