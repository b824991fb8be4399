"""``NkiTensor``: trnsim's tensor view as NKI kernels see it."""

from __future__ import annotations

from .. import isa as _isa
from ..isa.errors import caller_location
from ..memory import Tensor
from .context import current

__all__ = ["NkiTensor"]


class NkiTensor(Tensor):
    """An NKI tensor: a view of a buffer in HBM, SBUF or PSUM (see :class:`trnsim.memory.Tensor`)."""

    __slots__ = ()

    @property
    def base_tensor(self):
        """The tensor as allocated: the whole buffer this view reads, in the dtype it was allocated with.

        No NKI reference page documents this attribute, but the kernels AWS ships use it (nki-library d2ad3a5,
        ``moe_tkg`` and ``mlp_tkg`` MX projections: ``w.base_tensor`` of an MX-x4 kernel argument is DMAed into
        an SBUF tile of ``base_tensor.dtype``, which is then ``.view(w.dtype)``).  trnsim reads it as NumPy's
        ``ndarray.base``: for a kernel argument or any whole allocation it is the same tensor; for a slice or a
        dtype view (``view``/``reinterpret_cast``) it is the allocation the view was taken from."""
        return type(self).whole(self.buf)

    def __setitem__(self, key, value):
        dst = self[key]
        loc = caller_location()
        core = current().core
        if isinstance(value, Tensor):
            if dst.on_chip and value.on_chip:
                _isa.tensor_copy(core, loc, dst, value)
            else:
                _isa.dma_copy(core, loc, dst, value)
        else:
            _isa.memset(core, loc, dst, value)
