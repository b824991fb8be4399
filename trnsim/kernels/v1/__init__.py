"""The legacy NKI front end (``neuronxcc.nki``, Neuron SDK 2.26 and earlier) over trnsim's one engine."""

# the language module hands its functions to the tiles (tile.bind_language) when imported: import it with the
# package, so that tile operators work whichever v1 module is imported first
from . import language  # noqa: E402,F401
from . import reductions as _reductions  # noqa: E402

# nl.loop_reduce / nl.all_reduce build on the language module (reductions -> language): they join its namespace here
language.loop_reduce = _reductions.loop_reduce
language.all_reduce = _reductions.all_reduce
