"""``neuronxcc.nki.language`` (legacy NKI): NumPy dtypes, index expressions, masks, and math that returns tiles.

Every function issues the same ``trnsim.isa`` instructions the v2 front end issues for the same computation;
only the calling convention differs (a new tile is allocated and returned, ``mask=`` restricts the region).

The functions live in modules beside this one, by what they are, and this module re-exports every name:
``lang_dtypes`` (dtypes, limits, promotion), ``lang_alloc`` (buffers, allocation, ``shared_constant``),
``lang_operands`` (operand staging and the binary-op issue rule the others share), ``lang_elementwise``
(math and comparisons, ``copy``), ``lang_reduce`` (``sum`` & co., ``softmax``, ``rms_norm``), ``lang_matmul``
(``transpose``, ``matmul``) and ``lang_dma`` (``load``, ``store``).  Loops, launch and the few remaining helpers
stay here.
"""

from __future__ import annotations

# (some of these names are used only by the parts now; they stay, as names this module has always had)
import builtins
import os
import sys

import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 names with NumPy)
import numpy as np

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...machine.capacity import modulo_placement
from ...memory import HBM, PSUM, SBUF, DynSlice, Tensor, ViewError, dtype_of
from .. import language as _v2
from ..context import current
from .host import _host_cast, _in_kernel
from .index import arange, mgrid  # noqa: F401  (nl.arange, nl.mgrid)
from .atomic import atomic_rmw  # noqa: F401  (nl.atomic_rmw)
from .dynamic import IndirectRows
from .loops import LoopIndex, _range  # noqa: F401  (nl.affine_range & co. yield LoopIndex values)
from .refused import gemm_grid, gemm_stationary_grid  # noqa: F401  (names with no runnable meaning)
from .tile import (PendingMatmul, Tile, as_tile, bind_language, box_empty, mask_box, materialize, partition_views,
                   resolve, track_mask)

# the parts (see the module docstring); every name they define is a name of this module, as before the split
from .lang_dtypes import (bool_, int8, int16, int32, uint8, uint16, uint32, float16, float32, bfloat16,  # noqa: F401
                          float8_e4m3, float8_e5m2, tfloat32, float8_e4m3fn, float8_e8m0fnu, float8_e4m3fn_x4,
                          float8_e5m2_x4, float4_e2m1fn_x4, fp32, bfp16, finfo, _promote, _scalar_dtype)
from .lang_alloc import (sbuf, psum, hbm, shared_hbm, private_hbm, tile_size, _kind, par_dim, nc,  # noqa: F401
                         spmd_dim, _new, _block_tensor, _traced_once, _TRNSIM_DIR, _direct_placement, ndarray,
                         _filled, zeros, ones, full, _like, zeros_like, empty_like, shared_constant,
                         shared_identity_matrix, ds)
from .lang_operands import (_ctx, _operand, replicate_partitions, _partition_broadcast, _is_tile,  # noqa: F401
                            _binary_into, _integer_op, _is_col, _shape_of, _tile_broadcast_shape, _track_masks)
from . import lang_elementwise as _elementwise
from .lang_elementwise import (_mk_binary, _mk_unary, _BINARY, _COMPARE, _UNARY, invert,  # noqa: F401
                               logical_not, copy, static_cast)
from .lang_reduce import (_reduce_shape, _reduce_box, _reduce, sum, max, min, prod, mean, all, var,  # noqa: F401
                          softmax, rms_norm, gather_flattened)
from .lang_matmul import transpose, matmul  # noqa: F401
from .lang_dma import (_space_error, load, _load_rows, _store_rows, store, load_transpose2d)  # noqa: F401

for _n in _BINARY + _COMPARE + _UNARY:          # nl.add, nl.less, nl.exp & co. (made from tables in the part)
    globals()[_n] = getattr(_elementwise, _n)
del _n, _elementwise


# -- loops and launch -----------------------------------------------------------------------------------
affine_range = _range
sequential_range = _range
static_range = _range
program_ndim = _v2.program_ndim


class ProgramId(int):
    """``nl.program_id(axis)``: the program's index along ``axis`` (an int), remembering the axis, so that
    ``nl.all_reduce(..., program_axes=[nl.program_id(0)])`` names axis 0 as kernels written that way mean."""

    def __new__(cls, value, axis):
        v = super().__new__(cls, int(value))
        v.axis = int(axis)
        return v


def program_id(axis=0):
    return ProgramId(_v2.program_id(axis), axis)


def num_programs(axes=None):
    ctx = current()
    if axes is None:
        n = 1
        for g in ctx.grid:
            n *= g
        return n
    return _v2.num_programs(axes)


# -- misc -----------------------------------------------------------------------------------------------
def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    core, loc = _ctx()
    x = _operand(x, loc)
    if mask is not None:
        raise NotImplementedError("nl.where with mask= is not supported by trnsim yet")
    out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    if _is_tile(y):
        _isa.tensor_copy(core, loc, out, resolve(y, None, loc, "where", "y"))
    else:
        _isa.memset(core, loc, out, y)
    _isa.tensor_copy_predicated(core, loc, out, resolve(x, None, loc, "where", "x"),
                                resolve(condition, None, loc, "where", "condition"))
    return out


def expand_dims(data, axis):
    return data.expand_dim(axis)


def broadcast_to(src, *, shape, **kwargs):
    return src.broadcast_to(shape)


def device_print(prefix, x, *, mask=None, **kwargs):
    core = current().core
    if core.execute:
        print(prefix, materialize(x, caller_location()).np)


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """``x`` with elements zeroed with probability ``rate``: the v2 ``nl.dropout``."""
    loc = caller_location()
    if mask is not None:
        raise NotImplementedError("nl.dropout with mask= is not supported by trnsim yet; index the operands")
    rate = _operand(rate, loc) if isinstance(rate, (Tensor, Tile)) else rate
    return _v2.dropout(_operand(x, loc), rate, dtype=dtype)


def random_seed(seed, *, mask=None, **kwargs):
    """Seed the Vector Engine's generator from a [1, 1] 32-bit tile or an int: the v2 ``nl.random_seed``."""
    loc = caller_location()
    if mask is not None:
        raise NotImplementedError("nl.random_seed with mask= is not supported by trnsim yet")
    _v2.random_seed(_operand(seed, loc) if isinstance(seed, (Tensor, Tile)) else seed)


def rand(shape, dtype=np.float32, **kwargs):
    """Uniform [0, 1) values in a new SBUF tile: the v2 ``nl.rand``."""
    return _v2.rand(tuple(shape), dtype)


# nl.loop_reduce and nl.all_reduce live in reductions.py, which builds on this module; the package (__init__) adds
# them to this namespace, so the dependency runs one way, reductions -> language.


bind_language(sys.modules[__name__])     # the tile operators issue this module's functions


_track_masks(globals())
