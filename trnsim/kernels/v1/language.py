"""``neuronxcc.nki.language`` (legacy NKI): NumPy dtypes, index expressions, masks, and math that returns tiles.

Every function issues the same ``trnsim.isa`` instructions the v2 front end issues for the same computation;
only the calling convention differs (a new tile is allocated and returned, ``mask=`` restricts the region).
"""

from __future__ import annotations

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

# -- dtypes (NumPy, as in legacy NKI) ------------------------------------------------------------------
bool_ = np.bool_
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
float16, float32 = np.float16, np.float32
bfloat16 = np.dtype("bfloat16")
float8_e4m3 = np.dtype("float8_e4m3")
float8_e5m2 = np.dtype("float8_e5m2")
tfloat32 = np.dtype("|V4")          # legacy NKI spells tfloat32 as a 4-byte void dtype
float8_e4m3fn = np.dtype("float8_e4m3fn")
float8_e8m0fnu = np.dtype("float8_e8m0fnu")
# the packed MX formats have no NumPy dtype of their own (their bits are a uint32/uint16): named by string
float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4 = "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"


class fp32:
    """Limits of float32 as NKI names them (``nl.fp32.min``)."""
    min = float(np.finfo(np.float32).min)


class bfp16:
    min = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)


def finfo(dtype):
    dt = dtype_of(dtype)
    return ml_dtypes.finfo(dt.np) if dt.name not in ("float32", "tfloat32") else np.finfo(np.float32)


# -- buffers --------------------------------------------------------------------------------------------
sbuf = _v2.sbuf
psum = _v2.psum
hbm = _v2.hbm
shared_hbm = _v2.shared_hbm
private_hbm = _v2.private_hbm
tile_size = _v2.tile_size


def _kind(buffer):
    """The memory an allocation goes to; ``ncc.sbuf.mod_alloc(...)``-style allocators count as their memory."""
    if buffer is None:
        return SBUF
    k = getattr(buffer, "_trnsim_kind", None)
    if k is not None:
        return k
    return _v2._kind(buffer)


class par_dim(int):
    """``nl.par_dim(n)``: marks the partition dimension of a tile shape."""

    def __new__(cls, n):
        return super().__new__(cls, int(n))

    def __repr__(self):
        return f"par_dim({int(self)})"


class nc(int):
    """``nl.nc(n)``: n logical NeuronCores of an SPMD launch dimension."""

    def __new__(cls, n):
        return super().__new__(cls, int(n))


class spmd_dim:
    """``nl.spmd_dim(*dims)``: one launch-grid dimension made of several factors (their product)."""

    def __init__(self, *dims):
        self.dims = tuple(int(d) for d in dims)

    def __index__(self):
        n = 1
        for d in self.dims:
            n *= d
        return n

    __int__ = __index__


# -- allocation -----------------------------------------------------------------------------------------
def _new(shape, dtype, buffer, name, loc=None):
    """A new tile; ``shape`` may carry one ``par_dim`` (the partition dimension, possibly not first)."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(shape)
    kind = _kind(buffer)
    pd = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    if len(pd) > 1:
        raise NkiValidationError(f"ndarray: shape {list(shape)} has {len(pd)} par_dim entries; at most one",
                                 "ndarray", "shape", shape, 1, loc or caller_location())
    if pd and kind == HBM:
        pd = []
    order = None
    if pd and pd[0] != 0:
        p = pd[0]
        order = (p,) + tuple(i for i in range(len(shape)) if i != p)
        alloc_shape = tuple(int(shape[i]) for i in order)
    else:
        alloc_shape = tuple(int(s) for s in shape)
    placement = _direct_placement(buffer, kind, loc)
    if placement is not None:
        placement = _traced_once(placement)
    if kind != HBM and (order is not None or placement is not None):
        t = _block_tensor(alloc_shape, dtype, kind, name, pd[0] if order is not None else 0, placement, loc)
        if order is not None:
            t = t.permute([order.index(i) for i in range(len(shape))])
        return t
    buf_name = {SBUF: "sbuf", PSUM: "psum", HBM: "shared_hbm"}[kind]
    if kind == HBM and str(getattr(buffer, "value", buffer)) == "private_hbm":
        buf_name = "private_hbm"
    t = as_tile(_v2.ndarray(alloc_shape, dtype_of(dtype).name, buffer=buf_name, name=name))
    if order is not None:
        inv = [order.index(i) for i in range(len(shape))]
        t = t.permute(inv)
    return t


def _block_tensor(alloc_shape, dtype, kind, name, nblock, placement, loc):
    """An on-chip tensor with ``nblock`` block dimensions (``[B..., par_dim(P), F...]`` laid out ``[P, B..., F...]``)
    or an explicit placement: each block is a tile of its own, with its own live range, as the compiler allocates
    it (the block dimension is logical, "does not reflect the number of physical tiles being allocated":
    nki.compiler.psum.alloc / sbuf.alloc reference, Neuron SDK 2.2x); so only the bytes the live blocks hold, or the
    physical tiles a direct allocation names, count against SBUF/PSUM (machine/capacity.py)."""
    core = current().core
    pmax = core.target.pmax
    if alloc_shape[0] > pmax:
        raise NkiValidationError(
            f"ndarray: number of partitions {alloc_shape[0]} exceed architecture limitation of {pmax} for "
            f"{kind.upper()} tensor `{name}`", "ndarray", "shape", alloc_shape[0], pmax, loc or caller_location())
    bshape = tuple(alloc_shape[1:1 + nblock])
    block = 1
    for f in alloc_shape[1 + nblock:]:
        block *= int(f)
    try:
        buf = core.allocate(alloc_shape, dtype_of(dtype), kind, name, address=placement,
                            block=block if nblock else 0, block_shape=bshape or None)
    except MemoryError as e:
        raise NkiValidationError(f"ndarray: {e}", "ndarray", "shape", alloc_shape, None,
                                 loc or caller_location()) from None
    return as_tile(Tile.whole(buf))


def _traced_once(placement):
    """The placement of the declaration at this call site as the first time it ran.  neuronx-cc traces a loop body
    (``nl.affine_range`` & co.) once, so a direct allocation declared in it gets the addresses its Python
    arguments had in that one trace, and every iteration reuses them (the kernel's own loop-carried bookkeeping, e.g.
    ``cur_addr += ...`` after each declaration, runs once); trnsim runs the body once per iteration, so it keys the
    placement on the call site (every kernel-source frame on the stack) and keeps the first one."""
    ctx = current()
    sites = getattr(ctx, "_v1_direct_sites", None)
    if sites is None:
        sites = ctx._v1_direct_sites = {}
    f = sys._getframe(2)
    key = []
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_TRNSIM_DIR):
            key.append((fn, f.f_lineno))
        f = f.f_back
    return sites.setdefault(tuple(key), placement)


_TRNSIM_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep   # trnsim/


def _direct_placement(buffer, kind, loc):
    """The placement a direct allocation (``ncc.sbuf.mod_alloc`` / ``alloc``, ``ncc.psum.mod_alloc`` / ``alloc``)
    gives, as ``machine.capacity`` takes it: a callable (block index, partitions, bytes per partition) ->
    (start partition, byte address); None for automatic allocation.  PSUM addresses are bank-relative in the API
    (``(bank_id, start_partition, byte_addr)``, a physical tile within one 2 KiB bank: nki.compiler.psum.alloc
    reference) and become ``bank * bank bytes + byte_addr`` here."""
    how = getattr(buffer, "how", None)
    if how not in ("mod_alloc", "alloc") or kind == HBM:
        return None
    prm = buffer.params
    bank = current().core.target.psum_bank_bytes if kind == PSUM else 0
    if how == "alloc":
        func = prm.get("func")
        if func is None:
            return None
        # called with the parameter names the API documents (kernels pass functools.partial objects whose
        # leading parameters are bound by keyword)
        if kind == SBUF:
            return lambda idx, parts, size: tuple(int(v) for v in func(idx=idx, pdim_size=parts, fdim_size=size))

        def psum_place(idx, parts, size):
            b, p0, addr = (int(v) for v in func(idx=idx, pdim_size=parts, fdim_size=size))
            return p0, b * bank + addr
        return psum_place
    if kind == SBUF:
        if prm.get("base_addr") is None:
            raise NkiValidationError("ncc.sbuf.mod_alloc: base_addr is required (the byte address of the first "
                                     "physical tile)", "mod_alloc", "base_addr", None, None,
                                     loc or caller_location())
        return modulo_placement(prm["base_addr"], prm.get("base_partition", 0), prm.get("num_par_tiles", ()),
                                prm.get("num_free_tiles", ()))
    inner = modulo_placement(prm.get("base_addr", 0) or 0, prm.get("base_partition", 0), prm.get("num_par_tiles", ()),
                             prm.get("num_free_tiles", ()))
    banks = modulo_placement(0, 0, (), prm.get("num_bank_tiles", ()))
    base_bank = int(prm.get("base_bank", 0) or 0)

    def psum_mod(idx, parts, size):
        p0, addr = inner(idx, parts, size)
        _, b = banks(idx, 0, 1)                 # the bank index: idx modulo num_bank_tiles, linearised
        return p0, (base_bank + b) * bank + addr
    return psum_mod


def ndarray(shape, dtype, *, buffer=None, name="", **kwargs):
    return _new(shape, dtype, buffer, name)


def _filled(shape, value, dtype, buffer, name):
    t = _new(shape, dtype, buffer, name)
    core = current().core
    if t.on_chip:
        loc = caller_location()
        for v in partition_views(t):          # a block tensor is filled one tile at a time
            _isa.memset(core, loc, v, value)
    elif core.execute:
        t.np[...] = value
        t.buf.all_written = True
    return t


def zeros(shape, dtype, *, buffer=None, name="", **kwargs):
    return _filled(shape, 0, dtype, buffer, name)


def ones(shape, dtype, *, buffer=None, name="", **kwargs):
    return _filled(shape, 1, dtype, buffer, name)


def full(shape, fill_value, dtype, *, buffer=None, name="", **kwargs):
    return _filled(shape, fill_value, dtype, buffer, name)


def _like(a, dtype, buffer):
    a = materialize(a, caller_location())
    return a.shape, (a.dtype if dtype is None else dtype), (a.buf.kind if buffer is None else buffer)


def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    s, d, b = _like(a, dtype, buffer)
    return _filled(s, 0, d, b, name)


def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    s, d, b = _like(a, dtype, buffer)
    return _new(s, d, b, name)


def shared_constant(constant, dtype=None, **kwargs):
    """An HBM tensor holding ``constant`` (a NumPy array known when the kernel is traced)."""
    arr = np.asarray(constant)
    dt = dtype_of(dtype if dtype is not None else arr.dtype)
    core = current().core
    buf = core.wrap_input(arr.astype(dt.storage) if core.execute else None, arr.shape, dt, name="shared_constant")
    from ...isa.common import write
    t = as_tile(Tile.whole(buf))
    if core.execute:
        write(core, t, arr.astype(np.float32) if dt.is_float else arr)
    return t


def shared_identity_matrix(n, dtype=np.uint8, **kwargs):
    return shared_constant(np.eye(int(n)), dtype=dtype)


def ds(start, size):
    return DynSlice(start, size)


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


# -- dtype promotion -----------------------------------------------------------------------------------
def _promote(a, b):
    """Result dtype of a binary op on tiles of dtypes ``a`` and ``b`` (NKI's promotion rules)."""
    a, b = dtype_of(a), dtype_of(b)
    if a == b:
        return a
    if a.is_float and b.is_float:
        if a.itemsize != b.itemsize:
            return a if a.itemsize > b.itemsize else b
        return dtype_of("float32")
    if a.is_float or b.is_float:
        return a if a.is_float else b
    if a.is_bool or b.is_bool:
        return b if a.is_bool else a
    signed = a.np.kind == "i" or b.np.kind == "i"
    size = builtins.max(a.itemsize, b.itemsize)
    if a.np.kind != b.np.kind:
        # signed with unsigned: the signed type wide enough for both
        u = a if a.np.kind == "u" else b
        s = b if u is a else a
        size = s.itemsize if s.itemsize > u.itemsize else builtins.min(4, 2 * u.itemsize)
    return dtype_of(np.dtype(f"{'i' if signed else 'u'}{size}"))


def _scalar_dtype(t_dtype, s):
    dt = dtype_of(t_dtype)
    if isinstance(s, float) and not dt.is_float:
        return dtype_of("float32")
    return dt


# -- operand handling -----------------------------------------------------------------------------------
def _ctx():
    return current().core, caller_location()


def _operand(x, loc, staging=(HBM,)):
    """A language op's tile operand: a pending matmul is issued; a tensor in one of ``staging`` (HBM for the
    elementwise ops: NKI's language ops accept host arrays and the compiler loads them) is first copied into a new
    SBUF tile of the same shape, as compiled code would."""
    x = materialize(x, loc)
    if not isinstance(x, Tensor) or not x.shape:
        return x
    if x.buf.kind in staging:
        v = resolve(x, None, loc, "load", "x")
        t = _new(v.shape, v.dtype, SBUF, "", loc)
        if v.buf.kind == HBM:
            _isa.dma_copy(current().core, loc, t, v)
        else:
            _isa.tensor_copy(current().core, loc, t, v)
        return t
    return replicate_partitions(x, loc)


def replicate_partitions(x, loc):
    """``x`` itself, or, when ``x`` is an on-chip view repeating a partition (``broadcast_to`` of a one-partition tile,
    an index ``i_p * 0``), a new SBUF tile holding the replicated rows.  Engines read consecutive partitions only (NKI
    access patterns: a start partition and a count), and ``nl.broadcast_to`` returns "a new tile broadcast along the
    partition dimension ... in SBUF" (NKI API reference, nki.language.broadcast_to): trnsim replicates it with a DMA,
    whose cost the timeline shows."""
    if isinstance(x, Tensor) and x.shape and x.on_chip and _partition_broadcast(x):
        v = resolve(x, None, loc, "broadcast", "x")
        t = _new(v.shape, v.dtype, SBUF, "", loc)
        _isa.dma_copy(current().core, loc, t, v)
        return t
    return x


def _partition_broadcast(t):
    info = t.partition_info()
    return info is not None and info[1] > 1 and info[2] == 0


def _is_tile(x):
    return isinstance(x, (Tensor, PendingMatmul))


def _binary_into(out, x, y, op, loc, box=None):
    """Issue ``out = x op y`` (tiles or scalars) restricted to ``box``."""
    core = current().core
    if box_empty(box):
        return
    if _is_tile(x) and _is_tile(y):
        x = resolve(x, box, loc, op, "x")
        y = resolve(y, box, loc, op, "y")
        d = resolve(out, box, loc, op, "dst")
        # a 1-D tile is a partition vector ([P], one element per partition, e.g. ``m[:, 0]``): against a tile of
        # the same partitions it is a [P, 1] column, not NumPy's trailing-axis broadcast
        if x.ndim == 1 and y.ndim >= 2 and x.shape[0] == y.shape[0] and y.shape[0] > 1:
            x = x.expand_dim(1)
        elif y.ndim == 1 and x.ndim >= 2 and y.shape[0] == x.shape[0] and x.shape[0] > 1:
            y = y.expand_dim(1)
        xs, ys = tuple(x.shape), tuple(y.shape)
        if xs == ys:
            _isa.tensor_tensor(core, loc, d, x, y, op)
        elif _is_col(y, x):
            _isa.tensor_scalar(core, loc, d, x, op, y, _integer=_integer_op(d, x, y))
        elif _is_col(x, y):
            _isa.tensor_scalar(core, loc, d, y, op, x, reverse0=True, _integer=_integer_op(d, y, x))
        else:
            shape = np.broadcast_shapes(xs, ys)
            try:
                xb, yb = x.broadcast_to(shape), y.broadcast_to(shape)
            except ViewError as e:
                raise NkiValidationError(f"{op}: operands of shapes {list(xs)} and {list(ys)} do not broadcast: "
                                         f"{e}", op, "y", list(ys), list(xs), loc) from None
            # a one-partition operand against a tile of several partitions ([1, 1] + [128, 1]): engines read
            # consecutive partitions only, so it is replicated first, as nl.broadcast_to does (replicate_partitions)
            _isa.tensor_tensor(core, loc, d, replicate_partitions(xb, loc), replicate_partitions(yb, loc), op)
    elif _is_tile(x):
        _isa.tensor_scalar(core, loc, resolve(out, box, loc, op, "dst"), resolve(x, box, loc, op, "x"), op, y,
                           _integer=_integer_op(out, x, y))
    elif _is_tile(y):
        _isa.tensor_scalar(core, loc, resolve(out, box, loc, op, "dst"), resolve(y, box, loc, op, "y"), op, x,
                           reverse0=True, _integer=_integer_op(out, y, x))
    else:
        raise TypeError(f"nl.{op} needs at least one tile operand")


def _integer_op(out, x, other):
    """Whether ``out = x op other`` is integer arithmetic: integer tiles in and out, and ``other`` an integer
    tile or a Python/NumPy integer (a weakly typed integer scalar is int32: NKI type promotion, "Weakly Typed
    Scalar Type Inference").  The ISA layer then runs it in native 32-bit integer math when its rules allow
    (``isa.vector.tensor_scalar``'s ``_integer``): ``int32_tile / 38`` divides as integers, not through fp32."""
    if isinstance(other, (Tensor, Tile)):
        ok = not other.dtype.is_float and not other.dtype.is_bool
    else:
        ok = isinstance(other, (int, np.integer)) and not isinstance(other, (bool, np.bool_))
    return ok and not x.dtype.is_float and not out.dtype.is_float


def _is_col(col, full):
    """``col`` is a per-partition [P, 1] operand for ``full`` [P, F...]."""
    return col.shape and full.shape and col.shape[0] == full.shape[0] and \
        builtins.all(s == 1 for s in col.shape[1:]) and builtins.any(s != 1 for s in full.shape[1:])


def _shape_of(x):
    return tuple(x.shape) if _is_tile(x) else ()


def _tile_broadcast_shape(xs, ys):
    """The result shape of a binary op on tiles: NumPy's broadcast, except that a 1-D tile of P elements against a
    tile of P partitions is a partition vector ([P, 1])."""
    if len(xs) == 1 and len(ys) >= 2 and xs[0] == ys[0] and ys[0] > 1:
        xs = (xs[0], 1)
    elif len(ys) == 1 and len(xs) >= 2 and ys[0] == xs[0] and xs[0] > 1:
        ys = (ys[0], 1)
    return np.broadcast_shapes(xs, ys)


def _mk_binary(opname, default_dtype=None):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        core, loc = _ctx()
        x = _operand(x, loc)
        y = _operand(y, loc)
        shape = _tile_broadcast_shape(_shape_of(x), _shape_of(y))
        if dtype is None:
            dtype = default_dtype
        if dtype is None:
            if _is_tile(x) and _is_tile(y):
                dtype = _promote(x.dtype, y.dtype)
            elif _is_tile(x):
                dtype = _scalar_dtype(x.dtype, y)
            elif _is_tile(y):
                dtype = _scalar_dtype(y.dtype, x)
            else:
                raise TypeError(f"nl.{opname} needs at least one tile operand")
        out = _new(shape, dtype, SBUF, "", loc)
        _binary_into(out, x, y, opname, loc, mask_box(mask, shape, loc, opname))
        return out
    fn.__name__ = opname
    fn._trnsim_op = opname
    return fn


def _mk_unary(opname, act=None):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        core, loc = _ctx()
        x = _operand(x, loc)
        out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
        box = mask_box(mask, x.shape, loc, opname)
        if not box_empty(box):
            _isa.activation(core, loc, resolve(out, box, loc, opname, "dst"), act or opname,
                            resolve(x, box, loc, opname, "x"))
        return out
    fn.__name__ = opname
    fn._trnsim_op = opname
    return fn


_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "bitwise_and", "bitwise_or",
           "bitwise_xor", "left_shift", "right_shift", "fmod", "mod")
_COMPARE = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
            "logical_xor")
_UNARY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_sigmoid",
          "gelu_apprx_tanh", "gelu_dx", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx", "reciprocal",
          "sin", "cos", "tan", "arctan", "ceil", "floor", "trunc", "negative", "sign", "abs", "square")
_mod = sys.modules[__name__]
for _n in _BINARY:
    setattr(_mod, _n, _mk_binary(_n))
for _n in _COMPARE:
    setattr(_mod, _n, _mk_binary(_n, default_dtype="bool"))
for _n in _UNARY:
    setattr(_mod, _n, _mk_unary(_n))
del _n


def invert(x, *, dtype=None, mask=None, **kwargs):
    core, loc = _ctx()
    out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    _binary_into(out, x, -1, "bitwise_xor", loc, mask_box(mask, x.shape, loc, "invert"))
    return out


def logical_not(x, *, dtype=bool, mask=None, **kwargs):
    core, loc = _ctx()
    out = _new(x.shape, dtype, SBUF, "", loc)
    _binary_into(out, x, 0, "equal", loc, mask_box(mask, x.shape, loc, "logical_not"))
    return out


def copy(src, *, mask=None, dtype=None, **kwargs):
    """A copy of ``src`` in a new SBUF tile (converted to ``dtype``)."""
    core, loc = _ctx()
    src = _operand(src, loc)
    out = _new(src.shape, src.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, src.shape, loc, "copy")
    if not box_empty(box):
        _isa.tensor_copy(core, loc, resolve(out, box, loc, "copy", "dst"), resolve(src, box, loc, "copy", "src"))
    return out


def static_cast(input_data, dtype):
    """``nl.static_cast``: inside a kernel, a converting copy into a new SBUF tile.  Outside one, on a host array
    (NumPy, ml_dtypes or torch), the same conversion on the host, as legacy NKI allows and tests use to prepare
    inputs: floats round to nearest even in ``dtype``; integers round to nearest and saturate (trnsim's write rule)."""
    if not isinstance(input_data, (Tensor, Tile, PendingMatmul)) and not _in_kernel():
        return _host_cast(input_data, dtype)
    return copy(input_data, dtype=dtype)


# -- reductions -----------------------------------------------------------------------------------------
def _reduce_shape(shape, axes, keepdims):
    out = tuple(1 if d in axes else s for d, s in enumerate(shape)) if keepdims else \
        tuple(s for d, s in enumerate(shape) if d not in axes)
    return out + (1,) if len(out) == 1 else out


def _reduce_box(box, ndim, axes, keepdims, out_ndim):
    if box is None:
        return None
    if keepdims:
        return tuple((0, 1) if d in axes else box[d] for d in range(ndim))
    kept = tuple(box[d] for d in range(ndim) if d not in axes)
    return kept + ((0, 1),) * (out_ndim - len(kept))


def _reduce(opname, x, axis, dtype, mask, keepdims, loc, post=None):
    core = current().core
    x = _operand(x, loc)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) % x.ndim for a in axes)
    shape = _reduce_shape(x.shape, axes, keepdims)
    out = _new(shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, x.shape, loc, opname)
    if box_empty(box):
        return out
    xr = resolve(x, box, loc, opname, "x")
    ob = _reduce_box(box, x.ndim, axes, keepdims, len(shape))
    d = resolve(out, ob, loc, opname, "dst") if ob is not None else out
    red = tuple(sorted(set(axes)))
    if 0 not in red and red != tuple(range(xr.ndim - len(red), xr.ndim)):
        # nl.sum & co. reduce any free axes: move them last (a strided view, no copy) for the instruction,
        # whose rule wants the trailing free axes; the kept axes keep their order, as the result's
        kept = tuple(a for a in range(xr.ndim) if a not in red)
        xr = xr.permute(kept + red)
        red = tuple(range(len(kept), xr.ndim))
    _isa.tensor_reduce(core, loc, d, opname, xr, red, keepdims=keepdims)
    if post == "mean":
        n = 1
        for a in axes:
            n *= xr.shape[a]
        _isa.tensor_scalar(core, loc, d, d, "multiply", 1.0 / n)
    return out


def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("add", x, axis, dtype, mask, keepdims, caller_location())


def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("maximum", x, axis, dtype, mask, keepdims, caller_location())


def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("minimum", x, axis, dtype, mask, keepdims, caller_location())


def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("multiply", x, axis, dtype, mask, keepdims, caller_location())


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return _reduce("add", x, axis, dtype, mask, keepdims, caller_location(), post="mean")


def all(x, axis, *, dtype=bool, mask=None, **kwargs):
    return _reduce("logical_and", x, axis, dtype, mask, False, caller_location())


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    """Population variance along ``axis``: mean((x - mean(x))^2)."""
    loc = caller_location()
    core = current().core
    x = _operand(x, loc)
    if mask is not None:
        raise NotImplementedError("nl.var with mask= is not supported by trnsim yet; restrict the tile by "
                                  "indexing instead")
    m = _reduce("add", x, axis, "float32", None, True, loc, post="mean")
    d = _new(x.shape, "float32", SBUF, "", loc)
    _isa.tensor_scalar(core, loc, d, x, "subtract", m)
    _isa.tensor_tensor(core, loc, d, d, d, "multiply")
    return _reduce("add", d, axis, x.dtype if dtype is None else dtype, None, True, loc, post="mean")


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """Softmax along the last free axis: exp(x - max) / sum, the instructions of the v2 ``nl.softmax``."""
    core, loc = _ctx()
    x = _operand(x, loc)
    if (axis % x.ndim) != x.ndim - 1:
        raise NkiValidationError(f"softmax: axis {axis} is not the last free axis of a rank-{x.ndim} tile",
                                 "softmax", "axis", axis, x.ndim - 1, loc)
    out = _new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, x.shape, loc, "softmax")
    if box_empty(box):
        return out
    xr = resolve(x, box, loc, "softmax", "x")
    o = resolve(out, box, loc, "softmax", "dst")
    p = xr.shape[0]
    mx = _new((p, 1), "float32", SBUF, "", loc)
    _isa.tensor_reduce(core, loc, mx, "maximum", xr, xr.ndim - 1)
    neg = _new((p, 1), "float32", SBUF, "", loc)
    _isa.tensor_scalar(core, loc, neg, mx, "multiply", -1.0)
    e = _new(xr.shape, "float32", SBUF, "", loc)
    s = _new((p, 1), "float32", SBUF, "", loc)
    _isa.activation(core, loc, e, "exp", xr, bias=neg, reduce_op="add", reduce_res=s)
    r = _new((p, 1), "float32", SBUF, "", loc)
    _isa.reciprocal(core, loc, r, s)
    _isa.tensor_scalar(core, loc, o, e, "multiply", r)
    return out


def rms_norm(x, w, axis, n, epsilon=1e-06, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """``x / RMS(x) * w`` over the free ``axis``: the instructions of the v2 ``nl.rms_norm``."""
    loc = caller_location()
    if mask is not None:
        raise NotImplementedError("nl.rms_norm with mask= is not supported by trnsim yet; index the operands")
    x = _operand(x, loc)
    w = _operand(w, loc)
    # legacy NKI: dtype and compute_dtype both set the intermediate and the result dtype
    dt = dtype if dtype is not None else compute_dtype
    return _v2.rms_norm(x, w, axis, n, epsilon, dtype=dt, compute_dtype=dt)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """Per partition, the elements of ``data``'s flattened free dimensions at ``indices`` (GpSimd gather)."""
    loc = caller_location()
    if mask is not None:
        raise NotImplementedError("nl.gather_flattened with mask= is not supported by trnsim yet; index the "
                                  "operands")
    return _v2.gather_flattened(_operand(data, loc), _operand(indices, loc), dtype=dtype)


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


# -- load / store ---------------------------------------------------------------------------------------
def _space_error(op, operand, t, want, loc):
    raise NkiValidationError(f"Expected operand '{operand}' of '{op}' to be in address space '{want}', but got a "
                             f"tile in '{t.buf.kind}' instead", op, operand, t.buf.kind, want, loc)


def load(src, *, mask=None, dtype=None, **kwargs):
    """Copy an HBM region into a new SBUF tile."""
    core, loc = _ctx()
    if isinstance(src, IndirectRows):
        return _load_rows(core, loc, src, mask, dtype)
    if not isinstance(src, Tensor):
        raise NkiValidationError(f"load: operand 'src' must be an HBM tensor, got {type(src).__name__}", "load",
                                 "src", src, None, loc)
    if src.buf.kind != HBM:
        _space_error("load", "src", src, "hbm", loc)
    if src.ndim == 0:           # one element (``hbm[b, h]``): a [1, 1] tile, one partition (an on-chip tile has
        src = src.reshape((1, 1))   # at least 2 dimensions: NKI known issues, "Insufficient rank")
    out = _new(src.shape, src.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, src.shape, loc, "load")
    if not box_empty(box):
        _isa.dma_copy(core, loc, resolve(out, box, loc, "load", "dst"), resolve(src, box, loc, "load", "src"))
    return out


def _load_rows(core, loc, src, mask, dtype):
    """``nl.load(t[indices_tile, ...])``: a gather, one DMA per index (the DMA's indirect mode moves a descriptor
    per index; as for the v2 gathers, the read of the index tile is not recorded as a dependency)."""
    out = _new(src.shape, src.dtype if dtype is None else dtype, SBUF, "", loc)
    box = mask_box(mask, src.shape, loc, "load")
    if box_empty(box):
        return out
    (p0, p1), free = ((0, len(src.rows)), None) if box is None else (box[0], box[1:])
    src.check(loc, p0, p1)          # the indices of the partitions the mask keeps must be in bounds
    fs = () if free is None else tuple(slice(lo, hi) for lo, hi in free)
    for p in range(p0, p1):
        s = src.rows[p][(slice(0, 1),) + fs] if fs else src.rows[p]
        _isa.dma_copy(core, loc, out[(slice(p, p + 1),) + fs], s)
    return out


def _store_rows(core, loc, dst, value, mask):
    """``nl.store(t[indices_tile, ...], value)``: a scatter, one DMA per index (rows named twice: the later
    partition's value lands last, as the DMA moves them in order)."""
    box = mask_box(mask, dst.shape, loc, "store")
    if box_empty(box):
        return
    value = materialize(value, loc)
    if not isinstance(value, Tensor) or value.size != dst.size:
        raise NkiValidationError(f"store: value must be a tile of {dst.size} elements (shape {list(dst.shape)}) for "
                                 f"{len(dst.rows)} indirect rows, got {getattr(value, 'shape', type(value).__name__)}",
                                 "store", "value", getattr(value, "shape", None), list(dst.shape), loc)
    v = resolve(value, None, loc, "store", "value")
    (p0, p1), free = ((0, len(dst.rows)), None) if box is None else (box[0], box[1:])
    dst.check(loc, p0, p1)
    fs = () if free is None else tuple(slice(lo, hi) for lo, hi in free)
    for p in range(p0, p1):
        if fs:
            _isa.dma_copy(core, loc, dst.rows[p][(slice(0, 1),) + fs], v.reshape(dst.shape)[(slice(p, p + 1),) + fs])
        else:
            _isa.dma_copy(core, loc, dst.rows[p], v[p:p + 1])


def store(dst, value, *, mask=None, **kwargs):
    """Copy a tile into an HBM region."""
    core, loc = _ctx()
    if isinstance(dst, IndirectRows):
        return _store_rows(core, loc, dst, value, mask)
    if not isinstance(dst, Tensor):
        raise NkiValidationError(f"store: operand 'dst' must be an HBM tensor, got {type(dst).__name__}", "store",
                                 "dst", dst, None, loc)
    if dst.buf.kind != HBM:
        _space_error("store", "dst", dst, "hbm", loc)
    if dst.ndim == 0:           # one element: stored from a [1, 1] tile (as nl.load reads one)
        dst = dst.reshape((1, 1))
    value = materialize(value, loc)
    box = mask_box(mask, dst.shape, loc, "store")
    if box_empty(box):
        return
    d = resolve(dst, box, loc, "store", "dst")
    if isinstance(value, Tensor):
        if not value.on_chip:
            _space_error("store", "value", value, "sbuf", loc)
        _isa.dma_copy(core, loc, d, resolve(value, box, loc, "store", "value"))
    else:
        t = _new(d.shape, dst.dtype, SBUF, "", loc)
        _isa.memset(core, loc, t, value)
        _isa.dma_copy(core, loc, d, t)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """Load a 2-D HBM region [F, P] transposed into a new SBUF tile [P, F] (a DMA transpose)."""
    core, loc = _ctx()
    if not isinstance(src, Tensor) or src.buf.kind != HBM:
        if isinstance(src, Tensor):
            _space_error("load_transpose2d", "src", src, "hbm", loc)
        raise NkiValidationError("load_transpose2d: operand 'src' must be an HBM tensor", "load_transpose2d",
                                 "src", src, None, loc)
    if src.ndim != 2:
        raise NkiValidationError(f"load_transpose2d: operand 'src' has rank {src.ndim}; it must be 2-D",
                                 "load_transpose2d", "src", src.ndim, 2, loc)
    box = mask_box(mask, src.shape, loc, "load_transpose2d")
    s = resolve(src, box, loc, "load_transpose2d", "src")
    out = _new((src.shape[1], src.shape[0]), src.dtype if dtype is None else dtype, SBUF, "", loc)
    if not box_empty(box):
        ob = None if box is None else (box[1], box[0])
        _isa.dma_transpose(core, loc, resolve(out, ob, loc, "load_transpose2d", "dst"), s)
    return out


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


def _track_masks(ns):
    """Functions that take ``mask=`` and return a new tile remember the region it kept (tile.track_mask)."""
    import inspect
    for name, fn in list(ns.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != __name__:
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if "mask" in params:
            ns[name] = track_mask(fn)


_track_masks(globals())
