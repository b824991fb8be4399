"""Operand handling shared by the ``nl`` functions: staging host operands into SBUF, replicating broadcast
partitions, issuing ``out = x op y`` on the right engine instruction, and remembering ``mask=`` regions.

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

import builtins

import numpy as np

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...memory import HBM, SBUF, Tensor, ViewError
from ..context import current
from .lang_alloc import _new
from .tile import PendingMatmul, Tile, box_empty, materialize, resolve, track_mask


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


def _track_masks(ns):
    """Functions that take ``mask=`` and return a new tile remember the region it kept (tile.track_mask)."""
    import inspect
    for name, fn in list(ns.items()):
        if name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != ns["__name__"]:
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if "mask" in params:
            ns[name] = track_mask(fn)
