"""trnsim: a cycle-approximate simulator of AWS Trainium NeuronCores that runs NKI kernels on a CPU."""

import os as _os

__version__ = "0.1.0"

from .isa.errors import NkiValidationError  # noqa: E402
from .kernels import Kernel, install_nki, jit, simulate, uninstall_nki  # noqa: E402
from .targets import TARGETS, Target, get_target  # noqa: E402

__all__ = ["__version__", "NkiValidationError", "Kernel", "install_nki", "uninstall_nki", "jit", "simulate",
           "TARGETS", "Target", "get_target", "profile", "schedule",
           "profile_torch"]


def __getattr__(name):
    # imported lazily: profiling pulls in the scheduler (and the profiler's exporters on use)
    if name == "profile":
        from .profiling import profile
        return profile
    if name == "schedule":
        from .machine import schedule
        return schedule
    if name == "profile_torch":   # the simulated neuron PyTorch device's op profiler (needs torch)
        from .backend.profiler import profile_torch
        return profile_torch
    raise AttributeError(f"module 'trnsim' has no attribute {name!r}")

if _os.environ.get("TORCHNEURON_TARGET") == "sim":
    install_nki()
