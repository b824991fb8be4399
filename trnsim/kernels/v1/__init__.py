"""The legacy NKI front end (``neuronxcc.nki``, Neuron SDK 2.26 and earlier) over trnsim's one engine."""

# the language module hands its functions to the tiles (tile.bind_language) when imported: import it with the
# package, so that tile operators work whichever v1 module is imported first
from . import language  # noqa: E402,F401
