"""``neuronxcc.nki.typing``: names used in kernel annotations."""
from .tile import Tile

tensor = Tile
__all__ = ["tensor"]
