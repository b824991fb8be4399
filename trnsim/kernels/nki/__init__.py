"""trnsim's implementation of the ``nki`` package (NKI v2): ``import nki`` resolves here under
``TORCHNEURON_TARGET=sim`` or after ``trnsim.install_nki()``."""

from ... import config as _config

from ..jit import Kernel, jit, simulate
from . import builtin, compiler, dtypes, isa, language, tensor, typing

dtype = dtypes          # ``nki.dtype``: kernels use it in annotations (``dt: nki.dtype = nl.bfloat16``)


def cpu_simulate(kernel):
    """``nki.cpu_simulate(kernel)[lnc](**inputs)``: the entry point of nki-library's simulation harness.  Same as
    :func:`simulate`; the target is the NeuronCore generation ``NKI_NC_VERSION`` names (``gen2`` = trn1, ``gen3`` =
    trn2, ``gen4`` = trn3), else the default target."""
    return simulate(kernel, target=_config.nki_nc_version)


__all__ = ["jit", "simulate", "cpu_simulate", "Kernel", "isa", "language", "typing", "builtin", "compiler",
           "dtype", "tensor"]
