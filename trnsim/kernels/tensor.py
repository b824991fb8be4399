"""``NkiTensor``: trnsim's tensor view as NKI kernels see it."""

from __future__ import annotations

from ..memory import Tensor

__all__ = ["NkiTensor"]


class NkiTensor(Tensor):
    """An NKI tensor: a view of a buffer in HBM, SBUF or PSUM (see :class:`trnsim.memory.Tensor`)."""

    __slots__ = ()

    def __setitem__(self, key, value):
        from . import isa_api
        from ..isa.errors import caller_location
        dst = self[key]
        loc = caller_location()
        from .context import current
        core = current().core
        from .. import isa as _isa
        if isinstance(value, Tensor):
            if dst.on_chip and value.on_chip:
                _isa.tensor_copy(core, loc, dst, value)
            else:
                _isa.dma_copy(core, loc, dst, value)
        else:
            _isa.memset(core, loc, dst, value)
