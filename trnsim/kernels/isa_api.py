"""``nki.isa`` (v2): destination-first instruction calls, issued to the current kernel's NeuronCore."""

from __future__ import annotations

import enum
import functools
import warnings
from sys import _getframe

import numpy as np

from .. import isa as _isa
from ..isa.errors import _USER, NkiValidationError, caller_location
from ..memory import Tensor, dtype_of
from ..memory.tensor import GatheredView
from . import issue_cache as _ic
from .context import _local
from .context import current
from .stubs import install_unsupported

__all__ = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine",
           "NkiValidationError", "get_nc_version", "get_nc_sub_version"] + list(_isa.INSTRUCTIONS)


class engine(enum.Enum):
    tensor = 1
    vector = 5
    scalar = 2
    gpsimd = 3
    dma = 4
    sync = 6
    unknown = 0


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class reduce_cmd(enum.Enum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.Enum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):
    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):
    """NeuronCore generations; ordered (``nisa.get_nc_version() >= nc_version.gen3``), as kernels compare them."""
    gen2 = 2
    gen3 = 3
    gen4 = 4

    def _cmp(self, other, op):
        if not isinstance(other, nc_version):
            return NotImplemented
        return op(self.value, other.value)

    def __lt__(self, other):
        return self._cmp(other, int.__lt__)

    def __le__(self, other):
        return self._cmp(other, int.__le__)

    def __gt__(self, other):
        return self._cmp(other, int.__gt__)

    def __ge__(self, other):
        return self._cmp(other, int.__ge__)


class dma_engine(enum.Enum):
    dma = 1
    gpsimd_dma = 2


def get_nc_version():
    """The NeuronCore generation of the simulated target (gen2 = trn1, gen3 = trn2, gen4 = trn3)."""
    from ..targets import get_target
    try:
        tg = current().core.target
    except RuntimeError:
        tg = get_target()
    return nc_version(tg.nc_version)


def get_nc_sub_version():
    return 0


# call sites of kernel source: id(code) + bytecode offset -> the list ``[(filename, line), instruction function,
# site function, calls, code]`` (its second to fourth for the issue cache: issue_cache.KEY_AFTER).  One lookup per
# call: a code object holds its bytecode inline (CPython 3.11+), so the offsets of a live code object's
# instructions stay inside its own memory and the sums of two live ones never meet; the entry keeps its code object
# alive and is taken only when it names that very object (the last entry), so another code object at a sum once
# used gets its own.  caller_location's memo says which files are kernel source.  A code object's line table is
# fixed, so the line of an offset is too; reading it from the table (``frame.f_lineno``) costs ~0.25 us a call.
_LOCS: dict = {}
_LOCS_MAX = 1 << 16


def _user_site(f, co):
    """The call site of frame ``f`` (running ``co``) if its file is kernel source (memoised per (code, offset)),
    else ``[caller_location(), None, None, 0, None]`` (which walks out of trnsim), made anew at every call."""
    fn = co.co_filename
    if not _USER.get(fn):
        return [caller_location(), None, None, 0, None]
    site = [(fn, f.f_lineno), None, None, 0, co]
    if len(_LOCS) >= _LOCS_MAX:
        _LOCS.clear()
    _LOCS[id(co) + f.f_lasti] = site
    return site


def _wrap(fn):
    issue = _ic.issue
    hbm_off = _ic.keeps_hbm_offsets(fn)

    @functools.wraps(fn, assigned=("__name__", "__qualname__"))
    def call(*args, name=None, **kwargs):
        # the hot path of every kernel instruction: the context read inline (current() raises when there is none)
        try:
            core = _local.ctx.core
        except AttributeError:
            core = current().core
        # the caller's line: memoised per code object and offset when the calling frame is kernel source (its
        # memo says so), else caller_location itself (which walks out of trnsim from here)
        f = _getframe(1)
        co = f.f_code
        site = _LOCS.get(id(co) + f.f_lasti)
        if site is None or site[4] is not co:
            site = _user_site(f, co)
        if not core.issue_cache_on:
            return fn(core, site[0], *args, **kwargs)
        # the site's replay of a cached layout (issue_cache.KEY_AFTER), else the cache's loop
        sf = site[2]
        if sf and site[1] is fn and sf(core, site[0], args, kwargs):
            return None
        return issue(fn, core, site[0], args, kwargs, hbm_off, site)    # checked once per operand layout
    call.__doc__ = fn.__doc__
    call.__module__ = __name__
    return call


for _n, _f in _isa.INSTRUCTIONS.items():
    globals()[_n] = _wrap(_f)
del _n, _f

_DMA_COPY = _isa.INSTRUCTIONS["dma_copy"]
_TENSOR_COPY = globals()["tensor_copy"]


def tensor_copy(dst, src, *args, dtype=None, **kwargs):
    """``nisa.tensor_copy``.  ``dtype=``, which the beta-2 tutorials still pass, is not part of the instruction:
    ``dst``'s dtype decides the conversion.  A ``dtype`` that differs from it is not applied, and trnsim says so with
    a warning at the kernel's line (AWS's matrix multiplication tutorial copies into a float32 tile with
    ``dtype=bfloat16`` and converts when it stores)."""
    if dtype is not None and isinstance(dst, Tensor) and dtype_of(dtype) != dst.dtype:
        f, line = caller_location()
        warnings.warn_explicit(f"nisa.tensor_copy: dtype={dtype_of(dtype).name} is not applied; the copy converts to "
                               f"dst `{dst.name}`'s dtype {dst.dtype.name} (allocate dst with the dtype you want)",
                               UserWarning, f, line)
    return _TENSOR_COPY(dst, src, *args, **kwargs)


def dma_copy(dst, src, *args, name=None, **kwargs):
    """``nisa.dma_copy``; a side given as ``ap(vector_offset=...)`` with indices that are not evenly spaced (a
    gather or scatter, :class:`GatheredView`) is copied one row per index, each row paired with the same row
    (first-dimension step) of the other side."""
    if not isinstance(dst, GatheredView) and not isinstance(src, GatheredView):
        try:                # (two tensor views, the usual case: their slots read without getattr's default)
            inside = dst._bad is None and src._bad is None
        except AttributeError:
            inside = getattr(dst, "_bad", None) is None and getattr(src, "_bad", None) is None
        if inside or getattr(kwargs.get("oob_mode"), "name", kwargs.get("oob_mode")) != "skip":
            # the wrapped dma_copy's body (_wrap's call), inline: one call less on every DMA of a kernel
            try:
                core = _local.ctx.core
            except AttributeError:
                core = current().core
            f = _getframe(1)
            co = f.f_code
            site = _LOCS.get(id(co) + f.f_lasti)
            if site is None or site[4] is not co:
                site = _user_site(f, co)
            if not core.issue_cache_on:
                return _DMA_COPY(core, site[0], dst, src, *args, **kwargs)
            args = (dst, src) + args
            sf = site[2]
            if sf and site[1] is _DMA_COPY and sf(core, site[0], args, kwargs):
                return None
            return _ic.issue(_DMA_COPY, core, site[0], args, kwargs, False, site)
        return _dma_copy_skip_oob(dst, src, *args, **kwargs)
    loc = caller_location()
    core = current().core
    g = dst if isinstance(dst, GatheredView) else src
    n = len(g.rows)
    for what, side in (("dst", dst), ("src", src)):
        if isinstance(side, GatheredView):
            if len(side.rows) != n:
                raise NkiValidationError(f"dma_copy: dst and src gather {len(dst.rows)} and {len(src.rows)} rows",
                                         "dma_copy", what, len(side.rows), n, loc)
        elif not isinstance(side, Tensor) or not side.shape or side.shape[0] != n:
            raise NkiValidationError(
                f"dma_copy: {what} must have {n} rows in its first dimension, one per vector_offset index, got "
                f"{list(side.shape) if isinstance(side, Tensor) else type(side).__name__}", "dma_copy", what,
                getattr(side, "shape", None), n, loc)
    skip = getattr(kwargs.get("oob_mode"), "name", kwargs.get("oob_mode")) == "skip"
    first = None
    for b in range(n):
        d = dst.rows[b] if isinstance(dst, GatheredView) else dst[b:b + 1]
        s_ = src.rows[b] if isinstance(src, GatheredView) else src[b:b + 1]
        bad = d if isinstance(d, Exception) else s_ if isinstance(s_, Exception) else None
        if bad is not None:
            if skip:                     # oob_mode=skip: the DMA engine drops the out-of-range descriptor
                continue
            raise bad
        # one DMA instruction: its descriptor generation (swdge when dge_mode is unknown: the only mode for an
        # indirect gather/scatter, docs/hardware.md nki-dge) is charged once, on the first row moved (isa/dma_dge.py)
        first = b if first is None else first
        _isa.dma_copy(core, loc, d, s_, *args, _piece=(b - first, n), **kwargs)


def _dma_copy_skip_oob(dst, src, *args, **kwargs):
    """``dma_copy(oob_mode=skip)`` where a side is an access pattern reaching outside its tensor (formed by
    ``ap()``, e.g. with a ``scalar_offset`` past the last expert): the DMA engine drops the out-of-range
    descriptors.  Modelled as one descriptor per step of the first dimension when both sides have the same first
    dimension (as for a gathered view); a side wholly out of range drops the whole copy."""
    loc = caller_location()
    core = current().core
    bad = [t for t in (dst, src) if t._bad is not None]
    if all(_wholly_outside(t) for t in bad):
        return None
    if not dst.shape or not src.shape or dst.shape[0] != src.shape[0]:
        raise NkiValidationError(
            f"dma_copy(oob_mode=skip): a side reaches partly outside its tensor ({bad[0]._bad}); trnsim drops "
            f"out-of-range rows only when dst and src have the same first dimension, got {list(dst.shape)} and "
            f"{list(src.shape)}", "dma_copy", "dst" if dst._bad is not None else "src", None, None, loc)
    for b in range(dst.shape[0]):
        d, s_ = dst[b:b + 1], src[b:b + 1]
        if d._bad is not None or s_._bad is not None:
            continue
        _isa.dma_copy(core, loc, d, s_, *args, **kwargs)
    return None


def _wholly_outside(t):
    lo, hi = t._extent()
    return hi <= 0 or lo >= t._limit()


def core_barrier(data, cores, engine=None, name=None):
    """``nisa.core_barrier(data, cores)``: every program (logical core) of ``cores`` waits here until all of them
    arrive; ``data`` (the shared tensor being synchronised) counts as written by the barrier, so later accesses wait
    for it and accesses on either side of it are ordered (no race).  ``cores`` is a core id or a sequence of ids,
    each a program of this launch (``kernel[2]`` has cores 0 and 1); ``engine`` defaults to GpSimd."""
    loc = caller_location()
    ctx = current()
    ids = (cores,) if isinstance(cores, (int, np.integer)) else cores
    try:
        ids = [int(c) for c in ids]
    except (TypeError, ValueError):
        raise NkiValidationError(f"core_barrier: cores={cores!r} is not a core id or a sequence of core ids",
                                 "core_barrier", "cores", cores, None, loc) from None
    nprog = len(ctx.cores)
    bad = [c for c in ids if not 0 <= c < nprog]
    if not ids or bad:
        raise NkiValidationError(f"core_barrier: cores={list(ids)} must name programs of this launch, 0 to "
                                 f"{nprog - 1} ({nprog} program(s))", "core_barrier", "cores", list(ids),
                                 nprog - 1, loc)
    if data is not None and not isinstance(data, Tensor):
        raise NkiValidationError(f"core_barrier: data must be a tensor, got {type(data).__name__}",
                                 "core_barrier", "data", type(data).__name__, None, loc)
    eng = getattr(engine, "name", engine)
    eng = eng if eng in ("tensor", "vector", "scalar", "gpsimd") else "gpsimd"   # default and unknown: GpSimd
    ctx.core.barrier(ids, loc, data=data, engine=eng)


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=None, name=None):
    """``nisa.sendrecv``: this program (logical core) sends ``src`` to program ``send_to_rank`` and receives into
    ``dst`` what program ``recv_from_rank`` sends it on the same ``pipe_id``.  Modelled as a barrier of the programs
    involved (both sides have posted their buffers), a DMA from the peer's ``src`` into ``dst``, and a second barrier
    (the peer may not overwrite its ``src`` before it was read).  Shapes and dtypes of the pair must agree."""
    loc = caller_location()
    ctx = current()
    nprog = len(ctx.cores)
    me = ctx.core.core_id
    for what, r in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 0 <= int(r) < nprog or int(r) == me:
            raise NkiValidationError(f"sendrecv: {what}={r!r} must be another program of this launch (0 to "
                                     f"{nprog - 1}, not this program {me})", "sendrecv", what, r, nprog - 1, loc)
    for what, t in (("src", src), ("dst", dst)):
        if not isinstance(t, Tensor):
            raise NkiValidationError(f"sendrecv: {what} must be a tensor, got {type(t).__name__}", "sendrecv",
                                     what, type(t).__name__, None, loc)
    to, frm = int(send_to_rank), int(recv_from_rank)
    ctx._sendrecv_seq = dict(ctx._sendrecv_seq)          # this program's own counters
    n_send = ctx._sendrecv_seq.get(("send", pipe_id, to), 0)
    n_recv = ctx._sendrecv_seq.get(("recv", pipe_id, frm), 0)
    ctx._sendrecv_seq[("send", pipe_id, to)] = n_send + 1
    ctx._sendrecv_seq[("recv", pipe_id, frm)] = n_recv + 1
    ctx.mailbox[(pipe_id, me, to, n_send)] = src
    group = sorted({me, to, frm})
    ctx.core.barrier(group, loc)
    peer_src = ctx.mailbox.pop((pipe_id, frm, me, n_recv), None)
    if peer_src is None:
        raise NkiValidationError(f"sendrecv: program {frm} sent nothing to program {me} on pipe {pipe_id} "
                                 f"(message {n_recv}): the two sides' send_to_rank / recv_from_rank do not pair",
                                 "sendrecv", "recv_from_rank", frm, None, loc)
    if tuple(peer_src.shape) != tuple(dst.shape) or peer_src.dtype != dst.dtype:
        raise NkiValidationError(f"sendrecv: program {frm} sends {peer_src.dtype.name}{list(peer_src.shape)} but "
                                 f"dst is {dst.dtype.name}{list(dst.shape)}", "sendrecv", "dst",
                                 tuple(dst.shape), tuple(peer_src.shape), loc)
    _isa.dma_copy(ctx.core, loc, dst, peer_src)
    ctx.core.barrier(group, loc)


class Register:
    """A scalar register of the core (``nisa.register_alloc``): holds one integer, usable as a loop bound
    (``nl.dynamic_range(0, reg)``), an ``ap(scalar_offset=reg)`` or wherever an int goes (``__index__``).
    trnsim runs kernels eagerly, so the value is known when it is used; register moves are not timed."""

    __slots__ = ("value",)

    def __init__(self, value=0):
        self.value = int(value)

    def __index__(self):
        # the value taken as an int (a loop bound or condition, an offset): on hardware known only at runtime, so
        # the compiler cannot move instructions across this point (a fence for the capacity check, capacity.py)
        ctx = getattr(_local, "ctx", None)
        if ctx is not None:
            ctx.core.occupancy.fence(caller_location(), "a register read at runtime (a loop bound, condition or "
                                     "offset)")
        return self.value

    __int__ = __index__

    def __bool__(self):
        # ``while reg:`` / ``if reg:`` test the value (nonzero), as the NKI VirtualRegister reference's bare
        # ``while reg:`` loop does (Neuron 2.32).  Without this, Python takes any object as true and such a loop
        # never stops on its register.
        return self.__index__() != 0

    def __repr__(self):
        return f"Register({self.value})"


def _int_value(x, what, loc):
    if isinstance(x, Register):
        return x.value
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise NkiValidationError(f"{what} must be an int or a register, got {type(x).__name__}", what.split(":")[0],
                                 what.split(": ")[-1], type(x).__name__, None, loc)
    return int(x)


def register_alloc(x=None):
    """A new register, holding ``x`` or 0: ``x`` is an int, another register (its value) or a one-element tensor
    (its value, read as :func:`register_load` reads it; NKI's register_alloc reference, Neuron 2.29, lists the
    tensor form, and nki-library's moe_tkg kernels allocate a register from an SBUF element)."""
    loc = caller_location()
    if isinstance(x, Tensor):
        reg = Register(0)
        _load_into(reg, x, "register_alloc: x", loc)
        return reg
    return Register(0 if x is None else _int_value(x, "register_alloc: x", loc))


def register_move(dst, src):
    """``dst`` register takes ``src`` (an int or a register)."""
    loc = caller_location()
    if not isinstance(dst, Register):
        raise NkiValidationError(f"register_move: dst must be a register, got {type(dst).__name__}",
                                 "register_move", "dst", type(dst).__name__, None, loc)
    dst.value = _int_value(src, "register_move: src", loc)


def _one_element(t, what, loc):
    if not isinstance(t, Tensor) or t.size != 1:
        raise NkiValidationError(f"{what}: expected a one-element tensor, got "
                                 f"{list(t.shape) if isinstance(t, Tensor) else type(t).__name__}",
                                 what.split(":")[0], what.split(": ")[-1], getattr(t, "shape", None), 1, loc)


def register_load(dst, src):
    """``dst`` register takes the integer value of the one-element tensor ``src``."""
    loc = caller_location()
    if not isinstance(dst, Register):
        raise NkiValidationError(f"register_load: dst must be a register, got {type(dst).__name__}",
                                 "register_load", "dst", type(dst).__name__, None, loc)
    _load_into(dst, src, "register_load: src", loc)


def _load_into(reg, src, what, loc):
    _one_element(src, what, loc)
    if src.buf.data is None:
        raise NotImplementedError(f"{what.split(':')[0]}: a shape-only run does not compute the tensor's value")
    reg.value = int(np.asarray(src.np).reshape(-1)[0])


def register_store(dst, src):
    """The one-element tensor ``dst`` takes the register's (or int's) value."""
    loc = caller_location()
    _one_element(dst, "register_store: dst", loc)
    _isa.memset(current().core, loc, dst, _int_value(src, "register_store: src", loc))


install_unsupported(globals(), "nki.isa", tuple(n for n in (
    "nc_matmul_mx", "tensor_partition_reduce", "tensor_scalar_cumulative", "activate2", "local_gather",
    "nc_n_gather", "rng", "dropout", "set_rng_seed", "rand_set_state", "rand_get_state", "rand2",
    "sequence_bounds", "dma_compute", "quantize_mx", "nonzero_with_count", "topk") if n not in _isa.INSTRUCTIONS))
