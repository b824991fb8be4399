"""Make ``import nki`` (and its submodules) resolve to trnsim's NKI implementation."""

from __future__ import annotations

import importlib
import sys

_ALIASES = {"nki": "trnsim.kernels.nki", "nki.language": "trnsim.kernels.nki.language",
            "nki.isa": "trnsim.kernels.nki.isa", "nki.typing": "trnsim.kernels.nki.typing"}


def install_nki():
    """Alias ``nki``, ``nki.language``, ``nki.isa`` and ``nki.typing`` to trnsim.  Refuses to replace a real
    NKI package that is already imported."""
    existing = sys.modules.get("nki")
    if existing is not None and not getattr(existing, "__name__", "").startswith("trnsim"):
        raise RuntimeError("a real `nki` package is already imported; trnsim will not shadow it")
    for alias, target in _ALIASES.items():
        sys.modules[alias] = importlib.import_module(target)
    nki = sys.modules["nki"]
    for sub in ("language", "isa", "typing"):
        setattr(nki, sub, sys.modules[f"nki.{sub}"])
    return nki


def uninstall_nki():
    for alias in _ALIASES:
        mod = sys.modules.get(alias)
        if mod is not None and mod.__name__.startswith("trnsim"):
            del sys.modules[alias]
