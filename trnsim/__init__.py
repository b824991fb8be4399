"""trnsim: a cycle-approximate simulator of AWS Trainium NeuronCores that runs NKI kernels on a CPU."""

import os as _os

__version__ = "0.1.0"

from .isa.errors import NkiValidationError  # noqa: E402
from .kernels import Kernel, install_nki, jit, simulate, uninstall_nki  # noqa: E402
from .targets import TARGETS, Target, get_target  # noqa: E402

__all__ = ["__version__", "NkiValidationError", "Kernel", "install_nki", "uninstall_nki", "jit", "simulate",
           "TARGETS", "Target", "get_target"]

if _os.environ.get("TORCHNEURON_TARGET") == "sim":
    install_nki()
