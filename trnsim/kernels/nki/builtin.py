"""``nki.builtin``: the namespace NKI's tracer exposes to kernels as ``builtins.builtin``; under trnsim it holds the
same ``language`` and ``isa`` modules as ``nki`` (kernels run as plain Python, nothing is traced)."""

from . import isa, language

__all__ = ["isa", "language"]
