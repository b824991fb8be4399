"""GpSimd Engine instructions: iota, affine_select, and the top-8 family (max8, nc_find_index8,
nc_match_replace8), plus the Vector Engine's nc_stream_shuffle."""

from __future__ import annotations

import numpy as np

from ..memory import SBUF
from .common import as_f32, free_size, part, read, require_space, write
from .errors import fail
from .ops import alu
from .vector import _onchip_operands

__all__ = ["iota", "affine_select", "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle",
           "gpsimd_cycles"]


def gpsimd_cycles(target, n):
    """About 150 + N cycles (shared/hardware.md, GpSimd instructions)."""
    return float(target.gpsimd_fixed_cycles + n)


def _pattern_values(I, pattern, offset, channel_multiplier, p, f, loc):
    pat = [list(e) for e in pattern]
    if len(pat) > 4:
        fail(I, "pattern", f"has {len(pat)} entries; at most 4 [step, count] pairs", len(pat), 4, loc)
    counts = [int(n) for _, n in pat]
    if int(np.prod(counts)) != f:
        fail(I, "pattern", f"covers {int(np.prod(counts))} elements per partition but 'dst' has {f}",
             int(np.prod(counts)), f, loc)
    v = np.full((p,) + tuple(counts), int(offset), dtype=np.int64)
    v += (np.arange(p, dtype=np.int64) * int(channel_multiplier)).reshape((p,) + (1,) * len(counts))
    for i, (step, n) in enumerate(pat):
        shape = [1] * (len(counts) + 1)
        shape[i + 1] = int(n)
        v += (np.arange(int(n), dtype=np.int64) * int(step)).reshape(shape)
    return v.reshape(p, f)


def iota(core, loc, dst, pattern, offset=0, channel_multiplier=0):
    """dst[c, i...] = offset + c*channel_multiplier + sum(step_k * i_k)."""
    I = "iota"
    require_space(I, "dst", dst, (SBUF,), loc, "gpsimd")
    part(I, "dst", dst, loc, core.target.pmax)
    p, f = dst.shape[0], free_size(dst)
    v = _pattern_values(I, pattern, offset, channel_multiplier, p, f, loc)
    if core.execute:
        write(core, dst, v.astype(np.float64) if dst.dtype.is_float else v)
    core.record(I, "gpsimd", (dst,), (), gpsimd_cycles(core.target, f), loc)


def affine_select(core, loc, dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op="equal",
                  offset=0):
    """dst = on_true_tile where cmp_op(affine(c, i...), 0) else on_false_value."""
    I = "affine_select"
    require_space(I, "dst", dst, (SBUF,), loc, "gpsimd")
    require_space(I, "on_true_tile", on_true_tile, (SBUF,), loc, "gpsimd")
    part(I, "dst", dst, loc, core.target.pmax)
    part(I, "on_true_tile", on_true_tile, loc, core.target.pmax)
    p, f = dst.shape[0], free_size(dst)
    if on_true_tile.shape[0] != p or free_size(on_true_tile) != f:
        fail(I, "on_true_tile", f"has shape {list(on_true_tile.shape)}; expected {p} partitions x {f} elements",
             list(on_true_tile.shape), [p, f], loc)
    try:
        _, cmp, _ = alu(cmp_op)
    except KeyError as e:
        fail(I, "cmp_op", f"{e.args[0]!r} is not a comparison operator", e.args[0], None, loc)
    v = _pattern_values(I, pattern, offset, channel_multiplier, p, f, loc)
    if core.execute:
        pred = cmp(v.astype(np.float64), np.float64(0)) != 0
        t = as_f32(read(core, on_true_tile, "on_true_tile", I, loc)).reshape(p, f)
        write(core, dst, np.where(pred, t, np.float32(on_false_value)))
    core.record(I, "gpsimd", (dst,), (on_true_tile,), gpsimd_cycles(core.target, f), loc)


def max8(core, loc, dst, src):
    """The 8 largest values of each partition, in descending order."""
    I = "max8"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("src", src))
    p = src.shape[0]
    f = free_size(src)
    if free_size(dst) != 8:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; max8 writes 8", free_size(dst), 8, loc)
    if f < 8 or f > 16384:
        fail(I, "src", f"has {f} elements per partition; max8 needs 8 to 16384", f, (8, 16384), loc)
    if core.execute:
        x = as_f32(read(core, src, "src", I, loc)).reshape(p, f)
        write(core, dst, -np.sort(-x, axis=1)[:, :8])
    core.record(I, "vector", (dst,), (src,), max(float(core.target.min_ii_cycles), float(f)), loc)


def nc_find_index8(core, loc, dst, data, vals):
    """For each of the 8 values per partition in ``vals``, the index of its first occurrence in ``data``."""
    I = "nc_find_index8"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("data", data), ("vals", vals))
    p, f = data.shape[0], free_size(data)
    if free_size(vals) != 8 or free_size(dst) != 8:
        fail(I, "vals", "and 'dst' must hold 8 elements per partition", free_size(vals), 8, loc)
    if dst.dtype.name not in ("uint32", "int32", "uint16", "int16"):
        fail(I, "dst", f"has dtype {dst.dtype.name}; indices are written as uint32", dst.dtype.name, "uint32", loc)
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(p, f)
        v = as_f32(read(core, vals, "vals", I, loc)).reshape(p, 8)
        eq = x[:, None, :] == v[:, :, None]
        idx = np.where(eq.any(axis=2), eq.argmax(axis=2), np.iinfo(np.uint32).max if dst.dtype.name == "uint32"
                       else -1)
        write(core, dst, idx)
    core.record(I, "vector", (dst,), (data, vals), max(float(core.target.min_ii_cycles), float(f)), loc)


def nc_match_replace8(core, loc, dst, data, vals, imm, dst_idx=None):
    """Copy ``data`` to ``dst`` with the first occurrence of each of the 8 ``vals`` replaced by ``imm``."""
    I = "nc_match_replace8"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("data", data), ("vals", vals))
    p, f = data.shape[0], free_size(data)
    if free_size(dst) != f:
        fail(I, "dst", f"has {free_size(dst)} elements per partition but 'data' has {f}", free_size(dst), f, loc)
    writes = (dst,) if dst_idx is None else (dst, dst_idx)
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(p, f).copy()
        v = as_f32(read(core, vals, "vals", I, loc)).reshape(p, 8)
        idx = np.zeros((p, 8), dtype=np.int64)
        for j in range(8):
            hit = x == v[:, j:j + 1]
            first = hit.argmax(axis=1)
            found = hit[np.arange(p), first]
            x[np.arange(p)[found], first[found]] = np.float32(imm)
            idx[:, j] = np.where(found, first, -1)
        write(core, dst, x)
        if dst_idx is not None:
            write(core, dst_idx, idx)
    core.record(I, "vector", writes, (data, vals), max(float(core.target.min_ii_cycles), float(f)), loc)


def nc_stream_shuffle(core, loc, dst, src, shuffle_mask):
    """Within each 32-partition quadrant: dst[q*32+i] = src[q*32+mask[i]]; mask value 255 leaves dst row i."""
    I = "nc_stream_shuffle"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("src", src))
    mask = [int(m) for m in shuffle_mask]
    if len(mask) != 32:
        fail(I, "shuffle_mask", f"has {len(mask)} entries; it must have exactly 32", len(mask), 32, loc)
    for m in mask:
        if not (0 <= m < 32 or m == 255):
            fail(I, "shuffle_mask", f"entry {m} is not a partition index 0..31 (or 255 to skip)", m, (0, 31), loc)
    if dst.dtype != src.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src' has {src.dtype.name}", dst.dtype.name,
             src.dtype.name, loc)
    if free_size(dst) != free_size(src):
        fail(I, "dst", "and 'src' must have the same elements per partition", free_size(dst), free_size(src), loc)
    if core.execute:
        ps, pd = src.shape[0], dst.shape[0]
        s = read(core, src, "src", I, loc).reshape(ps, -1).copy()
        d = dst.np.reshape(pd, -1).copy()
        for i in range(pd):
            q, r = divmod(i, 32)
            m = mask[r]
            if m != 255 and q * 32 + m < ps:
                d[i] = s[q * 32 + m]
        write(core, dst, d)
    core.record(I, "vector", (dst,), (src,), max(float(core.target.min_ii_cycles), float(free_size(src))), loc)
