"""GpSimd Engine data-movement and search instructions: nonzero_with_count, sequence_bounds, local_gather,
nc_n_gather, tensor_partition_reduce and topk.

The GpSimd Engine is eight cores, each wired to 16 consecutive SBUF partitions (docs/hardware.md#per-neuroncore); several of
these instructions work per core.  Costs use the GpSimd formula of docs/hardware.md#instruction-cost-model (about 150 + N cycles, N
the elements per partition of the largest operand) unless the instruction's reference gives its own.
"""

from __future__ import annotations

import numpy as np

from ..memory import SBUF
from .common import as_f32, check_same_partitions, flag, free_size, number, part, read, require_space, write
from .errors import fail
from .gpsimd import gpsimd_cycles
from .vector import _check_bitvec, _resolve_alu

__all__ = ["nonzero_with_count", "sequence_bounds", "local_gather", "nc_n_gather", "tensor_partition_reduce", "topk"]

PARTITIONS_PER_GPSIMD_CORE = 16     # each GpSimd core is wired to 16 SBUF partitions (docs/hardware.md#per-neuroncore)


def _sbuf_operands(core, I, loc, *named):
    pmax = core.target.pmax
    out = []
    for name, t in named:
        require_space(I, name, t, (SBUF,), loc, "gpsimd")
        out.append(part(I, name, t, loc, pmax))
    return out


def _need_version(core, I, v, loc):
    if core.target.nc_version < v:
        fail(I, None, f"is not available on {core.target.name} (NeuronCore-v{v} and later)", core.target.name,
             f"NeuronCore-v{v}+", loc)


def _dtypes(I, name, t, allowed, loc):
    if t.dtype.name not in allowed:
        fail(I, name, f"(tensor `{t.name}`) has dtype {t.dtype.name}; expected {' or '.join(allowed)}",
             t.dtype.name, allowed, loc)


def nonzero_with_count(core, loc, dst, src, index_offset=0, padding_val=-1):
    """On partitions 0, 16, ..., 112 (each GpSimd core's first): the positions of the nonzero elements of
    ``src`` plus ``index_offset``, then ``padding_val`` up to the free size, then the count.  Other partitions
    of ``dst`` are left as they were (NKI reference: each core reads and writes its 0-th partition only)."""
    I = "nonzero_with_count"
    _need_version(core, I, 3, loc)
    (s0, p), (d0, _) = _sbuf_operands(core, I, loc, ("dst", dst), ("src", src))
    check_same_partitions(I, (("dst", dst), ("src", src)), loc)
    _dtypes(I, "src", src, ("float32", "int32"), loc)
    _dtypes(I, "dst", dst, ("int32",), loc)
    f = free_size(src)
    if free_size(dst) != f + 1:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; it must have one more than 'src' ({f + 1}) "
             "for the count", free_size(dst), f + 1, loc)
    i32 = (-2 ** 31, 2 ** 31 - 1)
    index_offset = number(I, "index_offset", index_offset, loc, integer=True, lo=i32[0], hi=i32[1])
    padding_val = number(I, "padding_val", padding_val, loc, integer=True, lo=i32[0], hi=i32[1])
    if index_offset + f - 1 > i32[1]:
        fail(I, "index_offset", f"{index_offset} plus the {f} positions overflows int32", index_offset, i32, loc)
    if core.execute:
        rows = [i for i in range(p) if (s0 + i) % PARTITIONS_PER_GPSIMD_CORE == 0]
        if rows:
            x = read(core, src, "src", I, loc).reshape(p, f)[rows]
            nz = x != 0                       # NaN counts as nonzero
            cnt = nz.sum(axis=1)
            # stable sort puts the nonzero positions first, in order
            order = np.argsort(~nz, axis=1, kind="stable")
            out = np.where(np.arange(f)[None, :] < cnt[:, None], order + index_offset, padding_val)
            cur = dst.np.reshape(p, f + 1).astype(np.int64)
            cur[rows, :f] = out
            cur[rows, f] = cnt
            write(core, dst, cur)
    core.record(I, "gpsimd", (dst,), (src,), gpsimd_cycles(core.target, f + 1), loc)


def sequence_bounds(core, loc, dst, segment_ids):
    """For each element of a [1, N] row of segment ids: the start and the end (exclusive) of its segment, as
    ``dst[0, 0, :]`` and ``dst[0, 1, :]``; id 0 marks padding, which gets start N and end -1 (NKI reference and
    its NumPy semantics)."""
    I = "sequence_bounds"
    _sbuf_operands(core, I, loc, ("dst", dst), ("segment_ids", segment_ids))
    for name, t in (("dst", dst), ("segment_ids", segment_ids)):
        _dtypes(I, name, t, ("float32", "int32"), loc)
        if t.shape[0] != 1:
            fail(I, name, f"(tensor `{t.name}`) has {t.shape[0]} partitions; the partition dimension must be 1",
                 t.shape[0], 1, loc)
    n = free_size(segment_ids)
    if free_size(dst) != 2 * n:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; it must hold [2, {n}] (start and end per "
             "element)", free_size(dst), 2 * n, loc)
    if core.execute:
        s = read(core, segment_ids, "segment_ids", I, loc).reshape(n).astype(np.float64)
        idx = np.arange(n)
        new_seg = np.ones(n, dtype=bool)
        new_seg[1:] = s[1:] != s[:-1]
        start = np.maximum.accumulate(np.where(new_seg, idx, 0))
        end_seg = np.ones(n, dtype=bool)
        end_seg[:-1] = s[:-1] != s[1:]
        end = np.minimum.accumulate(np.where(end_seg, idx + 1, n)[::-1])[::-1]
        pad = s == 0
        out = np.stack([np.where(pad, n, start), np.where(pad, -1, end)])
        write(core, dst, out.reshape(dst.shape).astype(np.float64 if dst.dtype.is_float else np.int64))
    core.record(I, "gpsimd", (dst,), (segment_ids,), gpsimd_cycles(core.target, 2 * n), loc)


_ELEM_PER_IDX = (1, 2, 4, 8, 16, 32)
_MAX_INDICES_PER_CORE = 4096


def local_gather(core, loc, dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None):
    """Per GpSimd core (16 partitions): flatten the core's slice of ``index`` partition-first, keep the first
    ``num_valid_indices``, and for each partition of the core gather ``num_elem_per_idx`` consecutive elements
    of ``src_buffer``'s (flattened) free dimension starting at each index: ``dst[p, j, e] = src[p, idx[j] + e]``
    (the NKI reference's NumPy semantics).  No dtype conversion."""
    I = "local_gather"
    (s0, p), _, _ = _sbuf_operands(core, I, loc, ("src_buffer", src_buffer), ("index", index), ("dst", dst))
    check_same_partitions(I, (("src_buffer", src_buffer), ("index", index), ("dst", dst)), loc)
    if p % PARTITIONS_PER_GPSIMD_CORE:
        fail(I, "src_buffer", f"has {p} partitions; local_gather needs a multiple of 16 (whole GpSimd cores)", p,
             "16k", loc)
    _dtypes(I, "index", index, ("uint16",), loc)
    if dst.dtype != src_buffer.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src_buffer' has {src_buffer.dtype.name}; local_gather "
             "does not convert", dst.dtype.name, src_buffer.dtype.name, loc)
    k = number(I, "num_elem_per_idx", num_elem_per_idx, loc, integer=True)
    if k not in _ELEM_PER_IDX:
        fail(I, "num_elem_per_idx", f"is {k}; allowed: {_ELEM_PER_IDX}", k, _ELEM_PER_IDX, loc)
    per_core = PARTITIONS_PER_GPSIMD_CORE * free_size(index)
    nv = per_core if num_valid_indices is None else number(I, "num_valid_indices", num_valid_indices, loc,
                                                             integer=True, lo=1, hi=per_core)
    if nv > _MAX_INDICES_PER_CORE:
        fail(I, "num_valid_indices", f"is {nv}; at most {_MAX_INDICES_PER_CORE} indices per GpSimd core", nv,
             _MAX_INDICES_PER_CORE, loc)
    fs = free_size(src_buffer)
    if free_size(dst) != nv * k:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; {nv} indices x {k} elements gives "
             f"{nv * k}", free_size(dst), nv * k, loc)
    if core.execute:
        src = read(core, src_buffer, "src_buffer", I, loc).reshape(p, fs)
        ix = read(core, index, "index", I, loc).reshape(p, -1).astype(np.int64)
        out = np.empty((p, nv, k), dtype=src.dtype)
        for c in range(p // PARTITIONS_PER_GPSIMD_CORE):
            r0 = c * PARTITIONS_PER_GPSIMD_CORE
            idx = ix[r0:r0 + PARTITIONS_PER_GPSIMD_CORE].flatten(order="F")[:nv]
            pos = idx[:, None] + np.arange(k)[None, :]
            if pos.size and (pos.min() < 0 or pos.max() >= fs):
                bad = int(pos.max())
                fail(I, "index", f"reaches element {bad} of 'src_buffer', which has {fs} per partition (the "
                     "hardware's behaviour out of bounds is undefined)", bad, fs, loc)
            out[r0:r0 + PARTITIONS_PER_GPSIMD_CORE] = src[r0:r0 + PARTITIONS_PER_GPSIMD_CORE][:, pos]
        write(core, dst, out.reshape(dst.shape))
    core.record(I, "gpsimd", (dst,), (src_buffer, index), gpsimd_cycles(core.target, nv * k), loc)


def nc_n_gather(core, loc, dst, data, indices):
    """Per partition: ``dst[p, j] = data_flat[p, indices[p, j]]`` (free dimensions of ``data`` flattened)."""
    I = "nc_n_gather"
    _sbuf_operands(core, I, loc, ("dst", dst), ("data", data), ("indices", indices))
    check_same_partitions(I, (("dst", dst), ("data", data), ("indices", indices)), loc)
    _dtypes(I, "indices", indices, ("uint32",), loc)
    if dst.dtype != data.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'data' has {data.dtype.name}; they must match",
             dst.dtype.name, data.dtype.name, loc)
    n = free_size(indices)
    if free_size(dst) != n:
        fail(I, "dst", f"has {free_size(dst)} elements per partition but 'indices' has {n}; they must match",
             free_size(dst), n, loc)
    p, fd = data.shape[0], free_size(data)
    if core.execute:
        ix = read(core, indices, "indices", I, loc).reshape(p, n).astype(np.int64)
        if ix.size and (ix.min() < 0 or ix.max() >= fd):
            fail(I, "indices", f"holds index {int(ix.max())}; 'data' has {fd} elements per partition (indices must "
                 f"be in [0, {fd}))", int(ix.max()), fd, loc)
        x = read(core, data, "data", I, loc).reshape(p, fd)
        write(core, dst, np.take_along_axis(x, ix, axis=1).reshape(dst.shape))
    # the reference: n = ceil(elements per partition / 512) underlying instructions
    core.record(I, "gpsimd", (dst,), (data, indices), gpsimd_cycles(core.target, max(n, fd)), loc)


_PARTITION_REDUCE_OPS = ("add", "maximum", "average", "mean", "bitwise_or", "bitwise_and", "bitwise_xor")


def tensor_partition_reduce(core, loc, dst, op, data):
    """``dst[0, ...] = op over the partitions of data[:, ...]`` (fp32 math for arithmetic operators, the integer
    bits for bitwise ones; ``average``/``mean`` divide the sum by the partition count)."""
    I = "tensor_partition_reduce"
    _sbuf_operands(core, I, loc, ("dst", dst), ("data", data))
    if getattr(op, "_trnsim_op", None) in ("average", "mean") or (isinstance(op, str) and op in ("average", "mean")):
        name, bitvec = "average", False
    else:
        name, _, bitvec = _resolve_alu(I, "op", op, loc)
    if name not in _PARTITION_REDUCE_OPS:
        fail(I, "op", f"{name!r} cannot reduce across partitions; allowed: add, average, maximum, bitwise_or, "
             "bitwise_and, bitwise_xor", name, _PARTITION_REDUCE_OPS, loc)
    if bitvec:
        _check_bitvec(I, name, loc, ("dst", dst), ("data", data))
    for nm, t in (("dst", dst), ("data", data)):
        if t.ndim > 5:
            fail(I, nm, f"(tensor `{t.name}`) has rank {t.ndim}; at most four free dimensions", t.ndim, 5, loc)
    if dst.shape[0] != 1:
        fail(I, "dst", f"has {dst.shape[0]} partitions; the reduction across partitions writes 1", dst.shape[0], 1,
             loc)
    f = free_size(data)
    if free_size(dst) != f:
        fail(I, "dst", f"has {free_size(dst)} elements per partition but 'data' has {f}; they must match",
             free_size(dst), f, loc)
    p = data.shape[0]
    if core.execute:
        x = read(core, data, "data", I, loc).reshape(p, f)
        if bitvec:
            uf = {"bitwise_or": np.bitwise_or, "bitwise_and": np.bitwise_and, "bitwise_xor": np.bitwise_xor}[name]
            r = uf.reduce(x, axis=0)
        else:
            x = as_f32(x)
            if name == "maximum":
                r = x.max(axis=0)
            else:
                r = np.add.reduce(x, axis=0, dtype=np.float32)
                if name == "average":
                    r = r / np.float32(p)
        write(core, dst, np.asarray(r).reshape(dst.shape))
    # assumption: the GpSimd formula with N = elements per partition times the 16 partitions a core reads
    core.record(I, "gpsimd", (dst,), (data,), gpsimd_cycles(core.target, f * min(p, PARTITIONS_PER_GPSIMD_CORE)),
                loc)


TOPK_N_RANGE = (8, 65535)       # NKI reference, nki.isa.topk constraints: 8 <= n < 65536
TOPK_K_MAX = 32767              # NKI reference, nki.isa.topk constraints: 1 <= K < 32768, K <= n


def topk(core, loc, val_dst, idx_dst, src, n, sorted=False):
    """The K largest of ``n`` bf16 values per group of 16 partitions (one GpSimd core each).

    The NKI reference lays a group's data out as a "snake": element ``s`` of the group sits at partition
    ``s % 16``, free position ``s // 16``; only the first ``n`` elements take part.  K is the free size of
    ``val_dst``; result ``j`` goes to partition ``j % 16``, free position ``j // 16`` of the group in ``val_dst``
    (the value, bf16) and ``idx_dst`` (its snake index, uint32); other positions are left as they were.
    trnsim writes the results in descending order (ties: lower index first) whether or not ``sorted`` is set:
    the reference leaves the order of an unsorted result unspecified, so kernels must not depend on it.
    Cost: ``4 * n + K`` GpSimd cycles (the reference's estimate)."""
    I = "topk"
    (s0, p), (v0, _), (i0, _) = _sbuf_operands(core, I, loc, ("src", src), ("val_dst", val_dst),
                                               ("idx_dst", idx_dst))
    check_same_partitions(I, (("src", src), ("val_dst", val_dst), ("idx_dst", idx_dst)), loc)
    _dtypes(I, "src", src, ("bfloat16",), loc)
    _dtypes(I, "val_dst", val_dst, ("bfloat16",), loc)
    _dtypes(I, "idx_dst", idx_dst, ("uint32",), loc)
    if p % PARTITIONS_PER_GPSIMD_CORE:
        fail(I, "src", f"has {p} partitions; topk works on groups of {PARTITIONS_PER_GPSIMD_CORE} partitions (a "
             "multiple of 16)", p, "multiple of 16", loc)
    n = number(I, "n", n, loc, integer=True, lo=TOPK_N_RANGE[0], hi=TOPK_N_RANGE[1])
    k = free_size(val_dst)
    if free_size(idx_dst) != k:
        fail(I, "idx_dst", f"has {free_size(idx_dst)} elements per partition but 'val_dst' has {k}; they must match",
             free_size(idx_dst), k, loc)
    if not 1 <= k <= min(TOPK_K_MAX, n):
        fail(I, "val_dst", f"asks for K = {k} results (its free size); K must be in [1, min({TOPK_K_MAX}, n = {n})]",
             k, min(TOPK_K_MAX, n), loc)
    cols = -(-n // PARTITIONS_PER_GPSIMD_CORE)
    f = free_size(src)
    if f < cols:
        fail(I, "src", f"has {f} elements per partition; n = {n} needs ceil(n / 16) = {cols}", f, cols, loc)
    sorted = flag(I, "sorted", sorted, loc)
    if core.execute:
        g = p // PARTITIONS_PER_GPSIMD_CORE
        x = as_f32(read(core, src, "src", I, loc)).reshape(g, PARTITIONS_PER_GPSIMD_CORE, f)
        snake = x[:, :, :cols].transpose(0, 2, 1).reshape(g, -1)[:, :n]           # [group, s]
        order = np.argsort(-snake, axis=1, kind="stable")[:, :k]
        vals = np.take_along_axis(snake, order, axis=1)
        # positions past the K results keep their contents (read raw: they are not operands of the instruction)
        vv = as_f32(val_dst.np).reshape(g, PARTITIONS_PER_GPSIMD_CORE, k).copy()
        ii = idx_dst.np.reshape(g, PARTITIONS_PER_GPSIMD_CORE, k).astype(np.int64)
        j = np.arange(k)
        vv[:, j % PARTITIONS_PER_GPSIMD_CORE, j // PARTITIONS_PER_GPSIMD_CORE] = vals
        ii[:, j % PARTITIONS_PER_GPSIMD_CORE, j // PARTITIONS_PER_GPSIMD_CORE] = order
        write(core, val_dst, vv.reshape(val_dst.shape))
        write(core, idx_dst, ii.reshape(idx_dst.shape))
    # NKI reference, nki.isa.topk, "Estimated instruction cost": 4*n + K GpSimd cycles per partition
    core.record(I, "gpsimd", (val_dst, idx_dst), (src,), float(4 * n + k), loc)
