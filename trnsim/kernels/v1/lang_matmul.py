"""``nl.transpose`` and ``nl.matmul``: the Tensor Engine (or, for small tiles, the Vector Engine) transpose and
the matmul that returns a pending PSUM result.

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

from ... import isa as _isa
from ...memory import HBM, PSUM, SBUF
from .lang_alloc import _new
from .lang_operands import _ctx, _operand, _track_masks
from .tile import PendingMatmul, box_empty, mask_box, resolve


# -- matmul and transpose ------------------------------------------------------------------------------
def transpose(x, *, dtype=None, mask=None, **kwargs):
    """``x.T`` of a 2-D tile through the PE array (PSUM result), or the Vector Engine for tiles up to 32x32."""
    core, loc = _ctx()
    x = _operand(x, loc)
    box = mask_box(mask, x.shape, loc, "transpose")
    xr = resolve(x, box, loc, "transpose", "x")
    p = x.shape[0]
    f = x.size // p if p else 0
    on_tensor = not (p <= 32 and f <= 32)
    out = _new((f, p), x.dtype if dtype is None else dtype, PSUM if on_tensor else SBUF, "", loc)
    ob = None if box is None else (box[1], box[0])
    if not box_empty(box):
        _isa.nc_transpose(core, loc, resolve(out, ob, loc, "transpose", "dst"), xr)
    return out


def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """``x @ y`` on the Tensor Engine into PSUM; with ``transpose_x`` x is given as [K, M] already."""
    core, loc = _ctx()
    x = _operand(x, loc, (HBM, PSUM))
    y = _operand(y, loc, (HBM, PSUM))
    if mask is not None:
        raise NotImplementedError("nl.matmul with mask= is not supported by trnsim yet; index the operands")
    x = resolve(x, None, loc, "matmul", "x")
    y = resolve(y, None, loc, "matmul", "y")
    if not transpose_x:
        xt = transpose(x)
        xs = _new(xt.shape, x.dtype, SBUF, "", loc)
        _isa.tensor_copy(core, loc, xs, xt)
        x = xs
    return PendingMatmul(x, y, {}, loc, (x.shape[1], y.size // y.shape[0]))


_track_masks(globals())
