"""``neuronxcc.nki`` as trnsim provides it (legacy NKI, SDK 2.26 and earlier): ``import neuronxcc.nki as nki``
resolves here under ``TORCHNEURON_TARGET=sim`` or after ``trnsim.install_nki()``."""
from ...v1.kernel import V1Kernel, baremetal, benchmark, jit, profile, simulate_kernel, trace
from ...v1.tile import Tile as tensor
from . import compiler, isa, language, typing


class FrameworkKernel:
    """Base class the SDK's framework integrations derive from; trnsim runs kernels directly instead."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("nki.FrameworkKernel (framework-specific kernel launchers) is not provided by "
                                  "trnsim; call the kernel with NumPy arrays or torch CPU tensors")


__all__ = ["jit", "trace", "baremetal", "benchmark", "profile", "simulate_kernel", "tensor", "FrameworkKernel", "V1Kernel",
           "language", "isa", "typing", "compiler"]
