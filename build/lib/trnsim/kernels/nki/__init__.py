"""trnsim's implementation of the ``nki`` package (NKI v2): ``import nki`` resolves here under
``TORCHNEURON_TARGET=sim`` or after ``trnsim.install_nki()``."""

from ..jit import Kernel, jit, simulate
from . import isa, language, typing

__all__ = ["jit", "simulate", "Kernel", "isa", "language", "typing"]
