"""``nl.atomic_rmw`` and ``nisa.dma_copy(dst_rmw_op=)``: the DMA's read-modify-write (``trnsim.isa.dma_copy_rmw``).

The destination is an HBM tensor view, or the indirect rows of ``tensor[indices_tile, ...]`` (``dynamic.py``): row
``p`` of the value goes to row ``indices[p]``, and partitions naming the same row all add into it.
"""

from __future__ import annotations

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...memory import Tensor
from .. import language as _v2
from ..context import current
from .dynamic import IndirectRows
from .tile import PendingMatmul, as_tile, materialize, resolve

__all__ = ["atomic_rmw", "rmw"]


def rmw(dst, value, op, mask, loc, what):
    """``dst = op(dst, value)`` by the DMA engines; ``what`` names the call in errors."""
    core = current().core
    if mask is not None:
        raise NotImplementedError(f"{what} with mask= is not supported by trnsim yet; index the operands")
    if isinstance(dst, IndirectRows):
        dst.check(loc)
        rows, index, shape, dt = dst.rows, dst.index, dst.shape, dst.dtype
    elif isinstance(dst, Tensor):
        d = resolve(materialize(dst, loc), None, loc, what, "dst")
        rows, index, shape, dt = d, None, tuple(d.shape), d.dtype
    else:
        raise NkiValidationError(f"{what}: dst must be a tensor (e.g. hbm_tensor[indices_tile, i_f]), got "
                                 f"{type(dst).__name__}", what, "dst", type(dst).__name__, None, loc)
    if isinstance(value, (Tensor, PendingMatmul)):
        v = resolve(materialize(value, loc), None, loc, what, "value")
    else:                                  # a scalar: a tile of it, set by the Vector Engine first
        v = as_tile(_v2.ndarray(shape, dt.name, buffer="sbuf"))
        _isa.memset(core, loc, v, value)
    _isa.dma_copy_rmw(core, loc, rows, v, op, index=index)


def atomic_rmw(dst, value, op, *, mask=None, **kwargs):
    """``dst = op(dst, value)`` on HBM, atomically per row (only ``np.add``): ``dst`` is usually an HBM tensor
    indexed by a tile of row indices (``t[indices_tile, i_f]``, one index per partition of ``value``); partitions
    naming the same row all add into it."""
    rmw(dst, value, op, mask, caller_location(), "atomic_rmw")
