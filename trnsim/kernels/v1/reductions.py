"""Legacy reductions across loop iterations and across SPMD programs: ``nl.loop_reduce`` and ``nl.all_reduce``.

``nl.loop_reduce(x, op, loop_indices)`` reduces ``x`` over the iterations of the loops ``loop_indices`` into the
tile its result is assigned to: the destination is also the left operand, so inside the loop
``b = nl.loop_reduce(a, np.add, [k])`` is ``b = nisa.tensor_tensor(b, a, np.add)`` (the NKI reference gives this
equivalence) and ``acc[i] = nl.loop_reduce(a, ...)`` is ``acc[i] = acc[i] + a``.  On the first iteration of the
loops (every index in ``loop_indices`` at its loop's first value) the destination is set to ``x`` instead: the
reduction starts there, as the hardware's accumulate-with-reset does.  That is trnsim's reading, not a sentence of
the reference: AWS's own kernels (the blockwise MoE backward) reduce into a freshly allocated, never written tile,
which only works if the first iteration initialises it; with the reference's example (``b`` zeroed before an add
reduction) both readings agree.  To find the destination, the call looks at the statement it is part of: an
assignment to a name reads that name's current tile; an assignment to a subscript returns a pending value that the
tile assignment completes.

``nl.all_reduce(x, op, program_axes)`` reduces ``x`` over the programs of the launch grid that differ only along
``program_axes``.  trnsim runs a launch's programs concurrently (``trnsim.machine.programs``), so it is built the
way ``nisa.sendrecv`` is: each program posts its tile, the group passes a barrier, each program copies every
member's tile into a gathered SBUF tile by DMA (its own by an engine copy) and reduces it with one
``tensor_reduce``, and a second barrier keeps a program from overwriting its tile before the others have read it.
Every member computes the same values in the same order (program index order), so the results agree bit for bit;
the cost is that of the instructions issued (DMA transfers, the reduction, two barriers).
"""

from __future__ import annotations

import dis
import itertools
import sys

import numpy as np

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...memory import SBUF, Tensor, dtype_of
from ..context import current
from ..launch import program_ids
from . import language as _nl
from .tile import box_empty, mask_box, materialize, resolve

__all__ = ["loop_reduce", "all_reduce"]

_NAME_STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF")


def _assignment_target(frame):
    """``("name", value or KeyError)`` when the call being made in ``frame`` is assigned to a plain name,
    ``("subscript", None)`` when it is assigned to a subscript (``t[...] = call(...)``), else ``(None, None)``."""
    code = frame.f_code
    ins = list(dis.get_instructions(code))
    # f_lasti is the call instruction, or (3.11+) one of the inline cache entries after it, which dis hides
    at = None
    for i, x in enumerate(ins):
        if x.offset > frame.f_lasti:
            break
        at = i
    if at is None or at + 1 >= len(ins):
        return None, None
    nxt = ins[at + 1]
    if nxt.opname in _NAME_STORES:
        name = nxt.argval
        if nxt.opname == "STORE_GLOBAL":
            scope = frame.f_globals
        else:
            scope = frame.f_locals
            if name not in scope and nxt.opname == "STORE_NAME":
                scope = frame.f_globals
        return "name", (name, scope[name] if name in scope else KeyError(name))
    for x in ins[at + 1:at + 40]:          # the target's container and key (tuples, slices, arithmetic) are loaded,
        if x.opname == "STORE_SUBSCR":     # then stored
            return "subscript", None
        if x.opname.startswith(("CALL", "PRECALL", "POP_", "RETURN", "STORE_", "JUMP")):
            break
    return None, None


def _fold_into(acc, x, op, dtype, loc):
    """``op(acc, x)`` in a new SBUF tile of ``dtype`` (default: acc's), as nisa.tensor_tensor(acc, x, op)."""
    acc = _nl._operand(acc, loc)
    out = _nl._new(acc.shape, acc.dtype if dtype is None else dtype, SBUF, "", loc)
    _nl._binary_into(out, acc, x, op, loc)
    return out


class PendingLoopReduce:
    """``acc[...] = nl.loop_reduce(x, op, ...)`` before the assignment: completed by the tile assignment, which
    folds ``x`` into the assigned region."""

    __slots__ = ("x", "op", "dtype", "loc", "first", "done", "skip")

    def __init__(self, x, op, dtype, loc, first, skip=False):
        self.x, self.op, self.dtype, self.loc, self.first, self.done = x, op, dtype, loc, first, False
        self.skip = skip                       # masked off (mask= false when traced): the assignment issues nothing

    def _assign_to(self, dst, loc):
        if self.done:
            raise NkiValidationError("loop_reduce: this result was already assigned; assign nl.loop_reduce's result "
                                     "once", "loop_reduce", None, None, None, loc)
        self.done = True
        if self.skip:
            return
        core = current().core
        x = self.x
        if self.first:                         # the reduction starts: dst takes x (in dtype, if one is given)
            if self.dtype is not None and dtype_of(self.dtype) is not dst.dtype:
                x = _nl.copy(x, dtype=self.dtype)
            _isa.tensor_copy(core, self.loc, dst, resolve(x, None, self.loc, "loop_reduce", "x"))
            return
        if self.dtype is None or dtype_of(self.dtype) is dst.dtype:
            _nl._binary_into(dst, dst, self.x, self.op, self.loc)          # in place: one instruction
            return
        t = _fold_into(dst, self.x, self.op, self.dtype, self.loc)
        _isa.tensor_copy(current().core, self.loc, dst, t)

    def __getattr__(self, name):
        if name.startswith("_"):          # private probes (``getattr(v, "_inplace", False)``)
            raise AttributeError(name)
        raise NkiValidationError(
            "loop_reduce: its result must be assigned to the tile it accumulates into (acc[...] = nl.loop_reduce(x, "
            "op, loop_indices=[i])); it cannot be used as a value", "loop_reduce", None, name, None, self.loc)


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """Reduce ``x`` with ``op`` over the iterations of the loops ``loop_indices`` into the tile the result is
    assigned to: the first iteration sets it to ``x``, each later one folds ``x`` in (the destination is the left
    operand: ``b = nisa.tensor_tensor(b, a, op)``).  See the module docstring."""
    loc = caller_location()
    skip = False
    if mask is not None:
        if not isinstance(mask, (bool, np.bool_)):
            raise NotImplementedError("nl.loop_reduce with a mask= on index expressions is not supported by trnsim "
                                      "yet; index the operands (a mask decided when traced, True or False, is)")
        skip = not mask            # a condition on loop indices: this iteration folds nothing in
    x = _nl._operand(materialize(x, loc), loc)
    if not isinstance(x, Tensor):
        raise NkiValidationError(f"loop_reduce: x must be a tile, got {type(x).__name__}", "loop_reduce", "x",
                                 type(x).__name__, None, loc)
    first = _first_iteration(loop_indices, loc)
    kind, target = _assignment_target(sys._getframe(1))
    if kind == "subscript":
        return PendingLoopReduce(x, op, dtype, loc, first, skip=skip)
    if kind == "name":
        name, acc = target
        if skip and isinstance(acc, Tensor):
            return acc
        if first:
            return _nl.copy(x, dtype=dtype)
        if isinstance(acc, KeyError) or not isinstance(acc, Tensor):
            raise NkiValidationError(
                f"loop_reduce: the accumulator `{name}` holds no tile, and this is not the first iteration of "
                f"loop_indices={list(loop_indices) if isinstance(loop_indices, (list, tuple)) else loop_indices} "
                f"(which would start the reduction); the reduction reads it, so give it a tile first (e.g. {name} = "
                "nl.zeros(shape, dtype)) or name the loop's own index", "loop_reduce", name,
                None if isinstance(acc, KeyError) else type(acc).__name__, None, loc)
        if tuple(acc.shape) != tuple(x.shape) and not _nl._is_col(x, acc):
            raise NkiValidationError(f"loop_reduce: x has shape {list(x.shape)} but the accumulator `{name}` has "
                                     f"{list(acc.shape)}", "loop_reduce", "x", list(x.shape), list(acc.shape), loc)
        return _fold_into(acc, x, op, dtype, loc)
    raise NkiValidationError("loop_reduce: assign its result to the tile it accumulates into (b = "
                             "nl.loop_reduce(a, op, loop_indices=[i]) or acc[...] = nl.loop_reduce(...)); the "
                             "destination is also the reduction's left operand", "loop_reduce", None, None, None,
                             loc)


def _first_iteration(loop_indices, loc):
    """Whether every loop index is at its loop's first value (``nl.affine_range`` & co. yield indices that know;
    a plain int counts as first when it is 0)."""
    items = loop_indices if isinstance(loop_indices, (list, tuple)) else (loop_indices,)
    if not items:
        raise NkiValidationError("loop_reduce: loop_indices names no loop; give the index (or indices) of the "
                                 "loop(s) the reduction runs over", "loop_reduce", "loop_indices", loop_indices,
                                 None, loc)
    first = True
    for i in items:
        f = getattr(i, "first", None)
        if f is None:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise NkiValidationError(f"loop_reduce: loop_indices entries must be loop indices, got "
                                         f"{type(i).__name__} {i!r}", "loop_reduce", "loop_indices", i, None, loc)
            f = int(i) == 0
        first = first and f
    return first


def _axes(program_axes, grid, loc):
    items = program_axes if isinstance(program_axes, (list, tuple)) else (program_axes,)
    out = []
    for a in items:
        ax = getattr(a, "axis", None)          # nl.program_id(axis): that axis
        if ax is None:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
                raise NkiValidationError(f"all_reduce: program_axes entries must be grid axes (ints), got "
                                         f"{type(a).__name__} {a!r}", "all_reduce", "program_axes", a, None, loc)
            ax = int(a)
        if not 0 <= ax < len(grid):
            raise NkiValidationError(f"all_reduce: program axis {ax} is not an axis of the launch grid "
                                     f"{list(grid)} (axes 0 to {len(grid) - 1})", "all_reduce", "program_axes", ax,
                                     len(grid) - 1, loc)
        if ax not in out:
            out.append(ax)
    return tuple(out)


def _group(grid, me_ids, axes):
    """Linear indices of the programs that share ``me_ids`` except along ``axes`` (program-index order)."""
    out = []
    for vals in itertools.product(*(range(grid[a]) for a in axes)):
        ids = list(me_ids)
        for a, v in zip(axes, vals):
            ids[a] = v
        lin = 0
        for g, i in zip(grid, ids):
            lin = lin * g + i
        out.append(lin)
    return sorted(out)


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False, **kwargs):
    """``op`` over ``x`` of every program of the launch grid that differs from this one only along
    ``program_axes`` (axes, or ``nl.program_id(axis)`` values); each of them gets the result in a new SBUF tile.
    ``parallel_reduce`` and ``asynchronous`` select how the compiler schedules it; the result is the same, and
    trnsim's is complete when the call returns."""
    loc = caller_location()
    ctx = current()
    core = ctx.core
    x = _nl._operand(materialize(x, loc), loc)
    if not isinstance(x, Tensor) or not x.on_chip:
        raise NkiValidationError(f"all_reduce: x must be an on-chip tile, got {type(x).__name__}", "all_reduce", "x",
                                 type(x).__name__, None, loc)
    grid = tuple(ctx.grid)
    axes = _axes(program_axes, grid, loc)
    me = core.core_id
    group = _group(grid, program_ids(me, grid), axes)
    box = mask_box(mask, x.shape, loc, "all_reduce")
    out = _nl._new(x.shape, x.dtype if dtype is None else dtype, SBUF, "", loc)
    xr = resolve(x, box, loc, "all_reduce", "x")
    d = resolve(out, box, loc, "all_reduce", "dst")
    seq = getattr(ctx, "_all_reduce_seq", 0)
    ctx._all_reduce_seq = seq + 1                 # this program's own counter (ctx is the program's copy)
    ctx.mailbox[("all_reduce", seq, me)] = xr
    core.barrier(group, loc)
    peers = [ctx.mailbox.get(("all_reduce", seq, p)) for p in group]
    for p, v in zip(group, peers):
        if v is None or tuple(v.shape) != tuple(xr.shape) or v.dtype != xr.dtype:
            got = "nothing" if v is None else f"{v.dtype.name}{list(v.shape)}"
            raise NkiValidationError(f"all_reduce: program {p} contributes {got} but program {me} contributes "
                                     f"{xr.dtype.name}{list(xr.shape)}; every program of the group must reduce a "
                                     "tile of the same shape and dtype", "all_reduce", "x", got, list(xr.shape), loc)
    if not box_empty(box):
        n = len(group)
        gathered = _nl._new((xr.shape[0], n) + tuple(xr.shape[1:]), xr.dtype, SBUF, "", loc)
        for j, (p, v) in enumerate(zip(group, peers)):
            slot = gathered[:, j]
            if p == me:
                _isa.tensor_copy(core, loc, slot, v)
            else:
                _isa.dma_copy(core, loc, slot, v)         # from the peer's SBUF
        nd = gathered.ndim
        gv = gathered.permute((0,) + tuple(range(2, nd)) + (1,))    # the programs as the innermost axis
        _isa.tensor_reduce(core, loc, d, op, gv, (nd - 1,))
    core.barrier(group, loc)                      # nobody overwrites its x before every member has read it
    ctx.mailbox.pop(("all_reduce", seq, me), None)
    return out
