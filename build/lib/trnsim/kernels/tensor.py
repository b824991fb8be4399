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
