"""``neuronxcc.nki.compiler.backends.neuron.indexing``: ``TileIndex``, the type of a tile index expression.

Kernels use it in type annotations (``Union[int, TileIndex]``); in trnsim an index expression built from
``nl.arange``/``nl.mgrid``/loop indices is a :class:`trnsim.kernels.v1.index.IndexExpr`.
"""
from trnsim.kernels.v1.index import IndexExpr as TileIndex  # noqa: F401

__all__ = ["TileIndex"]
