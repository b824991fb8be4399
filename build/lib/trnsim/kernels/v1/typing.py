"""``neuronxcc.nki.typing``: names used in kernel annotations (``tensor``; ``mutable_tensor`` marks an argument
the kernel writes in place, which trnsim copies back to the caller's array)."""
from .tile import Tile


class _Annotation:
    """An annotation that also takes a shape (``tensor[128, 512]``) and means the same."""

    def __init__(self, name):
        self.__name__ = name

    def __getitem__(self, shape):
        return self

    def __repr__(self):
        return f"nki.typing.{self.__name__}"


tensor = Tile
mutable_tensor = _Annotation("mutable_tensor")
__all__ = ["tensor", "mutable_tensor"]
