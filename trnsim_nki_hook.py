"""Interpreter start hook: with ``NKI_SIMULATOR=1`` or ``TORCHNEURON_TARGET=sim``, ``import nki`` and
``import neuronxcc`` (and their submodules) resolve to trnsim's NKI in any script, without importing torch or
trnsim first.

``trnsim_nki.pth`` (installed into site-packages beside this module) runs one line at interpreter start: it reads
the two environment variables and, only when one is set, calls :func:`install`, which puts a finder at the front
of ``sys.meta_path``.  Nothing is imported until a script imports ``nki`` or ``neuronxcc``: then the finder
imports trnsim and aliases the modules (``trnsim.install_nki()``).  Unset, the line does nothing else.

Kept outside the ``trnsim`` package (like ``trnsim_autoload``) so that the start hook imports nothing heavy.
"""

import os
import sys

_TOPS = ("nki", "neuronxcc")
_ON = ("1", "true", "on", "yes")     # trnsim.config.TRUE_WORDS (not imported here: the start hook stays light)


def enabled(environ=os.environ) -> bool:
    """Whether the environment asks for the simulator."""
    return (environ.get("NKI_SIMULATOR", "").strip().lower() in _ON
            or environ.get("TORCHNEURON_TARGET") == "sim")


class _Loader:
    """Hands the import system trnsim's module for an aliased name (already in ``sys.modules``)."""

    def __init__(self, module):
        self.module = module
        self.spec = getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        if self.spec is not None:
            module.__spec__ = self.spec       # keep trnsim's own spec on its module


_STANDIN = "trnsim.backend.neuronx_standin"
_XLA = {"torch_xla": "trnsim.backend.xla_standin", "torch_xla.core": "trnsim.backend.xla_standin.core",
        "torch_xla.core.xla_model": "trnsim.backend.xla_standin.core.xla_model"}


def _torch_xla_spec(name):
    """Under ``TORCHNEURON_TARGET=sim``, when torch-xla is not installed: trnsim's stand-in, whose
    ``xla_device()`` is the simulated ``neuron`` device (the NKI tutorials' PyTorch drivers use it)."""
    if os.environ.get("TORCHNEURON_TARGET") != "sim" or name not in _XLA:
        return None
    import importlib
    import importlib.machinery
    import importlib.util
    if name == "torch_xla" and importlib.machinery.PathFinder.find_spec(name) is not None:
        return None                            # the real package: import it
    if name != "torch_xla" and not getattr(sys.modules.get("torch_xla"), "TRNSIM_STANDIN", False):
        return None                            # submodules of a real torch_xla
    mod = importlib.import_module(_XLA[name])
    return importlib.util.spec_from_loader(name, _Loader(mod))


def _torch_neuronx_spec(name):
    """Under ``TORCHNEURON_TARGET=sim``, when no real torch-neuronx is installed: trnsim's stand-in (issue 21)."""
    if os.environ.get("TORCHNEURON_TARGET") != "sim" or name != "torch_neuronx":
        return None
    import importlib
    import importlib.machinery
    import importlib.util
    if importlib.machinery.PathFinder.find_spec(name) is not None:
        return None                            # the real package: import it
    mod = importlib.import_module(_STANDIN)
    return importlib.util.spec_from_loader(name, _Loader(mod))


class NkiFinder:
    """A ``sys.meta_path`` finder for ``nki`` / ``neuronxcc``: on first import it installs trnsim's aliases.
    Under ``TORCHNEURON_TARGET=sim`` it also answers ``torch_neuronx`` and ``torch_xla`` with trnsim's stand-ins
    when the real packages are not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch_neuronx":
            return _torch_neuronx_spec(name)
        if name.partition(".")[0] == "torch_xla":
            return _torch_xla_spec(name)
        if name.partition(".")[0] not in _TOPS:
            return None
        import importlib.util
        import trnsim
        trnsim.install_nki()
        mod = sys.modules.get(name)
        if mod is None:
            return None                        # a submodule trnsim does not provide: the normal error follows
        return importlib.util.spec_from_loader(name, _Loader(mod))


_FINDER = NkiFinder()


def install():
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, NkiFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)
