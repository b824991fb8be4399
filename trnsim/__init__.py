"""trnsim: a cycle-approximate simulator of AWS Trainium NeuronCores that runs NKI kernels on a CPU."""

import importlib as _importlib

__version__ = "0.1.0"

__all__ = ["__version__", "NkiValidationError", "Kernel", "install_nki", "uninstall_nki", "jit", "simulate",
           "TARGETS", "Target", "get_target", "profile", "schedule",
           "profile_torch"]

# Every name is imported on first use, so that ``import trnsim.difftest`` (which must run on real hardware and on
# CPU without the simulator) does not pull in the ISA, the machine or the NKI front end.
_LAZY = {
    "NkiValidationError": (".isa.errors", "NkiValidationError"),
    "Kernel": (".kernels", "Kernel"),
    "install_nki": (".kernels", "install_nki"),
    "uninstall_nki": (".kernels", "uninstall_nki"),
    "jit": (".kernels", "jit"),
    "simulate": (".kernels", "simulate"),
    "TARGETS": (".targets", "TARGETS"),
    "Target": (".targets", "Target"),
    "get_target": (".targets", "get_target"),
    "profile": (".profiling", "profile"),          # pulls in the scheduler (and the profiler's exporters on use)
    "schedule": (".machine", "schedule"),
    "profile_torch": (".backend.profiler", "profile_torch"),   # the simulated neuron device's op profiler
}


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(_importlib.import_module(mod, __name__), attr)
    try:        # a subpackage used as an attribute (``trnsim.isa.INSTRUCTIONS`` after ``import trnsim``)
        return _importlib.import_module("." + name, __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module 'trnsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


if _importlib.import_module(".config", __name__).torchneuron_target == "sim":
    __getattr__("install_nki")()
