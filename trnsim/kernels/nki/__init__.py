"""trnsim's implementation of the ``nki`` package (NKI v2): ``import nki`` resolves here under
``TORCHNEURON_TARGET=sim`` or after ``trnsim.install_nki()``."""

from ... import config as _config

from ..jit import Kernel, jit, simulate
from . import builtin, dtypes, isa, language, tensor, typing

dtype = dtypes          # ``nki.dtype``: kernels use it in annotations (``dt: nki.dtype = nl.bfloat16``)


def cpu_simulate(kernel):
    """``nki.cpu_simulate(kernel)[lnc](**inputs)``: the entry point of nki-library's simulation harness.  Same as
    :func:`simulate`; the target is the NeuronCore generation ``NKI_NC_VERSION`` names (``gen2`` = trn1, ``gen3`` =
    trn2, ``gen4`` = trn3), else the default target."""
    return simulate(kernel, target=_config.nki_nc_version)


def __getattr__(name):
    # ``nki.compiler`` is imported at its first use: it is the legacy front end's (``kernels/v1``), whose import
    # brings ml_dtypes (about 0.8 s of CPU time, benchmarks/speed-estim11.md), which the library kernels the PyTorch
    # device simulates shape-only never need
    if name == "compiler":
        import importlib
        return importlib.import_module(__name__ + ".compiler")      # (binds it on the package too)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["jit", "simulate", "cpu_simulate", "Kernel", "isa", "language", "typing", "builtin", "compiler",
           "dtype", "tensor"]
