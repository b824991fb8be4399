"""``nki.tensor``: the tensor class NKI v2 kernels receive and create (trnsim's :class:`NkiTensor`)."""

from ..tensor import NkiTensor

tensor = NkiTensor
Tensor = NkiTensor
__all__ = ["tensor", "Tensor", "NkiTensor"]
