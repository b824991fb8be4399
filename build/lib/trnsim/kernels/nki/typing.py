"""``nki.typing``: type names used in kernel annotations."""
from ..tensor import NkiTensor

tensor = NkiTensor
Tensor = NkiTensor
__all__ = ["tensor", "Tensor", "NkiTensor"]
