"""``nki_cpu_simulator``: the package name AWS's nki-library test harness imports in ``--test-mode simulation``.

It is a thin alias of trnsim's own NKI modules, nothing more: ``nki_cpu_simulator.nki`` *is* ``trnsim.kernels.nki``,
``nki_cpu_simulator.nki.language`` *is* ``trnsim.kernels.nki.language`` and so on (the same module objects), so a
kernel run through the harness runs exactly what ``import nki`` under trnsim runs.  Importing this package also
installs trnsim's ``nki`` / ``neuronxcc.nki`` aliases (``trnsim.install_nki()``): the harness aliases only some
``nki.*`` modules itself, and the kernels import others (``nki.collectives``, ``nki.isa.constants``).
"""

from __future__ import annotations

import sys

from trnsim.kernels import install as _install

_install.install_nki()
for _alias, _target in _install.simulator_aliases(__name__).items():
    sys.modules[_alias] = sys.modules[_target]
nki = sys.modules[__name__ + ".nki"]

__all__ = ["nki"]
