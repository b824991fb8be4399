"""``nki.compiler.frontend``: tracing a kernel without running it on a device.

nki-library's harness has a trace-only mode (``@pytest.mark.trace_only`` tests, e.g. its ``TensorView`` tests): it
calls ``ParserFrontend().compile(kernel, inputs=..., target=..., lnc=...)`` and the test passes when the kernel
traces, or expects the trace to fail with a given message.  A trace runs the kernel's Python with the inputs'
shapes and dtypes, so every check the kernel makes at trace time (its own asserts on shapes and strides, NKI's
rules on tiles and instructions) fires, and no value is computed.

trnsim's frontend is that: the kernel launched shape-only on the simulator (``execute=False``), on the target and
logical-core count asked for.  It does not lower to MLIR or a NEFF: the result names the launch, and reading its
``module`` (the MLIR module a real frontend returns) says so instead of returning something that is not one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...targets import get_target
from ..jit import Kernel, run_kernel

__all__ = ["NKIFrontend", "ParserFrontend", "TracerFrontend", "TraceResult"]


@dataclass
class TraceResult:
    """What :meth:`NKIFrontend.compile` traced: the kernel, its target and logical-core count, and the instructions
    the shape-only launch issued (per program)."""
    kernel_name: str
    target: str
    lnc: int
    instructions: int
    output_names: list = field(default_factory=list)

    @property
    def module(self):
        raise NotImplementedError(
            f"trnsim traced {self.kernel_name!r} by running it shape-only on the simulator; it builds no MLIR "
            "module (there is no NKI compiler in trnsim): turn the harness's kernel debugging off, or run the "
            "kernel with nki.simulate to see what it does")


class NKIFrontend:
    """A kernel frontend: :meth:`compile` traces ``kernel`` with ``inputs`` (NumPy arrays for tensors, plain Python
    values for the other parameters) for ``target`` on ``lnc`` logical NeuronCores, and raises what the kernel or
    NKI's rules raise."""

    def compile(self, kernel, *, inputs=None, target=None, lnc=1, artifacts_dir=None, dump_python_ast=False,
                output_names=None):
        fn = kernel.fn if isinstance(kernel, Kernel) else kernel
        if not callable(fn):
            raise TypeError(f"nki.compiler.frontend: the kernel to trace must be a function or an nki.jit kernel, "
                            f"got {type(kernel).__name__}")
        lnc = 1 if lnc is None else int(lnc)
        if lnc < 1:
            raise ValueError(f"nki.compiler.frontend: lnc must be >= 1, got {lnc}")
        tg = get_target(target)
        res = run_kernel(fn, (), dict(inputs or {}), grid=(lnc,), target=tg, execute=False)
        n = len(res.cores[0].instructions) if res.cores else 0
        return TraceResult(getattr(fn, "__name__", repr(fn)), tg.name, lnc, n, list(output_names or []))


class ParserFrontend(NKIFrontend):
    """The frontend nki-library's harness uses (``trace_kernel``'s default)."""


class TracerFrontend(NKIFrontend):
    """The other frontend the harness names; in trnsim both trace the same way."""
