"""``nki.collectives`` as trnsim provides it (the implementation lives in ``trnsim.kernels.collectives``)."""

from trnsim.kernels.collectives import *  # noqa: F401,F403
from trnsim.kernels.collectives import __all__  # noqa: F401
