"""Make ``import nki`` (NKI v2) and ``import neuronxcc.nki`` (legacy NKI) resolve to trnsim's implementations."""

from __future__ import annotations

import importlib
import sys

_ALIASES = {"nki": "trnsim.kernels.nki", "nki.language": "trnsim.kernels.nki.language",
            "nki.isa": "trnsim.kernels.nki.isa", "nki.typing": "trnsim.kernels.nki.typing",
            "nki.collectives": "trnsim.kernels.nki.collectives", "nki.isa.constants": "trnsim.kernels.nki.isa_constants",
            "nki.builtin": "trnsim.kernels.nki.builtin", "nki.compiler": "trnsim.kernels.nki.compiler",
            "nki.compiler.frontend": "trnsim.kernels.nki.frontend",
            "nki.language.dtypes": "trnsim.kernels.nki.dtypes", "nki.tensor": "trnsim.kernels.nki.tensor",
            "neuronxcc": "trnsim.kernels.neuronxcc", "neuronxcc.nki": "trnsim.kernels.neuronxcc.nki",
            "neuronxcc.nki.language": "trnsim.kernels.neuronxcc.nki.language",
            "neuronxcc.nki.isa": "trnsim.kernels.neuronxcc.nki.isa",
            "neuronxcc.nki.typing": "trnsim.kernels.neuronxcc.nki.typing",
            "neuronxcc.nki.compiler": "trnsim.kernels.neuronxcc.nki.compiler"}
_SUBMODULES = {"nki": ("language", "isa", "typing"), "neuronxcc.nki": ("language", "isa", "typing", "compiler")}
_SUBMODULES.update({"nki": _SUBMODULES["nki"] + ("collectives",), "nki.isa": ("constants",)})  # issue 16
_SUBMODULES.update({"nki": _SUBMODULES["nki"] + ("builtin", "compiler", "tensor"),            # issue 13
                    "nki.language": ("dtypes",)})
_SUBMODULES.update({"nki.compiler": ("frontend",)})       # nki-library's trace-only tests (issue 31)


def _is_real(name):
    mod = sys.modules.get(name)
    return mod is not None and not getattr(mod, "__name__", "").startswith("trnsim")


def install_nki():
    """Alias ``nki`` and ``neuronxcc.nki`` (with their ``language``, ``isa``, ``typing`` and, for legacy NKI,
    ``compiler`` submodules) to trnsim.  Refuses to replace a real NKI or neuronxcc package already imported."""
    for top in ("nki", "neuronxcc"):
        if _is_real(top):
            raise RuntimeError(f"a real `{top}` package is already imported; trnsim will not shadow it")
    for alias, target in _ALIASES.items():
        sys.modules[alias] = importlib.import_module(target)
    for parent, subs in _SUBMODULES.items():
        for sub in subs:
            setattr(sys.modules[parent], sub, sys.modules[f"{parent}.{sub}"])
    sys.modules["neuronxcc"].nki = sys.modules["neuronxcc.nki"]
    return sys.modules["nki"]


def simulator_aliases(package="nki_cpu_simulator"):
    """Module names under ``package`` (``nki_cpu_simulator``) mapped to the ``nki.*`` aliases they stand for: the
    ``nki_cpu_simulator`` package is this table applied to ``sys.modules`` after :func:`install_nki`."""
    return {f"{package}.{alias}": alias for alias in _ALIASES if alias == "nki" or alias.startswith("nki.")}


def uninstall_nki():
    for alias in _ALIASES:
        mod = sys.modules.get(alias)
        if mod is not None and mod.__name__.startswith("trnsim"):
            del sys.modules[alias]
