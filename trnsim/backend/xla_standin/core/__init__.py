"""``torch_xla.core`` of trnsim's torch_xla stand-in: only :mod:`.xla_model`."""
from . import xla_model  # noqa: F401
