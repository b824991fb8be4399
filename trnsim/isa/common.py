"""Operand rules shared by instructions, and the read/write of operand data with the hardware's numerics.

Every instruction function in this package has the signature ``fn(core, loc, ...)``: ``core`` is the machine
executing it (anything with ``target``, ``execute``, ``precise``, ``strict``, ``record(...)`` and
``compute(values_fn, *args)``, which runs ``values_fn(*args)`` when the core computes values), ``loc`` the
``(file, line)`` of the user's call.  The ISA imports no machine code.

An instruction that computes its values through ``core.compute`` (rather than testing ``core.execute`` itself)
keeps its numerics apart from its rules and cost, so the kernel front end can check a repeated operand layout once
(``trnsim/kernels/issue_cache.py``).
"""

from __future__ import annotations

import numpy as np

from ..memory import PSUM, SBUF, Tensor
from ..memory.dtypes import _bf16_round, round_to
from ..memory.tensor import _ROW_MAJOR       # Tensor.whole's strides (a view with them is a whole buffer)
from .errors import NkiValidationError, fail

__all__ = ["ENGINES", "pick_engine", "require_space", "part", "one_partition", "partitions_of", "free_size", "check_same_partitions",
           "check_free_match", "read", "write", "scalar_or_vector", "as_f32", "number", "flag", "int_tuple"]

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync", "dma")


def engine_name(engine) -> str | None:
    if engine is None:
        return None
    n = getattr(engine, "name", engine)
    n = str(n).lower()
    if n.endswith("_engine"):
        n = n[:-7]
    return None if n in ("unknown", "") else n


def pick_engine(instr, engine, default, allowed, loc):
    e = engine_name(engine)
    if e is None:
        return default
    if e not in allowed:
        fail(instr, "engine", f"cannot run on the {e} engine; allowed: {', '.join(allowed)}", e, allowed, loc)
    return e


def require_space(instr, name, t, spaces, loc, engine=None):
    if not isinstance(t, Tensor):
        fail(instr, name, f"must be a tensor, got {type(t).__name__} {t!r}", t, None, loc)
    kind = t.buf.kind
    if kind not in spaces:
        want = " or ".join(spaces)
        fail(instr, name, f"(tensor `{t.name}`) is in {kind.upper()}; expected in {want.upper()}"
             + (f" for the {engine} engine" if engine else ""), kind, spaces, loc)
    if engine == "gpsimd" and kind == PSUM:
        fail(instr, name, f"(tensor `{t.name}`) is in PSUM; the GpSimd engine cannot access PSUM", kind,
             (SBUF,), loc)


def part(instr, name, t, loc, pmax):
    """``(start_partition, num_partitions)`` of an on-chip operand, enforcing the partition rules."""
    if not t.shape:
        # every index given as an integer (``t[0, 0]``, as nki-library's kernels write a one-element operand):
        # one element on one partition
        return t.offset // t.buf.pfree, 1
    if t.size == 0 or t.buf.nelem == 0:
        fail(instr, name, f"(tensor `{t.name}`) has shape {list(t.shape)}, no elements; an instruction operand "
             "needs at least one element in every dimension", list(t.shape), ">= 1", loc)
    info = t.partition_info()
    if info is None and one_partition(t):
        info = (t.extent()[0] // t.buf.pfree, 1, 1)
    if info is None:
        fail(instr, name, f"(tensor `{t.name}`) has a first dimension that does not map to partitions "
             f"(pattern {t.get_pattern()}, {t.buf.pfree} elements per partition)", t.get_pattern(), None, loc)
    start, n, step = info
    if n > pmax:
        fail(instr, name, f"(tensor `{t.name}`) spans {n} partitions, exceeds maximum {pmax}", n, pmax, loc)
    if step != 1 and n > 1:
        fail(instr, name, f"(tensor `{t.name}`) has partition step {step}; partitions must be consecutive",
             step, 1, loc)
    if start + n > t.buf.partitions:
        fail(instr, name, f"(tensor `{t.name}`) partitions [{start}, {start + n}) exceed its buffer's "
             f"{t.buf.partitions}", start + n, t.buf.partitions, loc)
    # start-partition rule: >64 partitions start at 0; 33..64 at 0 or 64; <=32 at a multiple of 32
    if n > 64:
        ok = start == 0
        rule = "0"
    elif n > 32:
        ok = start in (0, 64)
        rule = "0 or 64"
    else:
        ok = start % 32 == 0 or start + n <= ((start // 32) + 1) * 32
        rule = "a multiple of 32 (or stay within one 32-partition quadrant)"
    if not ok:
        fail(instr, name, f"(tensor `{t.name}`) of {n} partitions starts at partition {start}; a tile of "
             f"{n} partitions must start at {rule}", start, rule, loc)
    return start, n


def one_partition(t: Tensor) -> bool:
    """Whether on-chip view ``t`` is a one-partition operand although its first dimension does not map to
    partitions: every element it reaches lies on a single partition, so the hardware accesses that partition alone
    with the view's whole pattern along the free dimension.  An integer index on the partition dimension of a kernel's
    tile already gives a ``[1, ...]`` view (``NkiTensor.__getitem__``, trnsim/kernels/tensor.py); this covers the
    other ways to form such a view: an access pattern within one partition (``t.ap([[1, F]], offset=k * F)``), a
    plain :class:`~trnsim.memory.Tensor` indexed with NumPy's rule (``t[k, :]`` drops the partition dimension, its
    first dimension then steps by elements, not partitions).  Such an operand counts as 1 partition of ``t.size``
    elements (:func:`part`, :func:`free_size`, :func:`check_same_partitions`; instructions that read ``shape[0]``
    themselves see its first dimension).  A view reaching several partitions through a dimension other than its
    first still does not map, and is refused."""
    shape = t.shape
    if not shape or shape[0] == 1 or t.buf.kind not in (SBUF, PSUM):
        return False
    pf = t.buf.pfree
    if not pf:
        return False
    if t._rv is None and t.strides[0] % pf == 0:
        return False                 # (the usual case) the first dimension steps over whole partitions
    if t.partition_info() is not None:
        return False
    lo, hi = t.extent()              # buffer elements, as pfree counts them
    return hi > lo and lo // pf == (hi - 1) // pf


def partitions_of(t: Tensor) -> int:
    """How many partitions operand ``t`` spans in the instruction's view: its first dimension, 1 for a 0-d view
    or a one-partition view (:func:`one_partition`)."""
    if not t.shape:
        return 1
    return 1 if one_partition(t) else t.shape[0]


def number(instr, name, v, loc, integer=False, finite=False, lo=None, hi=None):
    """A compile-time immediate given as a Python/NumPy number: returned as ``int`` (``integer``) or ``float``.
    Strings, ``None``, tensors, NaN (where an integer or a finite value is needed) and values outside
    ``[lo, hi]`` are refused."""
    if isinstance(v, (bool, np.bool_)):
        v = int(v)
    elif isinstance(v, np.generic) and not isinstance(v, (np.integer, np.floating)) and \
            np.dtype(type(v)).name in ("bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu"):
        v = float(v)               # an ml_dtypes scalar (a kernel's ``nl.bfloat16(x)`` or a dtype's finfo.min)
    if not isinstance(v, (int, float, np.integer, np.floating)) and not (isinstance(v, np.ndarray) and v.ndim == 0
                                                                          and v.dtype.kind in "iuf"):
        fail(instr, name, f"must be a number, got {type(v).__name__} {_short(v)}", v, None, loc)
    if isinstance(v, np.ndarray):
        v = v.item()
    if integer:
        if isinstance(v, (float, np.floating)):
            if not np.isfinite(v) or v != int(v):
                fail(instr, name, f"must be an integer, got {v!r}", v, "integer", loc)
        v = int(v)
    else:
        v = float(v) if abs(v) <= 1e300 or not isinstance(v, int) else float("inf") * (1 if v > 0 else -1)
        if finite and not np.isfinite(v):
            fail(instr, name, f"must be a finite number, got {v!r}", v, "finite", loc)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        fail(instr, name, f"is {v!r}, outside the allowed range [{lo}, {hi}]", v, (lo, hi), loc)
    return v


def flag(instr, name, v, loc):
    """A boolean option (``True``/``False``/``0``/``1``; ``None`` counts as False)."""
    if v is None:
        return False
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    fail(instr, name, f"must be True or False, got {type(v).__name__} {_short(v)}", v, (True, False), loc)


def _short(v):
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def int_tuple(instr, name, v, loc, length=None):
    """A tuple of Python integers (``tile_position``, ``axes``, ...)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        v = (v,)
    if not isinstance(v, (tuple, list)):
        fail(instr, name, f"must be a tuple of integers, got {type(v).__name__} {_short(v)}", v, None, loc)
    out = tuple(number(instr, name, x, loc, integer=True) for x in v)
    if length is not None and len(out) != length:
        fail(instr, name, f"has {len(out)} entries; expected {length}", len(out), length, loc)
    return out


def free_size(t: Tensor) -> int:
    """Elements per partition of operand ``t``: all but its first dimension (all of a one-partition view,
    :func:`one_partition`)."""
    n = 1
    for s in t.shape[1:]:
        n *= s
    if n != t.size and one_partition(t):
        return t.size
    return n


def check_same_partitions(instr, names_tensors, loc):
    first = None
    for name, t in names_tensors:
        p = partitions_of(t)
        if first is None:
            first = (name, p)
        elif p != first[1]:
            fail(instr, name, f"has {p} partitions but '{first[0]}' has {first[1]}; they must match", p,
                 first[1], loc)


def check_free_match(instr, names_tensors, loc):
    first = None
    for name, t in names_tensors:
        f = free_size(t)
        if first is None:
            first = (name, f)
        elif f != first[1]:
            fail(instr, name, f"has {f} elements per partition but '{first[0]}' has {first[1]}; they must match",
                 f, first[1], loc)


def read(core, t: Tensor, name="operand", instr="", loc=None):
    """The operand's values (float32 for float dtypes, native for integers); a never-written read is an error
    in strict mode."""
    if core.strict:
        w = t.written_view()
        if w is not None and not t.buf.all_written and not w.all():
            bad = ~np.asarray(w, dtype=bool)
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise NkiValidationError(
                f"{instr}: operand '{name}' reads tensor `{t.name}` ({t.buf.kind}) memory that was never "
                f"written: {int(bad.sum())} of {bad.size} elements of its {list(t.shape)} view, the first at "
                f"index {list(first)}", instr, name, None, None, loc)
    return t.np


def as_f32(a):
    if a.dtype == np.float32:
        return a
    return a.astype(np.float32)


def _whole(t: Tensor) -> bool:
    """Whether a write through ``t`` stores every element of its buffer exactly once and the buffer's sentinel
    fill is still pending (``Buffer.fresh``): a plain row-major view of the whole buffer."""
    buf = t.buf
    if not buf.fresh or t._rv is not None or t.offset or t.dtype is not buf.dtype:
        return False
    shape = t.shape
    if shape is buf.shape and t.strides is _ROW_MAJOR.get(shape):
        return True                  # Tensor.whole's view (the buffer's own shape and row-major strides)
    return t.size == buf.nelem and t.is_contiguous()


def write(core, t: Tensor, values):
    """Store float32/integer ``values`` into ``t`` rounded to its dtype (round to nearest even for floats)."""
    if t.buf.fresh and _whole(t):      # the attribute first: most writes go to buffers already filled
        # every element is stored: the new buffer's sentinel fill is not needed (unless the write fails)
        t.buf.claim_whole()
        try:
            return _write(core, t, values)
        except BaseException:
            t.buf.unclaim()
            raise
    return _write(core, t, values)


def _write(core, t: Tensor, values):
    dst = t.np if t._rv is None else t.np_for_write()     # (every element of the view is stored below)
    v = values if isinstance(values, np.ndarray) else np.asarray(values)
    if v.shape != dst.shape:
        v = v.reshape(dst.shape) if v.size == dst.size else np.broadcast_to(v, dst.shape)
    dt = t.dtype
    if dt.is_float:
        if v.dtype != np.float32:
            v = v.astype(np.float32)
        if dt._round is not None and core.precise:
            if (dt._round is _bf16_round and dst.dtype == np.float32 and dst.flags.c_contiguous
                    and not np.may_share_memory(v, dst)):
                # bf16 stored as float32: rounded straight into the storage (the same values, no temporary)
                _bf16_round(v, out=dst)
                _written(t)
                return
            v = dt._round(v)
    else:
        v = round_to(dt, v)
    np.copyto(dst, v, casting="unsafe")
    _written(t)


def _written(t: Tensor):
    """After a write into ``t.np``: a converting view stores back, a tracked buffer marks the elements."""
    if t._rv is not None:
        t.store_back()               # a view converting between dtypes (bit reinterpretation) writes through
    if t.buf.written is not None:
        mark_written(t)


def write_same_dtype(core, t: Tensor, values):
    """Store values that already are of ``t``'s dtype (a copy between tensors of one dtype): no rounding."""
    if t.buf.fresh and _whole(t):
        t.buf.claim_whole()          # every element is stored: no sentinel fill first (as in ``write``)
        try:
            return _write_same_dtype(t, values)
        except BaseException:
            t.buf.unclaim()
            raise
    return _write_same_dtype(t, values)


def _write_same_dtype(t: Tensor, values):
    dst = t.np if t._rv is None else t.np_for_write()
    if values.shape != dst.shape:
        values = values.reshape(dst.shape)
    np.copyto(dst, values, casting="unsafe")
    if t._rv is not None:
        t.store_back()
    if t.buf.written is not None:
        mark_written(t)


def mark_written(t: Tensor):
    buf = t.buf
    w = buf.written
    if w is not None and not buf.all_written:
        t.mark_written()
        if t.size == buf.nelem and w.all():
            # every element written: later writes need no marking and reads no check (``all_written``)
            buf.all_written = True


def scalar_or_vector(instr, name, v, p, loc, optional=False):
    """An immediate float, or a ``[P, 1]`` on-chip tensor broadcast along the free dims: returns a float or a
    ``(P, 1)`` float32 array (in shape-only mode the tensor's shape is still checked)."""
    if v is None:
        if optional:
            return None
        fail(instr, name, "is required: a number or a [P, 1] tensor, got None", None, None, loc)
    if isinstance(v, Tensor):
        if not v.shape or v.size == 0:
            fail(instr, name, f"(tensor `{v.name}`) has shape {list(v.shape)}; a per-partition operand must be "
                 f"[{p}, 1]", list(v.shape), [p, 1], loc)
        if not v.on_chip:
            fail(instr, name, f"(tensor `{v.name}`) is in {v.buf.kind.upper()}; a per-partition operand must be "
                 "in SBUF or PSUM", v.buf.kind, (SBUF, PSUM), loc)
        if (v.shape[0] if v.shape else 1) != p or free_size(v) != 1:
            fail(instr, name, f"(tensor `{v.name}`) has shape {list(v.shape)}; a per-partition operand must be "
                 f"[{p}, 1]", list(v.shape), [p, 1], loc)
        return v
    if isinstance(v, (int, float, np.integer, np.floating, bool, np.bool_)):
        return float(v) if not (isinstance(v, int) and abs(v) > 1e300) else float("inf") * (1 if v > 0 else -1)
    if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iufb":
        return float(v)
    fail(instr, name, f"must be a number or a [P, 1] tensor, got {type(v).__name__} {_short(v)}", v, None, loc)


def operand_value(core, v):
    if isinstance(v, Tensor):
        return as_f32(v.np).reshape(v.shape[0] if v.shape else 1, 1)
    return np.float32(v)

