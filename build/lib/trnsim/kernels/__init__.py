"""NKI front ends: run NKI kernels on the simulated machine."""

from .jit import Kernel, SimulationResult, jit, run_kernel, simulate
from .install import install_nki, uninstall_nki

__all__ = ["Kernel", "SimulationResult", "jit", "run_kernel", "simulate", "install_nki", "uninstall_nki"]
