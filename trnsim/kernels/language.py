"""``nki.language`` (v2): dtypes, buffers, tensor creation, load/store, loops, launch ids and math wrappers."""

from __future__ import annotations

import enum
import operator
import sys

import numpy as np

from .. import isa as _isa
from ..isa.errors import caller_location
from ..memory import HBM, PSUM, SBUF, DynSlice, Tensor, dtype_of
from ..memory.dtypes import round_to
from ..memory.space import native_ok
from . import issue_cache as _ic
from .context import _local, current
from .tensor import NkiTensor

# -- dtypes (strings, as in NKI v2) -------------------------------------------------------------------
bool_ = "bool"
int8, int16, int32 = "int8", "int16", "int32"
uint8, uint16, uint32 = "uint8", "uint16", "uint32"
float16, float32, bfloat16, tfloat32 = "float16", "float32", "bfloat16", "tfloat32"
float8_e4m3, float8_e4m3fn, float8_e5m2 = "float8_e4m3", "float8_e4m3fn", "float8_e5m2"
float8_e5m2_x4, float8_e4m3fn_x4, float8_e8m0fnu, float4_e2m1fn_x4 = (
    "float8_e5m2_x4", "float8_e4m3fn_x4", "float8_e8m0fnu", "float4_e2m1fn_x4")
DType = str


class MemoryRegion(enum.Enum):
    """Where a tensor lives.  ``tensor.buffer`` (a view's memory kind, ``"sbuf"``, ``"psum"`` or ``"hbm"``)
    compares equal to the region it was allocated in, so kernels can test ``x.buffer == nl.sbuf``; trnsim keeps
    private and shared HBM in one memory, so an HBM tensor equals both ``nl.shared_hbm`` and ``nl.private_hbm``."""
    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    def __eq__(self, other):
        if isinstance(other, str):
            return other == self.value or (other == "hbm" and self.value.endswith("_hbm"))
        return self is other

    __hash__ = enum.Enum.__hash__


sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
hbm = MemoryRegion.shared_hbm
private_hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm


from .lang_objects import NKIObject, tile_size  # noqa: E402,F401  (re-exported: nl.NKIObject, nl.tile_size)




def _kind(buffer):
    b = getattr(buffer, "value", buffer)
    b = str(b)
    if b in ("sbuf",):
        return SBUF
    if b in ("psum",):
        return PSUM
    if b in ("hbm", "shared_hbm", "private_hbm"):
        return HBM
    raise ValueError(f"unknown buffer {buffer!r}: expected nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm or "
                     "nl.private_hbm")


def is_hbm(buffer):
    return _kind(buffer) == HBM


def is_psum(buffer):
    return _kind(buffer) == PSUM


def is_sbuf(buffer):
    return _kind(buffer) == SBUF


def is_on_chip(buffer):
    return _kind(buffer) in (SBUF, PSUM)


# -- creation -----------------------------------------------------------------------------------------
# (shape, dtype, buffer) as a kernel passes them -> (shape as a tuple of ints, DType, memory kind, shared HBM):
# the arguments' normal form, worked out once per spelling (every tile allocation of a loop body repeats one).
# Keyed by the shape and the identities of the dtype and buffer objects (nl.sbuf and DType hash in Python, which
# would cost more than the rest); each entry keeps those objects, so their ids cannot be reused while it lives,
# and a hit checks them.
_ND_ARGS: dict = {}


def _nd_args(shape, dtype, buffer):
    try:
        key = (shape, id(dtype), id(buffer))
        hit = _ND_ARGS.get(key)
    except TypeError:                      # an unhashable spelling (a list shape): normalised every time
        key = hit = None
    if hit is not None and hit[0] is dtype and hit[1] is buffer:
        return hit[2]
    shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    kind = _kind(buffer)
    # (the last entry, filled by ndarray: the issue-cache layout numbers of an SBUF tile of this spelling, and the
    # last target whose partition limit the shape was checked against)
    out = (shp, dtype_of(dtype), kind,
           kind == HBM and str(getattr(buffer, "value", buffer)) in ("shared_hbm", "hbm"), [None, None])
    if key is not None and len(_ND_ARGS) < 4096:
        _ND_ARGS[key] = (dtype, buffer, out)
    return out


_ND_LAST = ((), None, None, None)     # (shape, dtype, buffer, _nd_args' answer) of the last spelling normalised


def _set_nd_last(shape, dtype, buffer, got):
    global _ND_LAST
    _ND_LAST = (shape, dtype, buffer, got)


def ndarray(shape, dtype, buffer=sbuf, name="", address=None):
    """A new tensor in ``buffer`` (filled with the sentinel: NaN for floats, 4 for integers).  ``address``:
    ``(partition offset, byte offset)`` of an SBUF or PSUM tile, which then holds those bytes of those partitions
    and shares them with every tile placed there (trnsim/memory/space.py)."""
    try:                         # (inline: every tile of a loop body comes through here)
        ctx = _local.ctx
        core = ctx.core
    except AttributeError:       # no kernel running: current() says so
        ctx = current()
        core = ctx.core
    # the last spelling's normal form when this call repeats it (the dtype and buffer objects themselves, a shape
    # equal to it), else _nd_args' memo
    last = _ND_LAST
    if type(shape) is tuple and dtype is last[1] and buffer is last[2] and shape == last[0]:
        shape, dt, kind, shared, lk_memo = last[3]
    else:
        got = _nd_args(shape, dtype, buffer)
        shape, dt, kind, shared, lk_memo = got
        if type(shape) is tuple:
            _set_nd_last(shape, dtype, buffer, got)
    if address is not None:
        return _placed(core, shape, dt, kind, name, address)
    if kind != HBM and lk_memo[1] is not core.target:     # (checked once per spelling and target)
        pmax = core.target.pmax
        if shape and shape[0] <= pmax:
            lk_memo[1] = core.target
        else:
            from ..isa.errors import NkiValidationError
            raise NkiValidationError(
                f"ndarray: number of partitions {shape[0] if shape else 0} exceed architecture limitation of "
                f"{pmax} for {kind.upper()} tensor `{name}`", "ndarray", "shape", shape[0] if shape else 0, pmax,
                caller_location())
    # a large narrow-float HBM tensor is held in its own encoding (memory/space.py NATIVE_MIN_BYTES)
    native = kind == HBM and native_ok(dt, int(np.prod(shape, dtype=np.int64)), core.execute, core.precise)
    if shared and len(ctx.cores) > 1:
        i = ctx._shared_index
        ctx._shared_index += 1
        if i < len(ctx.shared_outputs):
            buf = ctx.shared_outputs[i]
            return NkiTensor.whole(buf, name or buf.name)
        buf = core.allocate(shape, dt, kind, name or f"shared_{i}", native=native)
        ctx.shared_outputs.append(buf)
        return NkiTensor.whole(buf)
    try:
        buf = core.allocate(shape, dt, kind, name, native=native) if native else core.allocate(shape, dt, kind, name)
    except MemoryError as e:
        from ..isa.errors import NkiValidationError
        raise NkiValidationError(f"ndarray: {e}", "ndarray", "shape", shape, None, caller_location()) from None
    t = NkiTensor.whole(buf)
    if kind == SBUF and address is None:
        # an SBUF tile's layout (issue_cache: buffer geometry, dtype, shape, strides, offset 0; no address) is the
        # same for every tile of this spelling: its numbers worked out for the first tile, set on the others
        lk = lk_memo[0]
        if lk is None:
            lk_memo[0] = (buf.layout_key or _ic._buf_key(buf), t._lk or _ic._view_key(t))
        else:
            buf.layout_key = lk[0]
            t._lk = lk[1]
    return t


def _placed(core, shape, dt, kind, name, address):
    """:func:`ndarray` of a tile at an explicit ``address``."""
    from ..isa.errors import NkiValidationError
    loc = caller_location()
    what = f"tensor `{name}`" if name else "a tensor"
    if kind == HBM:
        raise NkiValidationError(f"ndarray: address={address!r} given for HBM {what}; an address places an SBUF or "
                                 "PSUM tile only", "ndarray", "address", address, None, loc)
    try:
        p0, a0 = (int(operator.index(v)) for v in address)
    except (TypeError, ValueError):
        raise NkiValidationError(f"ndarray: address={address!r} of {what} must be two integers (partition offset, "
                                 "byte offset)", "ndarray", "address", address, None, loc) from None
    pmax = core.target.pmax
    if not shape or shape[0] > pmax:
        raise NkiValidationError(
            f"ndarray: number of partitions {shape[0] if shape else 0} exceed architecture limitation of "
            f"{pmax} for {kind.upper()} {what}", "ndarray", "shape", shape[0] if shape else 0, pmax, loc)
    try:
        buf = core.allocate(shape, dt, kind, name, address=(p0, a0))
    except MemoryError as e:
        raise NkiValidationError(f"ndarray: {e}", "ndarray", "address", (p0, a0), None, loc) from None
    return NkiTensor.whole(buf)


def _filled(shape, value, dtype, buffer, name):
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    core = current().core
    if t.on_chip:
        _isa.memset(core, caller_location(), t, value)
    elif core.execute:
        a = t.np
        # a float value rounded to the dtype (nearest even) as every write stores it; a buffer held in its own
        # encoding (Buffer.native) is written through by store_back
        a[...] = round_to(t.dtype, np.full(a.shape, value, np.float32)) if t.dtype.is_float else value
        t.store_back()
        t.buf.all_written = True
    return t


def zeros(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, 0, dtype, buffer, name)


def ones(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, 1, dtype, buffer, name)


def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    return _filled(shape, fill_value, dtype, buffer, name)


def _like(x, dtype, buffer):
    return x.shape, (dtype if dtype is not None else x.dtype.name), (buffer if buffer is not None else x.buf.kind)


def zeros_like(x, dtype=None, buffer=None, name=""):
    return zeros(*_like(x, dtype, buffer), name=name)


def ones_like(x, dtype=None, buffer=None, name=""):
    return ones(*_like(x, dtype, buffer), name=name)


def full_like(x, fill_value, dtype=None, buffer=None, name=""):
    s, d, b = _like(x, dtype, buffer)
    return full(s, fill_value, d, b, name)


def empty_like(x, dtype=None, buffer=None, name=""):
    return ndarray(*_like(x, dtype, buffer), name=name)


def ds(start, size):
    return DynSlice(start, size)


# -- loops --------------------------------------------------------------------------------------------
def affine_range(start, stop=None, step=1):
    return range(start, stop, step) if stop is not None else range(start)


sequential_range = affine_range
static_range = affine_range

_RUNTIME_LOOP = "a runtime loop (nl.dynamic_range, or a loop whose bound is a register)"


def _fenced(r, loc):
    """Iterate ``r`` as a loop the hardware runs (not unrolled by the compiler): every iteration boundary is a fence
    the capacity check's reordering does not move instructions across (capacity.py)."""
    occ = current().core.occupancy
    for i in r:
        occ.fence(loc, _RUNTIME_LOOP)
        yield i
    occ.fence(loc, _RUNTIME_LOOP)


def dynamic_range(start, stop=None, step=1):
    """A loop the hardware runs with its bounds at runtime: trnsim runs its iterations eagerly, and the capacity
    check does not move instructions into or out of an iteration."""
    return _fenced(affine_range(start, stop, step), caller_location())


def fori_loop(lower, upper, body_fun, step=1):
    val = None
    r = range(lower, upper, step)
    for x in (lower, upper, step):
        if not isinstance(x, (int, np.integer)):        # a register bound: a loop run at runtime
            r = _fenced(r, caller_location())
            break
    for i in r:
        val = body_fun(i)
    return val


# -- launch -------------------------------------------------------------------------------------------
def program_id(axis=0):
    ctx = current()
    if not 0 <= axis < len(ctx.grid):
        raise ValueError(f"program_id({axis}): the launch grid has {len(ctx.grid)} dimension(s)")
    return ctx.program_id[axis]


def num_programs(axes=0):
    ctx = current()
    if isinstance(axes, (tuple, list)):
        n = 1
        for a in axes:
            n *= ctx.grid[a]
        return n
    return ctx.grid[axes]


def program_ndim():
    return len(current().grid)


# -- load / store -------------------------------------------------------------------------------------
def load(src, dtype=None):
    """Copy an HBM tensor into a new SBUF tile of the same shape."""
    t = ndarray(src.shape, dtype if dtype is not None else src.dtype.name, buffer=sbuf)
    _isa.dma_copy(current().core, caller_location(), t, src)
    return t


def store(dst, value):
    _isa.dma_copy(current().core, caller_location(), dst, value)


# -- math wrappers ------------------------------------------------------------------------------------
def _out(x, dtype):
    dt = dtype if dtype is not None else x.dtype.name
    return ndarray(x.shape, dt, buffer=sbuf)


def _mk_binary(opname):
    def fn(x, y, dtype=None):
        core = current().core
        loc = caller_location()
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            out = _out(x, dtype)
            _isa.tensor_tensor(core, loc, out, x, y, opname)
        elif isinstance(x, Tensor):
            out = _out(x, dtype)
            _isa.tensor_scalar(core, loc, out, x, opname, y)
        elif isinstance(y, Tensor):
            out = _out(y, dtype)
            _isa.tensor_scalar(core, loc, out, y, opname, x, reverse0=True)
        else:
            raise TypeError(f"nl.{opname} needs at least one tensor operand")
        return out
    fn.__name__ = opname
    fn._trnsim_op = opname
    return fn


def _mk_unary(opname):
    def fn(x, dtype=None):
        out = _out(x, dtype)
        _isa.activation(current().core, caller_location(), out, opname, x)
        return out
    fn.__name__ = opname
    fn._trnsim_op = opname
    return fn


_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "abs_max", "abs_min", "power", "equal",
           "not_equal", "less", "less_equal", "greater", "greater_equal", "bitwise_and", "bitwise_or",
           "bitwise_xor", "left_shift", "right_shift", "logical_and", "logical_or", "logical_xor", "fmod", "mod")
_UNARY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_sigmoid",
          "gelu_apprx_tanh", "gelu_dx", "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "softplus", "mish", "erf",
          "erf_dx", "reciprocal", "copy", "sin", "cos", "tan", "arctan", "ceil", "floor", "trunc", "negative",
          "sign", "abs", "square")
_mod = sys.modules[__name__]
for _n in _BINARY:
    setattr(_mod, _n, _mk_binary(_n))
for _n in _UNARY:
    setattr(_mod, _n, _mk_unary(_n))
identity = _mk_unary("identity")


class _Marker:
    def __init__(self, name):
        self._trnsim_op = name
        self.__name__ = name

    def __repr__(self):
        return f"nl.{self.__name__}"


bypass = _Marker("bypass")
average = _Marker("average")
prelu = _Marker("prelu")


def invert(x, dtype=None):
    out = _out(x, dtype)
    _isa.tensor_scalar(current().core, caller_location(), out, x, "bitwise_xor", -1)
    return out


def logical_not(x, dtype=None):
    out = _out(x, dtype)
    _isa.tensor_scalar(current().core, caller_location(), out, x, "equal", 0)
    return out


def _mk_reduce(opname, post=None):
    def fn(x, axis, dtype=None, keepdims=False):
        core = current().core
        loc = caller_location()
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(a % x.ndim for a in axes)
        shape = tuple(1 if d in axes else s for d, s in enumerate(x.shape)) if keepdims else \
            tuple(s for d, s in enumerate(x.shape) if d not in axes)
        if len(shape) == 1:
            shape = shape + (1,)
        out = ndarray(shape, dtype if dtype is not None else x.dtype.name, buffer=sbuf)
        _isa.tensor_reduce(core, loc, out, opname, x, axes, keepdims=keepdims)
        if post is not None:
            n = 1
            for a in axes:
                n *= x.shape[a]
            _isa.tensor_scalar(core, loc, out, out, "multiply", 1.0 / n)
        return out
    return fn


sum = _mk_reduce("add")
sum._trnsim_op = "add"
max = _mk_reduce("maximum")
max._trnsim_op = "maximum"
min = _mk_reduce("minimum")
min._trnsim_op = "minimum"
prod = _mk_reduce("multiply")
mean = _mk_reduce("add", post="mean")


def var(x, axis, dtype=None, keepdims=False):
    m = mean(x, axis, dtype="float32", keepdims=True)
    core = current().core
    loc = caller_location()
    d = ndarray(x.shape, "float32", buffer=sbuf)
    _isa.tensor_scalar(core, loc, d, x, "subtract", m)
    _isa.tensor_tensor(core, loc, d, d, d, "multiply")
    return mean(d, axis, dtype=dtype or x.dtype.name, keepdims=keepdims)


def softmax(x, axis=-1, dtype=None):
    """Row softmax along the last free dimension: exp(x - max) / sum."""
    core = current().core
    loc = caller_location()
    p = x.shape[0]
    mx = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.tensor_reduce(core, loc, mx, "maximum", x, x.ndim - 1)
    neg = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.tensor_scalar(core, loc, neg, mx, "multiply", -1.0)
    e = ndarray(x.shape, "float32", buffer=sbuf)
    s = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.activation(core, loc, e, "exp", x, bias=neg, reduce_op="add", reduce_res=s)
    r = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.reciprocal(core, loc, r, s)
    out = _out(x, dtype)
    _isa.tensor_scalar(core, loc, out, e, "multiply", r)
    return out


def matmul(x, y, transpose_x=False):
    """x @ y through the Tensor Engine; with ``transpose_x`` x is given as [K, M] already."""
    core = current().core
    loc = caller_location()
    if not transpose_x:
        xt = transpose(x)
        xs = ndarray(xt.shape, x.dtype.name, buffer=sbuf)
        _isa.tensor_copy(core, loc, xs, xt)
        x = xs
    out = ndarray((x.shape[1], y.shape[1]), "float32", buffer=psum)
    _isa.nc_matmul(core, loc, out, x, y)
    return out


def transpose(x, dtype=None):
    core = current().core
    p = x.shape[0]
    f = x.size // p if p else 0
    on_tensor = not (p <= 32 and f <= 32)
    out = ndarray((f, p), x.dtype.name, buffer=psum if on_tensor else sbuf)
    _isa.nc_transpose(core, caller_location(), out, x)
    return out


def where(condition, x, y, dtype=None):
    core = current().core
    loc = caller_location()
    out = _out(x, dtype)
    if isinstance(y, Tensor):
        _isa.tensor_copy(core, loc, out, y)
    else:
        _isa.memset(core, loc, out, y)
    _isa.tensor_copy_predicated(core, loc, out, x, condition)
    return out


def expand_dims(x, axis):
    return x.expand_dim(axis)


def broadcast_to(x, shape, dtype=None):
    return x.broadcast_to(shape)


def no_reorder():
    import contextlib
    return contextlib.nullcontext()


def device_print(print_prefix, tensor):
    core = current().core
    if core.execute:
        print(print_prefix, tensor.np)


def shared_constant(constant, name=""):
    """``nl.shared_constant(constant)``: a read-only HBM tensor holding ``constant``, a NumPy array or the path of
    a ``.npy`` file (loaded without pickle).  Its dtype is the array's."""
    loc = caller_location()
    from ..isa.errors import NkiValidationError
    import os
    if isinstance(constant, (str, os.PathLike)):
        try:
            arr = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise NkiValidationError(f"shared_constant: cannot load {str(constant)!r} as a .npy array: {e}",
                                     "shared_constant", "constant", str(constant), None, loc) from None
    else:
        arr = np.asarray(constant)
    try:
        dt = dtype_of(arr.dtype)
    except (TypeError, ValueError, KeyError):
        raise NkiValidationError(f"shared_constant: dtype {arr.dtype} of the constant is not an NKI dtype",
                                 "shared_constant", "constant", str(arr.dtype), None, loc) from None
    if arr.ndim == 0 or arr.size == 0:
        raise NkiValidationError(f"shared_constant: the constant must have at least one element and one "
                                 f"dimension, got shape {arr.shape}", "shared_constant", "constant", arr.shape,
                                 None, loc)
    if dt.packed and arr.dtype != dt.np:
        arr = arr.view(dt.np)          # a NumPy dtype standing for an MX format: its packed integers
    core = current().core
    src = arr.astype(np.float32) if dt.is_float and arr.dtype != np.float32 else arr
    buf = core.wrap_input(src, arr.shape, dt, name=name or "shared_constant")
    return NkiTensor.whole(buf, name or "shared_constant")


def shared_identity_matrix(n, dtype=uint8, dst=None):
    """``nl.shared_identity_matrix(n, dtype)``: an ``[n, n]`` identity matrix in SBUF (the identity kernels give
    ``nc_matmul`` to transpose), DMA-copied from a shared HBM constant into ``dst`` or a new SBUF tensor."""
    loc = caller_location()
    from ..isa.errors import NkiValidationError
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= int(n) <= current().core.target.pmax:
        raise NkiValidationError(f"shared_identity_matrix: n={n!r} must be an int from 1 to "
                                 f"{current().core.target.pmax} (the partitions of SBUF)",
                                 "shared_identity_matrix", "n", n, current().core.target.pmax, loc)
    n = int(n)
    dt = dtype_of(dtype)
    core = current().core
    buf = core.wrap_input(np.eye(n, dtype=np.float32 if dt.is_float else dt.storage), (n, n), dt,
                          name="shared_identity")
    src = NkiTensor.whole(buf, "shared_identity")
    if dst is None:
        dst = ndarray((n, n), dt, buffer=sbuf, name="identity")
    elif tuple(dst.shape) != (n, n):
        raise NkiValidationError(f"shared_identity_matrix: dst has shape {tuple(dst.shape)}, expected ({n}, {n})",
                                 "shared_identity_matrix", "dst", tuple(dst.shape), (n, n), loc)
    _isa.dma_copy(core, loc, dst, src)
    return dst


def all(x, axis, dtype=None):
    """Logical AND of ``x`` over the free ``axis`` (a tensor_reduce with ``logical_and``): 1 where every
    element is nonzero."""
    return _all_reduce(x, axis, dtype if dtype is not None else "uint8")


_all_reduce = _mk_reduce("logical_and")


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None):
    """``x / sqrt(sum(x**2 over axis) / n + epsilon) * w``, built from the instructions a kernel would use:
    Scalar-Engine square with an fp32 add-reduction, a Vector-Engine scale-and-add, an rsqrt, then two
    multiplies.  ``axis`` must cover the free dimensions (the per-partition statistic is then one value per
    partition); ``compute_dtype`` is the dtype of the normalised intermediate (default fp32)."""
    core = current().core
    loc = caller_location()
    if not isinstance(x, Tensor) or not isinstance(w, Tensor):
        bad = "x" if not isinstance(x, Tensor) else "w"
        raise _isa.NkiValidationError(f"rms_norm: operand '{bad}' must be a tile", "rms_norm", bad, None, None, loc)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a % x.ndim for a in axes))
    if axes != tuple(range(1, x.ndim)):
        raise _isa.NkiValidationError(
            f"rms_norm: axis {axis} of a rank-{x.ndim} tile: trnsim normalises over the free dimensions "
            f"{tuple(range(1, x.ndim))} (partition-axis statistics need a cross-partition reduction)",
            "rms_norm", "axis", axis, tuple(range(1, x.ndim)), loc)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise _isa.NkiValidationError(f"rms_norm: n must be a positive int, got {n!r}", "rms_norm", "n", n, ">0", loc)
    p = x.shape[0]
    cdt = compute_dtype if compute_dtype is not None else "float32"
    sq = ndarray(x.shape, "float32", buffer=sbuf)
    ss = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.activation(core, loc, sq, "square", x, reduce_op="add", reduce_res=ss)
    ms = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.tensor_scalar(core, loc, ms, ss, "multiply", 1.0 / int(n), op1="add", operand1=float(epsilon))
    rs = ndarray((p, 1), "float32", buffer=sbuf)
    _isa.activation(core, loc, rs, "rsqrt", ms)
    xn = ndarray(x.shape, cdt, buffer=sbuf)
    _isa.tensor_scalar(core, loc, xn, x, "multiply", rs)
    out = _out(x, dtype)
    ww = w if tuple(w.shape) == tuple(x.shape) else w.broadcast_to(x.shape)
    _isa.tensor_tensor(core, loc, out, xn, ww, "multiply")
    return out


def load_transpose2d(src, dtype=None):
    """Load the 2-D HBM tensor ``src`` [A, B] into a new SBUF tile [B, A] (a DMA transpose)."""
    loc = caller_location()
    if not isinstance(src, Tensor) or src.ndim != 2:
        raise _isa.NkiValidationError(
            "load_transpose2d: operand 'src' must be a 2-D tensor, got "
            f"{list(src.shape) if isinstance(src, Tensor) else type(src).__name__}", "load_transpose2d", "src",
            getattr(src, "shape", None), 2, loc)
    out = ndarray((src.shape[1], src.shape[0]), dtype if dtype is not None else src.dtype.name, buffer=sbuf)
    _isa.dma_transpose(current().core, loc, out, src)
    return out


def gather_flattened(data, indices, axis=0, dtype=None):
    """Per partition, ``out[p, ...] = data[p].flatten()[indices[p, ...]]`` (GpSimd ``nc_n_gather``); the result
    has the shape of ``indices``.  An index outside ``data``'s free size is refused (the hardware returns
    undefined values)."""
    core = current().core
    loc = caller_location()
    if axis != 0:
        raise _isa.NkiValidationError(f"gather_flattened: axis {axis} is not supported; the gather runs along the "
                                      "flattened free dimensions of each partition (axis=0)", "gather_flattened",
                                      "axis", axis, 0, loc)
    g = ndarray(indices.shape, data.dtype.name, buffer=sbuf)
    _isa.nc_n_gather(core, loc, g, data, indices)
    return _cast_to(core, loc, g, dtype)


def _cast_to(core, loc, t, dtype):
    """``t`` itself, or (for another ``dtype``) a new SBUF tile with ``t`` converted by tensor_copy."""
    if dtype is None or dtype_of(dtype) == t.dtype:
        return t
    out = ndarray(t.shape, dtype, buffer=sbuf)
    _isa.tensor_copy(core, loc, out, t)
    return out


def while_loop(init, body_fun):
    """``r = init; while r != 0: r = body_fun(r)``; ``r`` is a register (``nisa.register_alloc``) or an int.
    trnsim runs the loop eagerly: each iteration's instructions are issued as the hardware would run them."""
    r = init
    while int(r) != 0:
        r = body_fun(r)
        if r is None:
            raise TypeError(f"while_loop: body_fun {getattr(body_fun, '__name__', body_fun)!r} returned None; it "
                            "must return the next condition register")


def dropout(x, rate, dtype=None):
    """``x`` with each element zeroed with probability ``rate`` (a number or a [P, 1] tile): Vector Engine
    ``dropout`` into a new tile (kept elements are not rescaled, as the instruction)."""
    core = current().core
    loc = caller_location()
    out = ndarray(x.shape, x.dtype.name, buffer=sbuf)
    _isa.dropout(core, loc, out, x, rate)
    return _cast_to(core, loc, out, dtype)


def random_seed(seed):
    """Seed the Vector Engine's generator: ``seed`` is a [1, 1] 32-bit tile or an int."""
    core = current().core
    loc = caller_location()
    if not isinstance(seed, Tensor):
        t = ndarray((1, 1), "uint32", buffer=sbuf)
        _isa.memset(core, loc, t, seed)
        seed = t
    _isa.set_rng_seed(core, loc, seed)


def rand(shape, dtype="float32", **kwargs):
    """Uniform random values in [0, 1) in a new SBUF tile: 16 random bits per element (``nisa.rng`` as
    uint16) scaled by 2**-16, the recipe the NKI reference gives for rng."""
    core = current().core
    loc = caller_location()
    bits = ndarray(shape, "uint16", buffer=sbuf)
    _isa.rng(core, loc, bits)
    out = ndarray(shape, dtype, buffer=sbuf)
    _isa.tensor_scalar(core, loc, out, bits, "multiply", 2.0 ** -16)
    return out
del _n
