"""Copies at a dynamic offset: tensor_copy_dynamic_src and tensor_copy_dynamic_dst (legacy NKI).

The offset is a value held in SBUF (a one-element tile) that the engine reads before it moves data: the source
(``_src``) or the destination (``_dst``) of the copy starts at that offset within each partition.  The front end
resolves the offset (trnsim runs kernels eagerly, so the value is known when the instruction is issued) and passes
the placed view together with the offset tiles it read; the instruction records those tiles as read, so it waits
for whatever wrote them.  Numerics are tensor_copy's (engines compute in fp32 and round to dst's dtype).
"""

from __future__ import annotations

from ..memory import PSUM, SBUF, Tensor
from .common import check_free_match, check_same_partitions, free_size, pick_engine, require_space
from .errors import fail
from .vector import _copy_values, _onchip_operands

__all__ = ["tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "dynamic_copy_cycles"]


def dynamic_copy_cycles(target, n):
    """Engine cycles of a copy at a dynamic offset moving ``n`` elements per partition: max(MIN_II_DYNAMIC, N),
    MIN_II_DYNAMIC being ``target.dynamic_offset_cycles`` (about 600: docs/hardware.md "Instruction cost model"; the
    NKI ISA cost notes of tensor_copy_dynamic_src/_dst)."""
    return float(max(target.dynamic_offset_cycles, n))


def _check_offsets(core, instr, offsets, loc):
    offsets = tuple(offsets or ())
    for i, t in enumerate(offsets):
        name = f"offsets[{i}]"
        require_space(instr, name, t, (SBUF,), loc)
        if t.size != 1:
            fail(instr, name, f"(tensor `{t.name}`) has shape {list(t.shape)}; a dynamic offset is one value in "
                 "SBUF", list(t.shape), [1, 1], loc)
    return offsets


def _dynamic_copy(core, loc, I, dst, src, offsets, engine):
    eng = pick_engine(I, engine, "vector", ("vector", "scalar", "gpsimd"), loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("src", src))
    if eng == "gpsimd":
        for name, t in (("dst", dst), ("src", src)):
            if t.buf.kind == PSUM:
                fail(I, name, f"(tensor `{t.name}`) is in PSUM, which the GpSimd engine cannot access; use the "
                     "vector or scalar engine", t.buf.kind, SBUF, loc)
    check_same_partitions(I, (("dst", dst), ("src", src)), loc)
    check_free_match(I, (("dst", dst), ("src", src)), loc)
    if (dst.dtype.packed or src.dtype.packed) and dst.dtype != src.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src' has {src.dtype.name}; packed MX data is copied only "
             "to the same dtype", dst.dtype.name, src.dtype.name, loc)
    offsets = _check_offsets(core, I, offsets, loc)
    core.compute(_copy_values, core, loc, dst, src)
    core.record(I, eng, (dst,), (src,) + offsets, dynamic_copy_cycles(core.target, free_size(src)), loc)


def tensor_copy_dynamic_src(core, loc, dst: Tensor, src: Tensor, offsets=(), engine=None):
    """dst = src, with ``src`` placed at a dynamic offset (read from the one-element SBUF tiles ``offsets``)
    within each partition.  Same operand rules as tensor_copy (on-chip operands, same partitions and elements per
    partition; GpSimd cannot reach PSUM); cost max(MIN_II_DYNAMIC, N) engine cycles, N = elements per partition."""
    _dynamic_copy(core, loc, "tensor_copy_dynamic_src", dst, src, offsets, engine)


def tensor_copy_dynamic_dst(core, loc, dst: Tensor, src: Tensor, offsets=(), engine=None):
    """dst = src, with ``dst`` placed at a dynamic offset (read from ``offsets``) within each partition; rules and
    cost as :func:`tensor_copy_dynamic_src`."""
    _dynamic_copy(core, loc, "tensor_copy_dynamic_dst", dst, src, offsets, engine)
