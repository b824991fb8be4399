"""Tensor Engine instructions: nc_matmul and nc_transpose (on the PE array or the Vector Engine)."""

from __future__ import annotations

import numpy as np

from ..memory import PSUM, SBUF
from .common import (_whole, as_f32, flag, free_size, int_tuple, mark_written, part, pick_engine, read, require_space,
                     write)
from .errors import fail

__all__ = ["nc_matmul", "nc_transpose", "matmul_cycles", "stationary_load_cycles", "MATMUL_DTYPES",
           "psum_accumulate", "matmul_f32"]

MATMUL_DTYPES = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn", "bfloat16", "float16", "tfloat32", "float32")
_FP8 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")
_FP32ISH = ("float32", "tfloat32")


def stationary_load_cycles(target, n_stationary, fp32):
    """PE cycles to load a stationary tile: the min(64, N_stationary) term of the matmul cost (docs/hardware.md#instruction-cost-model:
    loading is up to 4x faster than a multiply of its size); the scheduler overlaps it with the previous multiply
    and skips it when the same stationary tile is reused."""
    cyc = float(min(64, n_stationary))
    return cyc * target.fp32_matmul_slowdown if fp32 else cyc


def matmul_cycles(target, k_rows, n_stationary, n_moving, fp32):
    """PE cycles of one matmul: max(min(64, N_stationary), N_moving), 4x for fp32 operands
    (docs/hardware.md#instruction-cost-model).  The stationary load overlaps the previous multiply."""
    cyc = float(max(min(64, n_stationary), n_moving))
    if fp32:
        cyc *= target.fp32_matmul_slowdown
    return cyc


def _given(x):
    """A tiling argument that was passed (``()`` and ``None`` mean "not given")."""
    return x is not None and not (isinstance(x, (tuple, list)) and len(x) == 0)


def _psum_bank_check(I, dst, target, loc):
    """A matmul output must stay inside one PSUM bank of every partition it writes."""
    bank = target.psum_bank_bytes
    pf = dst.buf.pfree
    isz = dst.buf.dtype.itemsize
    first = dst.offset % pf
    last = first + sum((s - 1) * st for s, st in zip(dst.shape[1:], dst.strides[1:]) if st > 0)
    start_byte = dst.buf.addr + first * isz
    end_byte = dst.buf.addr + (last + 1) * isz
    if start_byte // bank != (end_byte - 1) // bank:
        fail(I, "dst", f"(tensor `{dst.name}`) covers PSUM bytes [{start_byte}, {end_byte}) of each partition, "
             f"crossing a {bank}-byte PSUM bank boundary; a matmul output must fit one bank",
             (start_byte, end_byte), bank, loc)


def nc_matmul(core, loc, dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=None):
    """dst[M, N] (PSUM) (+)= stationary[K, M].T @ moving[K, N], fp32 accumulation."""
    I = "nc_matmul"
    tg = core.target
    is_transpose = flag(I, "is_transpose", is_transpose, loc)
    flag(I, "is_stationary_onezero", is_stationary_onezero, loc)
    flag(I, "is_moving_onezero", is_moving_onezero, loc)
    require_space(I, "stationary", stationary, (SBUF,), loc, "tensor")
    require_space(I, "moving", moving, (SBUF,), loc, "tensor")
    require_space(I, "dst", dst, (PSUM,), loc, "tensor")
    for name, t in (("stationary", stationary), ("moving", moving)):
        if t.dtype.name not in MATMUL_DTYPES:
            fail(I, name, f"has dtype {t.dtype.name}; the Tensor Engine takes {', '.join(MATMUL_DTYPES)}",
                 t.dtype.name, MATMUL_DTYPES, loc)
    s32 = stationary.dtype.name in _FP32ISH
    m32 = moving.dtype.name in _FP32ISH
    if s32 != m32:
        fail(I, "moving", f"has dtype {moving.dtype.name} but 'stationary' has {stationary.dtype.name}; when "
             "either is float32/tfloat32 both must be", moving.dtype.name, stationary.dtype.name, loc)
    allowed_dst = ("float32", "bfloat16") if tg.psum_bf16_accumulate else ("float32",)
    if dst.dtype.name not in allowed_dst and not is_transpose:
        fail(I, "dst", f"has dtype {dst.dtype.name}; PSUM matmul output on {tg.name} must be "
             f"{' or '.join(allowed_dst)}", dst.dtype.name, allowed_dst, loc)
    mode = getattr(perf_mode, "value", perf_mode)
    mode = "none" if mode is None else mode
    if mode == "double_row_gen3":
        # the legacy (neuronxcc) spelling of double_row: AWS's own nc_matmul example runs perf_mode=
        # "double_row_gen3" on trn2 against einsum("kli,klj->ij") (aws-neuron-sdk nki/test/test_nki_isa_nc_matmul.py)
        mode = "double_row"
    if not isinstance(mode, str) or mode not in ("none", "double_row"):
        fail(I, "perf_mode", f"must be nisa.matmul_perf_mode.none or .double_row, got {perf_mode!r}", perf_mode,
             ("none", "double_row"), loc)
    double = mode == "double_row"
    acc_arg = getattr(accumulate, "value", accumulate)
    if acc_arg is not None:
        acc_arg = flag(I, "accumulate", acc_arg, loc)
    if double:
        if not tg.fp8_double_row:
            fail(I, "perf_mode", f"double_row is not available on {tg.name}", mode, "none", loc)
        for name, t in (("stationary", stationary), ("moving", moving)):
            if t.dtype.name not in _FP8:
                fail(I, name, f"has dtype {t.dtype.name}; perf_mode=double_row takes fp8 inputs only",
                     t.dtype.name, _FP8, loc)
            if t.ndim != 3 or t.shape[1] != 2:
                fail(I, name, f"has shape {list(t.shape)}; perf_mode=double_row takes [K, 2, F] tiles",
                     list(t.shape), "[K, 2, F]", loc)
    ks, ps0 = part(I, "stationary", stationary, loc, tg.pe_rows)
    km, _ = part(I, "moving", moving, loc, tg.pe_rows)
    part(I, "dst", dst, loc, tg.pmax)
    K = stationary.shape[0]
    if moving.shape[0] != K:
        fail(I, "moving", f"has {moving.shape[0]} partitions (contraction size) but 'stationary' has {K}",
             moving.shape[0], K, loc)
    M = free_size(stationary) // (2 if double else 1)
    N = free_size(moving) // (2 if double else 1)
    rows, cols = tg.pe_rows, tg.pe_cols
    if _given(tile_size) or _given(tile_position):
        if not (_given(tile_size) and _given(tile_position)):
            fail(I, "tile_size", "and tile_position must both be given as (rows, columns) pairs",
                 (tile_size, tile_position), None, loc)
        rows, cols = int_tuple(I, "tile_size", tile_size, loc, 2)
        r0, c0 = int_tuple(I, "tile_position", tile_position, loc, 2)
        sizes = (32, 64, 128) if tg.nc_version >= 3 else (64, 128)
        for nm, v in (("tile_size[0]", rows), ("tile_size[1]", cols)):
            if v not in sizes:
                fail(I, nm, f"is {v}; allowed tile sizes on {tg.name}: {sizes}", v, sizes, loc)
        for nm, v, s in (("tile_position[0]", r0, rows), ("tile_position[1]", c0, cols)):
            if v % s or v + s > 128:
                fail(I, nm, f"is {v}; it must be a multiple of the tile size {s} and leave the tile inside "
                     "the 128x128 PE array", v, s, loc)
        if double and cols != 128:
            fail(I, "tile_size", "column tiling cannot be combined with perf_mode=double_row", cols, 128, loc)
    if K > rows:
        fail(I, "stationary", f"has contraction size {K} (partitions), exceeds the PE tile's {rows} rows", K,
             rows, loc)
    if M > cols:
        fail(I, "stationary", f"has free size {M}, exceeds maximum {cols} (PE columns)", M, cols, loc)
    nmax = tg.moving_fmax
    if N > nmax:
        fail(I, "moving", f"has free size {N}, exceeds maximum {nmax}", N, nmax, loc)
    if dst.shape[0] != M or free_size(dst) != N:
        fail(I, "dst", f"has shape {list(dst.shape)}; stationary [{K}, {M}] x moving [{K}, {N}] gives [{M}, {N}]",
             list(dst.shape), [M, N], loc)
    _psum_bank_check(I, dst, tg, loc)
    core.compute(_matmul_values, core, loc, dst, stationary, moving, K, M, N, double, is_transpose, acc_arg)
    cyc = matmul_cycles(tg, K, M, N, s32)
    core.record(I, "tensor", (dst,), (stationary, moving), cyc, loc, flops=2 * K * M * N * (2 if double else 1),
                pre=stationary_load_cycles(tg, M, s32))


def _matmul_values(core, loc, dst, stationary, moving, K, M, N, double, is_transpose, acc_arg):
    """nc_matmul's numerics (the rules and shapes checked by ``nc_matmul``)."""
    I = "nc_matmul"
    s = as_f32(read(core, stationary, "stationary", I, loc))
    m = as_f32(read(core, moving, "moving", I, loc))
    if double:
        s = s.transpose(1, 0, 2).reshape(2 * K, M)
        m = m.transpose(1, 0, 2).reshape(2 * K, N)
    else:
        s = s.reshape(K, M)
        m = m.reshape(K, N)
    if is_transpose:
        write(core, dst, core.matmul_f32(s.T, m))
        return
    acc_mask = _acc_mask(dst, M, N, acc_arg)
    if acc_mask is False and core.matmul_f32 is matmul_f32 and _overwrite_into(dst, s, m, M, N):
        return
    psum_accumulate(core, dst, core.matmul_f32(s.T, m), M, N, acc_arg, acc_mask)


def matmul_f32(a, b):
    """The fp32 product of two float32 arrays (fp32 products and sums): ``NeuronCore.matmul_f32``."""
    return a @ b


def _overwrite_into(dst, s, m, M, N):
    """An overwriting matmul into an fp32 PSUM tile whose storage is one row-major [M, N] block: the product goes
    straight into it (``np.matmul(..., out=)``: the same product as ``s.T @ m``, no temporary, no copy, no
    sentinel fill of a new tile first).  Returns False (nothing done) for any other destination."""
    if dst.dtype.name != "float32" or dst._rv is not None:
        return False
    buf = dst.buf
    claimed = _whole(dst) and buf.claim_whole()       # every element is stored: no fill first
    cur = dst.np
    if not cur.flags.c_contiguous:
        if claimed:
            buf.unclaim()
        return False
    try:
        np.matmul(s.T, m, out=cur.reshape(M, N))
    except BaseException:
        if claimed:
            buf.unclaim()
        raise
    mark_written(dst)
    return True


def _acc_mask(dst, M, N, acc):
    """Per element of PSUM ``dst``, whether a matmul accumulates into it (True: all, False: none, else a [M, N]
    bool array): ``acc`` True or False for all; None accumulates where the element was written before."""
    if acc is None:
        buf = dst.buf
        if buf.all_written or buf.written is None:      # (no view made: the usual case after a tile's first write)
            return True
        w = dst.written_view().reshape(M, N)
        return True if w.all() else (False if not w.any() else w)
    return bool(acc)


def psum_accumulate(core, dst, r, M, N, acc, acc_mask=None):
    """Write a [M, N] fp32 matmul result into PSUM ``dst``: accumulate (``acc`` True), overwrite (False), or, for
    None, accumulate where the PSUM element was written before and overwrite where it was not (``acc_mask``: that
    decision, from ``_acc_mask``, when the caller has made it)."""
    if acc_mask is None:
        acc_mask = _acc_mask(dst, M, N, acc)
    cur = dst.np
    if dst.dtype.name == "float32":
        # fp32 PSUM: accumulate in place, no rounding needed
        if acc_mask is True:
            np.add(cur, r.reshape(cur.shape), out=cur)
        elif acc_mask is False:
            np.copyto(cur, r.reshape(cur.shape))
        else:
            np.copyto(cur, np.where(acc_mask, cur.reshape(M, N) + r, r).reshape(cur.shape))
        if dst._rv is not None:
            dst.store_back()
        mark_written(dst)
    else:
        c2 = cur.reshape(M, N)
        if acc_mask is True:
            r = c2 + r
        elif acc_mask is not False:
            r = np.where(acc_mask, c2 + r, r)
        write(core, dst, r)


def nc_transpose(core, loc, dst, data, engine=None):
    """dst[F, P] = data[P, F] exactly (bit-accurate), on the PE array (SBUF -> PSUM, up to 128x128) or the
    Vector Engine (up to 32x32)."""
    I = "nc_transpose"
    require_space(I, "data", data, (SBUF, PSUM), loc)
    require_space(I, "dst", dst, (SBUF, PSUM), loc)
    part(I, "data", data, loc, core.target.pmax)
    P = data.shape[0]
    F = free_size(data)
    default = "vector" if (P <= 32 and F <= 32) else "tensor"
    eng = pick_engine(I, engine, default, ("tensor", "vector"), loc)
    if eng == "tensor":
        require_space(I, "data", data, (SBUF,), loc, "tensor")
        require_space(I, "dst", dst, (PSUM,), loc, "tensor")
        lim = 128
    else:
        require_space(I, "data", data, (SBUF, PSUM), loc, "vector")
        require_space(I, "dst", dst, (SBUF, PSUM), loc, "vector")
        lim = 32
    part(I, "data", data, loc, core.target.pmax)
    part(I, "dst", dst, loc, core.target.pmax)
    if P > lim or F > lim:
        fail(I, "data", f"has shape [{P}, {F}]; the {eng} engine transposes at most {lim}x{lim}", [P, F],
             [lim, lim], loc)
    if dst.dtype != data.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'data' has {data.dtype.name}; they must match",
             dst.dtype.name, data.dtype.name, loc)
    if dst.shape[0] != F or free_size(dst) != P:
        fail(I, "dst", f"has shape {list(dst.shape)}; the transpose of [{P}, {F}] is [{F}, {P}]",
             list(dst.shape), [F, P], loc)
    if core.execute:
        v = read(core, data, "data", I, loc).reshape(P, F)
        dst.np[...] = np.ascontiguousarray(v.T).reshape(dst.shape)
        if dst._rv is not None:
            dst.store_back()
        mark_written(dst)
    if eng == "tensor":
        cyc = float(max(P, min(64, F)))
    else:
        cyc = max(float(core.target.min_ii_cycles), float(F))
    core.record(I, eng, (dst,), (data,), cyc, loc)
