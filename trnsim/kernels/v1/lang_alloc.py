"""Buffers and allocation: ``nl.sbuf`` & co., ``par_dim``, ``ndarray`` / ``zeros`` / ``full`` / ``*_like``,
direct allocation placements (``ncc.sbuf.mod_alloc`` & co.), ``shared_constant`` and ``ds``.

Part of ``neuronxcc.nki.language`` (:mod:`trnsim.kernels.v1.language`, which re-exports every name defined here).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ... import isa as _isa
from ...isa.errors import NkiValidationError, caller_location
from ...machine.capacity import modulo_placement
from ...memory import HBM, PSUM, SBUF, DynSlice, dtype_of
from .. import language as _v2
from ..context import current
from .tile import Tile, as_tile, materialize, partition_views


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
