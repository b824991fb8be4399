"""Microscaling (OCP MX) instructions of NeuronCore-v4: quantize_mx (Vector Engine) and nc_matmul_mx (Tensor
Engine).

Layout (NKI reference, quantize_mx / nc_matmul_mx): a scale covers a group of 32 values, 8 partitions x the 4
values of one packed element.  A scale tile has the data tile's shape; the scale of the group of partitions
``[8g, 8g + 8)`` sits on partition ``32 * (g // 4) + g % 4`` (four scale rows at the start of each 32-partition
quadrant), at the free position of the packed element.

Padding a kernel never wrote: data whose contraction size is not a multiple of 32 partitions is padded by the
kernel, and what the padding holds is the kernel's business.  nki-library's fp4 MoE kernels at d2ad3a5 quantize and
contract partitions they never wrote and rely on zero-padded weights cancelling them
(``moe_tkg/gate_up_projection_mx.py``: "Extra zero-padded partitions are harmless: downstream weight is
zero-padded"; ``mlp_tkg/down_projection_mx_shard_H.py``: "the final I512 tile of inter_sb will contain garbage ...
we memset the last tile of weight_qtz and weight_qtz_scale so the garbage does not matter").  That holds for finite
leftovers only: never-written memory reads as the sentinel (NaN; the packed fp8 sentinel is each byte's NaN code),
as in AWS's CPU simulator (aws-neuron-sdk ``nki/guides/nki_simulator.rst``, "Uninitialized Memory Detection", which
says hardware memory holds arbitrary leftover values), and NaN x 0 is NaN.  ``TRNSIM_STRICT_UNINIT=1`` names the
first such read; tests/isa/test_mx_unwritten_padding.py checks both readings against float64.
"""

from __future__ import annotations

import numpy as np

from ..memory import PSUM, SBUF
from ..memory.dtypes import pack_x4, unpack_x4
from .common import flag, free_size, int_tuple, part, read, require_space, write
from .errors import fail
from .tensor_engine import _given, _psum_bank_check, matmul_cycles, psum_accumulate
from .vector import elementwise_cycles

__all__ = ["quantize_mx", "nc_matmul_mx", "scale_rows"]

_FP8_X4 = ("float8_e5m2_x4", "float8_e4m3fn_x4")
_MX_X4 = _FP8_X4 + ("float4_e2m1fn_x4",)
_SCALE_DTYPES = ("float8_e8m0fnu", "uint8")
# largest unbiased exponent of the element formats (NKI reference, quantize_mx: 8 for e4m3fn, 15 for e5m2; the OCP
# MX specification: 2 for e2m1)
_EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1fn": 2}
_E8M0_BIAS = 127
# largest finite values of the element formats (OCP MX specification: e4m3fn 448, e5m2 57344, e2m1 6)
_ELEM_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "float4_e2m1fn": 6.0}


def scale_rows(p):
    """For a data tile of ``p`` partitions (a multiple of 32): the scale-tile partition of each 8-partition
    group."""
    g = np.arange(p // 8)
    return 32 * (g // 4) + g % 4


def _need_v4(core, I, loc):
    if core.target.nc_version < 4:
        fail(I, None, f"is not available on {core.target.name} (NeuronCore-v4 and later)", core.target.name,
             "trn3", loc)


def _mx_partitions(I, name, t, loc, pmax):
    _, p = part(I, name, t, loc, pmax)
    if p % 32:
        fail(I, name, f"(tensor `{t.name}`) has {p} partitions; MX data spans whole 32-partition quadrants (a "
             "multiple of 32)", p, "32k", loc)
    return p


def _check_scale(I, name, scale, data, loc, pmax):
    require_space(I, name, scale, (SBUF,), loc)
    part(I, name, scale, loc, pmax)
    if scale.dtype.name not in _SCALE_DTYPES:
        fail(I, name, f"has dtype {scale.dtype.name}; MX scales are float8_e8m0fnu or uint8", scale.dtype.name,
             _SCALE_DTYPES, loc)
    # the scales of a data tile spanning q quadrants sit on partitions 32 * i + 0..3 (i < q): the scale tile must
    # reach partition 32 * (q - 1) + 3 and hold one scale per packed data element
    need = 32 * (data.shape[0] // 32 - 1) + 4
    if scale.shape[0] < need or free_size(scale) != free_size(data):
        fail(I, name, f"has shape {list(scale.shape)}; the scales of a [{data.shape[0]}, {free_size(data)}] MX tile "
             f"need at least {need} partitions (4 per 32-partition quadrant, at its start) and "
             f"{free_size(data)} elements per partition", list(scale.shape), [need, free_size(data)], loc)


def _scale_factors(core, scale, data_p, loc, I, name):
    """The [p/8, F] power-of-two factors the scale tile holds for a data tile of ``data_p`` partitions."""
    # only the 4 scale rows at the start of each quadrant are read (strict mode: the other rows may be unwritten)
    v = np.concatenate([read(core, scale[32 * q:32 * q + 4], name, I, loc).reshape(4, -1)
                        for q in range(data_p // 32)])
    if scale.dtype.name == "uint8":
        return np.ldexp(np.float64(1.0), v.astype(np.int64) - _E8M0_BIAS)
    return v.astype(np.float64)           # float8_e8m0fnu tiles hold the factors themselves


def quantize_mx(core, loc, dst, src, dst_scale):
    """Quantize a bf16/fp16 tile to MXFP8: per group of 8 partitions x 4 elements, the OCP MX scale
    X = 2^(e - Emax), e the largest fp32 exponent in the group, each value v / X clamped to the element format's
    largest finite value and rounded to it (nearest even), packed four to an element.

    The scale is the one nki-library's hardware-validated goldens use (test/utils/mx_utils.py at the snapshot
    d2ad3a5 compares quantize_mx's bits with absolute accuracy 0).  The NKI 2.32 reference text describes a
    scale twice as large (Emax - 1); trnsim follows the goldens.  An all-zero group gets 2^-127 (biased 0), as the
    reference says.  The other partitions of each 32-partition quadrant of the scale tile are written with 0."""
    I = "quantize_mx"
    _need_v4(core, I, loc)
    pmax = core.target.pmax
    for name, t in (("dst", dst), ("src", src), ("dst_scale", dst_scale)):
        require_space(I, name, t, (SBUF,), loc, "vector")
    p = _mx_partitions(I, "src", src, loc, pmax)
    part(I, "dst", dst, loc, pmax)
    if src.dtype.name not in ("bfloat16", "float16"):
        fail(I, "src", f"has dtype {src.dtype.name}; quantize_mx takes bfloat16 or float16", src.dtype.name,
             ("bfloat16", "float16"), loc)
    if dst.dtype.name not in _FP8_X4:
        fail(I, "dst", f"has dtype {dst.dtype.name}; quantize_mx writes float8_e5m2_x4 or float8_e4m3fn_x4",
             dst.dtype.name, _FP8_X4, loc)
    f = free_size(src)
    if f % 4:
        fail(I, "src", f"has {f} elements per partition; it must be a multiple of 4", f, "4k", loc)
    if dst.shape[0] != p or free_size(dst) * 4 != f:
        fail(I, "dst", f"has shape {list(dst.shape)}; quantizing [{p}, {f}] gives [{p}, {f // 4}] packed elements",
             list(dst.shape), [p, f // 4], loc)
    _check_scale(I, "dst_scale", dst_scale, dst, loc, pmax)
    if core.execute:
        x = read(core, src, "src", I, loc).reshape(p // 8, 8, f // 4, 4).astype(np.float64)
        amax = np.abs(x).max(axis=(1, 3)).astype(np.float32)               # [p/8, f/4]
        efield = ((amax.view(np.uint32) >> 23) & 0xFF).astype(np.int64)     # biased fp32 exponent (0: zero/subnormal)
        emax = _EMAX[dst.dtype.element]
        biased = np.where(amax > 0, np.clip(efield - emax, 0, 254), 0)
        sexp = biased - _E8M0_BIAS
        q = x / np.ldexp(1.0, sexp)[:, None, :, None]
        big = _ELEM_MAX[dst.dtype.element]
        q = np.clip(q, -big, big).reshape(p, f // 4, 4)
        write(core, dst, pack_x4(dst.dtype, q.astype(np.float32)).reshape(dst.shape))
        sc = dst_scale.np.reshape(dst_scale.shape[0], -1).copy()
        rows = scale_rows(p)
        # The 28 partitions after the 4 scale rows of each 32-partition quadrant the data spans are written as
        # zeros: nki-library's quantize_to_mx kernel documents quantize_mx's scale output as "remaining 28 rows
        # are zero padding" (test/integration/nkilib/core/utils/test_quantize_to_mx.py at d2ad3a5), and its
        # golden (mx_torch_common.quantize_mx_golden) expects 0 there.  The NKI reference does not say.
        sc[:p] = 0
        if dst_scale.dtype.name == "uint8":
            sc[rows] = (sexp + _E8M0_BIAS).astype(sc.dtype)
            write(core, dst_scale, sc)
        else:
            sc[rows] = np.ldexp(np.float32(1.0), sexp).astype(np.float32)
            write(core, dst_scale, sc)
    # assumption (no published figure): one Vector Engine pass over the source elements, max(MIN_II, N)
    core.record(I, "vector", (dst, dst_scale), (src,),
                elementwise_cycles(core, "vector", f, dst, [src], "quantize"), loc, flops=3 * src.size)


def nc_matmul_mx(core, loc, dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
                 tile_size=None, accumulate=None):
    """dst[M, N] (PSUM) (+)= sum over k and the 4 packed values q of
    stationary[k, m, q] * s_scale(k, m) * moving[k, n, q] * m_scale(k, n), fp32 accumulation."""
    I = "nc_matmul_mx"
    tg = core.target
    _need_v4(core, I, loc)
    for name, t in (("stationary", stationary), ("moving", moving)):
        require_space(I, name, t, (SBUF,), loc, "tensor")
        if t.dtype.name not in _MX_X4:
            fail(I, name, f"has dtype {t.dtype.name}; nc_matmul_mx takes {', '.join(_MX_X4)}", t.dtype.name,
                 _MX_X4, loc)
    require_space(I, "dst", dst, (PSUM,), loc, "tensor")
    if dst.dtype.name not in ("float32", "bfloat16"):
        fail(I, "dst", f"has dtype {dst.dtype.name}; nc_matmul_mx writes float32 or bfloat16", dst.dtype.name,
             ("float32", "bfloat16"), loc)
    K = _mx_partitions(I, "stationary", stationary, loc, tg.pe_rows)
    if _mx_partitions(I, "moving", moving, loc, tg.pe_rows) != K:
        fail(I, "moving", f"has {moving.shape[0]} partitions but 'stationary' has {K}; they must match",
             moving.shape[0], K, loc)
    part(I, "dst", dst, loc, tg.pmax)
    _check_scale(I, "stationary_scale", stationary_scale, stationary, loc, tg.pmax)
    _check_scale(I, "moving_scale", moving_scale, moving, loc, tg.pmax)
    M, N = free_size(stationary), free_size(moving)
    if M % 2 or M > tg.pe_cols:
        fail(I, "stationary", f"has free size {M}; it must be even and at most {tg.pe_cols}", M, tg.pe_cols, loc)
    nmax = 4096 if dst.dtype.name == "float32" else 8192      # NKI reference: 8 PSUM banks of fp32 / bf16
    if N > nmax:
        fail(I, "moving", f"has free size {N}, exceeds maximum {nmax} for a {dst.dtype.name} dst", N, nmax, loc)
    if dst.shape[0] != M or free_size(dst) != N:
        fail(I, "dst", f"has shape {list(dst.shape)}; stationary [{K}, {M}] x moving [{K}, {N}] gives [{M}, {N}]",
             list(dst.shape), [M, N], loc)
    if _given(tile_size) or _given(tile_position):
        if not (_given(tile_size) and _given(tile_position)):
            fail(I, "tile_size", "and tile_position must both be given", (tile_size, tile_position), None, loc)
        rows, cols = int_tuple(I, "tile_size", tile_size, loc, 2)
        r0, c0 = int_tuple(I, "tile_position", tile_position, loc, 2)
        if cols != 128 or c0 != 0:
            fail(I, "tile_size", f"({rows}, {cols}) at ({r0}, {c0}): nc_matmul_mx tiles rows only (column size 128 "
                 "at column 0)", (cols, c0), (128, 0), loc)
        if rows not in (32, 64, 128) or r0 % rows or r0 + rows > 128:
            fail(I, "tile_position", f"({r0}, {c0}) with row size {rows}: the row size must be 32, 64 or 128 and "
                 "the start row a multiple of it inside the array", (r0, rows), (32, 64, 128), loc)
        if K > rows:
            fail(I, "stationary", f"has {K} partitions, more than the row tile's {rows}", K, rows, loc)
    acc = getattr(accumulate, "value", accumulate)
    acc = None if acc is None else flag(I, "accumulate", acc, loc)
    if N * 4 <= tg.psum_bank_bytes:
        _psum_bank_check(I, dst, tg, loc)
    if core.execute:
        s = unpack_x4(stationary.dtype, read(core, stationary, "stationary", I, loc).reshape(K, M)).astype(np.float64)
        m = unpack_x4(moving.dtype, read(core, moving, "moving", I, loc).reshape(K, N)).astype(np.float64)
        ss = _scale_factors(core, stationary_scale, K, loc, I, "stationary_scale")     # [K/8, M]
        ms = _scale_factors(core, moving_scale, K, loc, I, "moving_scale")             # [K/8, N]
        s = s * np.repeat(ss, 8, axis=0)[:, :, None]
        m = m * np.repeat(ms, 8, axis=0)[:, :, None]
        # contraction over the partitions and the 4 packed values: fp32 products and sums of the scaled values,
        # as nc_matmul
        s2 = s.transpose(0, 2, 1).reshape(4 * K, M).astype(np.float32)
        m2 = m.transpose(0, 2, 1).reshape(4 * K, N).astype(np.float32)
        psum_accumulate(core, dst, core.matmul_f32(s2.T, m2), M, N, acc)
    # assumption (no published MX figure): the matmul formula of docs/hardware.md#instruction-cost-model at the bf16 rate, each PE
    # taking one packed element (4 values) per cycle
    core.record(I, "tensor", (dst,), (stationary, moving, stationary_scale, moving_scale),
                matmul_cycles(tg, K, M, N, False), loc, flops=2 * 4 * K * M * N)
