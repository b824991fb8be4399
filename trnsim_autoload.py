"""Entry point of group ``torch.backends``, run at the end of ``import torch``.

Kept outside the ``trnsim`` package so that torch's autoload does not re-enter a half-imported trnsim.  It acts only
under ``TORCHNEURON_TARGET=sim``: then ``import nki`` resolves to trnsim's NKI.
"""

import os


def autoload():
    if os.environ.get("TORCHNEURON_TARGET") != "sim":
        return
    import trnsim
    trnsim.install_nki()
