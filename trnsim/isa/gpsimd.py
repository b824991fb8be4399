"""GpSimd Engine instructions: iota, affine_select, and the top-8 family (max8, nc_find_index8,
nc_match_replace8), plus the Vector Engine's nc_stream_shuffle."""

from __future__ import annotations

import numpy as np

from ..memory import SBUF
from .common import as_f32, check_same_partitions, free_size, number, part, read, require_space, write
from .errors import fail
from .vector import _onchip_operands, _resolve_arith

__all__ = ["iota", "affine_select", "max8", "nc_find_index8", "nc_match_replace8", "nc_stream_shuffle",
           "gpsimd_cycles"]


def gpsimd_cycles(target, n):
    """About 150 + N cycles (docs/hardware.md#instruction-cost-model, GpSimd instructions)."""
    return float(target.gpsimd_fixed_cycles + n)


def _pattern(I, pattern, loc):
    """``[[step, count], ...]``: 1 to 4 pairs of integers, counts >= 1."""
    if not isinstance(pattern, (list, tuple)) or not 1 <= len(pattern) <= 4:
        fail(I, "pattern", f"must be a list of 1 to 4 [step, count] pairs, got {pattern!r}"[:200], pattern,
             "1..4 pairs", loc)
    out = []
    for e in pattern:
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            fail(I, "pattern", f"entry {e!r} is not a [step, count] pair", e, "[step, count]", loc)
        step = number(I, "pattern", e[0], loc, integer=True, lo=-2 ** 31, hi=2 ** 31 - 1)
        cnt = number(I, "pattern", e[1], loc, integer=True, lo=1, hi=2 ** 31 - 1)
        out.append((step, cnt))
    return out


def _pattern_values(I, pattern, offset, channel_multiplier, p, f, loc, dst=None):
    pat = _pattern(I, pattern, loc)
    offset = number(I, "offset", offset, loc, integer=True, lo=-2 ** 31, hi=2 ** 32 - 1)
    channel_multiplier = number(I, "channel_multiplier", channel_multiplier, loc, integer=True, lo=-2 ** 31,
                                hi=2 ** 31 - 1)
    counts = [n for _, n in pat]
    if int(np.prod(counts)) != f:
        fail(I, "pattern", f"covers {int(np.prod(counts))} elements per partition but 'dst' has {f}",
             int(np.prod(counts)), f, loc)
    if dst is not None and not dst.dtype.is_float:
        # the affine values' range, found from the pattern without touching the elements
        lo = hi = offset
        for step, n in [(channel_multiplier, p)] + pat:
            lo += min(0, step * (n - 1))
            hi += max(0, step * (n - 1))
        if lo < dst.dtype.min or hi > dst.dtype.max:
            fail(I, "dst", f"has dtype {dst.dtype.name}, which cannot hold the generated values [{lo}, {hi}]",
                 (lo, hi), (dst.dtype.min, dst.dtype.max), loc)
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
    v = _pattern_values(I, pattern, offset, channel_multiplier, p, f, loc, dst)
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
    _, cmp, _ = _resolve_arith(I, "cmp_op", cmp_op, loc)
    on_false_value = number(I, "on_false_value", on_false_value, loc)
    v = _pattern_values(I, pattern, offset, channel_multiplier, p, f, loc)
    if core.execute:
        pred = cmp(v.astype(np.float64), np.float64(0)) != 0
        t = as_f32(read(core, on_true_tile, "on_true_tile", I, loc)).reshape(p, f)
        write(core, dst, np.where(pred, t, np.float32(on_false_value)))
    core.record(I, "gpsimd", (dst,), (on_true_tile,), gpsimd_cycles(core.target, f), loc)


_TOP8_MIN, _TOP8_MAX = 8, 16384     # elements per partition read by max8 / nc_find_index8 (NKI reference)


def _top8_source(I, name, t, loc):
    if t.ndim > 3:
        fail(I, name, f"(tensor `{t.name}`) has rank {t.ndim}; at most 3 dimensions", t.ndim, 3, loc)
    f = free_size(t)
    if not _TOP8_MIN <= f <= _TOP8_MAX:
        fail(I, name, f"(tensor `{t.name}`) has {f} elements per partition; it must have {_TOP8_MIN} to "
             f"{_TOP8_MAX}", f, (_TOP8_MIN, _TOP8_MAX), loc)
    return f


def _eight(I, name, t, loc):
    if free_size(t) != 8:
        fail(I, name, f"(tensor `{t.name}`) has {free_size(t)} elements per partition; it must have exactly 8",
             free_size(t), 8, loc)


def max8(core, loc, dst, src):
    """The 8 largest values of each partition (read as fp32), in descending order."""
    I = "max8"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("src", src))
    check_same_partitions(I, (("dst", dst), ("src", src)), loc)
    _eight(I, "dst", dst, loc)
    f = _top8_source(I, "src", src, loc)
    p = src.shape[0]
    if core.execute:
        x = as_f32(read(core, src, "src", I, loc)).reshape(p, f)
        write(core, dst, -np.sort(-x, axis=1)[:, :8])
    core.record(I, "vector", (dst,), (src,), max(float(core.target.min_ii_cycles), float(f)), loc)


def _occurrence_rank(v):
    """For each of the 8 values per partition, how many earlier slots hold the same value."""
    eq = v[:, :, None] == v[:, None, :]                        # [p, j, i]
    return np.tril(eq, k=-1).sum(axis=2)                       # i < j


def _nth_match(x, v, rank):
    """Index of the ``rank``-th (0-based) occurrence of each value ``v[:, j]`` in ``x`` per partition, or -1."""
    eq = x[:, None, :] == v[:, :, None]                        # [p, 8, f]
    cum = np.cumsum(eq, axis=2)
    hit = eq & (cum == (rank[:, :, None] + 1))
    found = hit.any(axis=2)
    return np.where(found, hit.argmax(axis=2), -1)


def nc_find_index8(core, loc, dst, data, vals):
    """For each of the 8 values per partition in ``vals``, the index of its first occurrence in ``data``
    (a value listed twice gets its first and its second occurrence: duplicates pair with ascending positions);
    a value not found gives the all-ones sentinel of the uint16/uint32 output."""
    I = "nc_find_index8"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("data", data), ("vals", vals))
    check_same_partitions(I, (("dst", dst), ("data", data), ("vals", vals)), loc)
    _eight(I, "vals", vals, loc)
    _eight(I, "dst", dst, loc)
    f = _top8_source(I, "data", data, loc)
    if vals.ndim > 3:
        fail(I, "vals", f"(tensor `{vals.name}`) has rank {vals.ndim}; at most 3 dimensions", vals.ndim, 3, loc)
    if dst.dtype.name not in ("uint32", "uint16"):
        fail(I, "dst", f"has dtype {dst.dtype.name}; indices are written as uint32 or uint16", dst.dtype.name,
             ("uint32", "uint16"), loc)
    p = data.shape[0]
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(p, f)
        v = as_f32(read(core, vals, "vals", I, loc)).reshape(p, 8)
        idx = _nth_match(x, v, _occurrence_rank(v))
        write(core, dst, np.where(idx < 0, dst.dtype.max, idx))
    core.record(I, "vector", (dst,), (data, vals), max(float(core.target.min_ii_cycles), float(f)), loc)


def nc_match_replace8(core, loc, dst, data, vals, imm, dst_idx=None):
    """Copy ``data`` to ``dst`` with the first occurrence of each of the 8 ``vals`` replaced by ``imm``.  The
    values are matched in reverse order (slot 7 first), so of duplicate values the highest slot takes the first
    position; ``dst_idx`` receives each slot's matched position."""
    I = "nc_match_replace8"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("data", data), ("vals", vals))
    named = [("dst", dst), ("data", data), ("vals", vals)]
    if dst_idx is not None:
        _onchip_operands(core, I, "vector", loc, ("dst_idx", dst_idx))
        _eight(I, "dst_idx", dst_idx, loc)
        named.append(("dst_idx", dst_idx))
        if dst_idx.dtype.is_float or dst_idx.dtype.is_bool:
            fail(I, "dst_idx", f"has dtype {dst_idx.dtype.name}; indices are written as an integer dtype",
                 dst_idx.dtype.name, "uint32", loc)
    check_same_partitions(I, named, loc)
    _eight(I, "vals", vals, loc)
    f = _top8_source(I, "data", data, loc)
    if free_size(dst) != f:
        fail(I, "dst", f"has {free_size(dst)} elements per partition but 'data' has {f}", free_size(dst), f, loc)
    imm = number(I, "imm", imm, loc)
    p = data.shape[0]
    writes = (dst,) if dst_idx is None else (dst, dst_idx)
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(p, f).copy()
        v = as_f32(read(core, vals, "vals", I, loc)).reshape(p, 8)
        idx = np.full((p, 8), -1, dtype=np.int64)
        rows = np.arange(p)
        taken = np.zeros(x.shape, dtype=bool)
        for j in range(7, -1, -1):
            hit = (x == v[:, j:j + 1]) & ~taken
            first = hit.argmax(axis=1)
            found = hit[rows, first]
            taken[rows[found], first[found]] = True
            idx[:, j] = np.where(found, first, -1)
        x[taken] = np.float32(imm)
        write(core, dst, x)
        if dst_idx is not None:
            write(core, dst_idx, np.where(idx < 0, dst_idx.dtype.max, idx))
    core.record(I, "vector", writes, (data, vals), max(float(core.target.min_ii_cycles), float(f)), loc)


def nc_stream_shuffle(core, loc, dst, src, shuffle_mask):
    """Within each 32-partition quadrant: dst[q*32+i] = src[q*32+mask[i]]; mask value 255 leaves dst row i."""
    I = "nc_stream_shuffle"
    _onchip_operands(core, I, "vector", loc, ("dst", dst), ("src", src))
    if not isinstance(shuffle_mask, (list, tuple)):
        fail(I, "shuffle_mask", f"must be a list of 32 integers, got {type(shuffle_mask).__name__}", shuffle_mask,
             32, loc)
    mask = [number(I, "shuffle_mask", m, loc, integer=True) for m in shuffle_mask]
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
