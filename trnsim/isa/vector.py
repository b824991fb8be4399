"""Vector Engine (and shared Vector/GpSimd/Scalar) elementwise, reduction and statistics instructions."""

from __future__ import annotations

import numpy as np

from ..memory import PSUM, SBUF, Tensor
from ..memory.dtypes import dtype_of, round_to
from .common import (as_f32, engine_name, mark_written, check_free_match, check_same_partitions, flag, free_size, number, operand_value, part,
                     pick_engine, read, require_space, scalar_or_vector, write, write_same_dtype)
from .errors import fail
from .ops import INT32_DTYPES, INT_ALU, REDUCE_OPS, alu, op_name, reduce_fn

__all__ = ["tensor_copy", "tensor_tensor", "tensor_scalar", "memset", "tensor_reduce", "reciprocal",
           "scalar_tensor_tensor", "tensor_tensor_scan", "tensor_copy_predicated", "bn_stats", "bn_aggr",
           "tensor_scalar_reduce", "select_reduce", "elementwise_cycles"]

ONCHIP = (SBUF, PSUM)


def _resolve_alu(instr, name, op, loc):
    try:
        return alu(op)
    except KeyError as e:
        fail(instr, name, f"{e.args[0]!r} is not an ALU operator of this instruction", e.args[0], None, loc)


def _resolve_arith(instr, name, op, loc):
    """An arithmetic ALU operator (the instructions whose reference says "Bitvec operators are not supported")."""
    r = _resolve_alu(instr, name, op, loc)
    if r[2]:
        fail(instr, name, f"{r[0]!r} is a bitwise operator; this instruction takes arithmetic operators only",
             r[0], "arithmetic", loc)
    return r


def _resolve_reduce(instr, name, op, loc, arith=False):
    """``(name, combine fn, is_bitvec)`` of a reduction operator, refusing operators that cannot reduce (and
    bitwise ones when ``arith``: the accumulator of fp32 instructions)."""
    rname, fn, bitvec = _resolve_alu(instr, name, op, loc)
    if rname not in REDUCE_OPS:
        fail(instr, name, f"{rname!r} is not a reduction operator; allowed: {', '.join(sorted(REDUCE_OPS))}",
             rname, sorted(REDUCE_OPS), loc)
    if arith and bitvec:
        fail(instr, name, f"{rname!r} is a bitwise operator; this instruction's accumulator is arithmetic (fp32)",
             rname, "arithmetic", loc)
    return rname, fn, bitvec


def _check_bitvec(instr, opname, loc, *named):
    """Bitwise operators work on integer bit patterns: every tensor operand must have an integer dtype."""
    for n_, t in named:
        if isinstance(t, Tensor) and not t.dtype.is_int:
            fail(instr, n_, f"has dtype {t.dtype.name}; bitwise operator {opname!r} needs integer dtypes",
                 t.dtype.name, "int", loc)


_BITVEC_IMM = (-2 ** 31, 2 ** 32 - 1)


def _bitvec_operand(instr, name, o, loc):
    """A bitwise operator's immediate must be an integer that fits 32 bits."""
    if isinstance(o, Tensor):
        return o
    return number(instr, name, o, loc, integer=True, lo=_BITVEC_IMM[0], hi=_BITVEC_IMM[1])


def _check_reduce_res(core, instr, eng, reduce_res, p, loc):
    """An optional per-partition reduction result: an on-chip [P, 1] tile."""
    if reduce_res is None:
        return
    _onchip_operands(core, instr, eng, loc, ("reduce_res", reduce_res))
    if free_size(reduce_res) != 1 or reduce_res.shape[0] != p:
        fail(instr, "reduce_res", f"has shape {list(reduce_res.shape)}; expected [{p}, 1]", list(reduce_res.shape),
             [p, 1], loc)


def _check_fmax(core, instr, name, t, loc, engine):
    f = free_size(t)
    lim = core.target.vector_psum_fmax if t.buf.kind == PSUM else core.target.vector_sbuf_fmax
    if t.buf.kind == PSUM and f > lim:
        # the PSUM figure (4K elements = a 16 KiB partition of fp32) bounds the elements addressed: a broadcast
        # view (stride 0) re-reading a few elements is within it (nki-library's hardware-validated layernorm_tkg
        # reads a [P, 1] PSUM mean broadcast over 12288 elements)
        f = min(f, 1 + sum(abs(st) * (n - 1) for st, n in zip(t.strides[1:], t.shape[1:]) if n > 0))
    if f > lim:
        fail(instr, name, f"(tensor `{t.name}`) has {f} elements per partition, exceeds maximum {lim} for "
             f"{t.buf.kind.upper()} on the {engine} engine", f, lim, loc)


_BIT_MOVERS = ("tensor_copy", "nc_stream_shuffle", "memset")   # instructions that may touch packed MX bits


def _onchip_operands(core, instr, engine, loc, *named):
    pmax = core.target.pmax
    for name, t in named:
        require_space(instr, name, t, ONCHIP, loc, engine)
        part(instr, name, t, loc, pmax)
        _check_fmax(core, instr, name, t, loc, engine)
        if t.dtype.packed and instr not in _BIT_MOVERS:
            fail(instr, name, f"(tensor `{t.name}`) has the packed MX dtype {t.dtype.name}; only quantize_mx, "
                 "nc_matmul_mx and copies of the same dtype handle it", t.dtype.name, "not packed", loc)


_LOW = ("bfloat16", "float16")


# tensor_tensor's fast path, the instruction cost model (docs/hardware.md, "Instruction cost model", from the NKI ISA
# cost notes): "max(MIN_II, N) if one input is in PSUM, or both in SBUF, all BF16, add/mul/sub, contiguous;
# otherwise max(MIN_II, 2N)".  Two inputs may never both be in PSUM, so "one in PSUM or both in SBUF" would hold
# for every legal call: the sentence is read as (one input in PSUM) or (both in SBUF, all BF16, one of these
# operators, contiguous) -- an input in PSUM comes through its own port, so the two inputs are not read over one
# SBUF interface.
_TT_FAST_OPS = frozenset(("add", "multiply", "subtract"))


def elementwise_cycles(core, engine, n, dst, srcs, kind, op=None):
    """Engine cycles of an elementwise instruction over ``n`` elements per partition
    (docs/hardware.md#instruction-cost-model):
    max(MIN_II, N), or 2N for tensor_tensor off its fast path (``op``: its ALU operator's name); trn2's Vector
    performance mode runs bf16/fp16 SBUF-to-SBUF copies and tensor_scalar 4x (2x when strided or touching
    PSUM)."""
    tg = core.target
    srcs_sbuf = True
    any_psum = False
    srcs_bf16 = srcs_low = True
    contiguous = True
    wide = False
    for t in srcs:
        k = t.buf.kind
        if k != SBUF:
            srcs_sbuf = False
        if k == PSUM:
            any_psum = True
        dn = t.dtype.name
        if dn != "bfloat16":
            srcs_bf16 = False
        if dn not in _LOW:
            srcs_low = False
        st = t.strides
        if len(st) >= 2 and t.shape[-1] != 1:
            inner = st[-1]
            if inner != 1:
                contiguous = False
            if abs(inner) * t.dtype.itemsize > 16:
                wide = True
    ddn = dst.dtype.name
    dst_sbuf = dst.buf.kind == SBUF
    st = dst.strides
    if len(st) >= 2 and dst.shape[-1] != 1:
        if st[-1] != 1:
            contiguous = False
        if abs(st[-1]) * dst.dtype.itemsize > 16:
            wide = True
    cyc = float(n)
    if kind == "tensor_tensor":
        fast = any_psum or (srcs_sbuf and srcs_bf16 and ddn == "bfloat16" and contiguous
                            and (op is None or op in _TT_FAST_OPS))
        cyc = float(n) if fast else 2.0 * n
        if engine == "vector" and tg.vector_perf_mode and srcs_sbuf and srcs_low and ddn in _LOW:
            cyc = n / 2.0
    elif engine == "vector" and tg.vector_perf_mode and srcs_low and ddn in _LOW:
        cyc = n / 4.0 if (srcs_sbuf and dst_sbuf and contiguous) else n / 2.0
    # an inner stride over 16 bytes halves the interface bandwidth
    if wide:
        cyc *= 2
    return max(float(tg.min_ii_cycles), cyc)


def _copy_values(core, loc, dst, src):
    v = read(core, src, "src", "tensor_copy", loc)
    if dst.dtype.name == src.dtype.name:
        write_same_dtype(core, dst, v)
    else:
        write(core, dst, v.reshape(dst.shape))


def tensor_copy(core, loc, dst, src, engine=None):
    I = "tensor_copy"
    eng = pick_engine(I, engine, "vector", ("vector", "scalar", "gpsimd"), loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("src", src))
    check_same_partitions(I, (("dst", dst), ("src", src)), loc)
    check_free_match(I, (("dst", dst), ("src", src)), loc)
    if (dst.dtype.packed or src.dtype.packed) and dst.dtype != src.dtype:
        fail(I, "dst", f"has dtype {dst.dtype.name} but 'src' has {src.dtype.name}; packed MX data is copied only "
             "to the same dtype", dst.dtype.name, src.dtype.name, loc)
    core.compute(_copy_values, core, loc, dst, src)
    core.record(I, eng, (dst,), (src,), elementwise_cycles(core, eng, free_size(dst), dst, [src], "copy"), loc)


# ufuncs whose float32 result written through ``out=`` into a float32 tile is bit for bit what ``write`` stores
_F32_OUT = frozenset((np.add, np.subtract, np.multiply, np.maximum, np.minimum))
_F32 = np.dtype(np.float32)


def _tensor_tensor_values(core, loc, dst, data1, data2, fn, bitvec):
    if core.strict:
        a = read(core, data1, "data1", "tensor_tensor", loc)
        b = read(core, data2, "data2", "tensor_tensor", loc)
    else:
        # read() without strict mode is the operand's NumPy view: the view a tensor keeps (Tensor._np) when it
        # has one, else Tensor.np (which makes it, or converts a dtype-reinterpreting view)
        a = data1._np
        if a is None:
            a = data1.np
        b = data2._np
        if b is None:
            b = data2.np
    if a.shape != b.shape:
        b = b.reshape(a.shape)
    if fn in _F32_OUT and a.dtype is _F32 and b.dtype is _F32 and dst.dtype._round is None:
        d = dst._np
        if d is None:
            d = dst.np
        if d.dtype is _F32 and d.shape == a.shape:
            # fp32 in, fp32 out, no rounding: the result goes straight into the tile (no temporary, no copy)
            fn(a, b, out=d)
            if dst.buf.written is not None:
                mark_written(dst)
            return
    r = fn(a, b) if bitvec else fn(as_f32(a), as_f32(b))
    write(core, dst, r)


def _int32_native(op_names, engine, *tensors):
    """Whether an elementwise instruction runs in native 32-bit integer math (``ops.INT_ALU``): every operator
    has an integer form, every tensor operand and the result are int32/uint32 and none is in PSUM (the GpSimd
    engine cannot reach PSUM: "the automatic GpSimd dispatch for int32/uint32 falls back to Vector Engine when
    any operand resides in PSUM", nki.isa.tensor_tensor), and the engine is GpSimd or left to the default
    (an explicit ``engine=vector`` computes in fp32)."""
    return (engine_name(engine) in (None, "gpsimd") and all(n in INT_ALU for n in op_names)
            and all(isinstance(t, Tensor) and t.dtype.name in INT32_DTYPES and t.buf.kind != PSUM for t in tensors))


def _int_operand(instr, name, o, loc):
    """An integer-math operand: a [P, 1] int32/uint32 tensor, or a whole-number immediate within 32 bits (int64)."""
    if isinstance(o, Tensor):
        return o
    return np.int64(number(instr, name, o, loc, integer=True, lo=-(2 ** 31), hi=2 ** 32 - 1))


def _int_values(core, instr, loc, dst, a, steps):
    """``dst = a op0 o0 [op1 o1]`` in int64 (exact), stored wrapping to the 32-bit result dtype."""
    x = a
    for fn, o, rev in steps:
        if isinstance(o, Tensor):
            o = read(core, o, "operand", instr, loc).astype(np.int64).reshape(a.shape[0], 1)
        num, den = (o, x) if rev else (x, o)
        if fn is INT_ALU["divide"] and np.any(np.asarray(den) == 0):
            fail(instr, "divisor", "is 0 in integer division (int32/uint32 operands divide natively); the "
                 "quotient is undefined", 0, "nonzero", loc)
        r = fn(num, den)
        x = r if np.shape(r) == a.shape else np.broadcast_to(r, a.shape)
    write(core, dst, x)


def _tensor_tensor_int_values(core, loc, dst, data1, data2, fn):
    a = read(core, data1, "data1", "tensor_tensor", loc).astype(np.int64)
    b = read(core, data2, "data2", "tensor_tensor", loc).astype(np.int64).reshape(a.shape)
    _int_values(core, "tensor_tensor", loc, dst, a, ((fn, b, False),))


def tensor_tensor(core, loc, dst, data1, data2, op, engine=None):
    I = "tensor_tensor"
    name, fn, bitvec = _resolve_alu(I, "op", op, loc)
    native = not bitvec and _int32_native((name,), engine, dst, data1, data2)
    default = "gpsimd" if name == "power" or native else "vector"
    eng = pick_engine(I, engine, default, ("vector", "gpsimd"), loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data1", data1), ("data2", data2))
    if data1.buf.kind == PSUM and data2.buf.kind == PSUM:
        fail(I, "data2", "and 'data1' are both in PSUM; at most one tensor_tensor input may be in PSUM",
             "psum", "sbuf", loc)
    check_same_partitions(I, (("dst", dst), ("data1", data1), ("data2", data2)), loc)
    check_free_match(I, (("dst", dst), ("data1", data1), ("data2", data2)), loc)
    if bitvec:
        _check_bitvec(I, name, loc, ("dst", dst), ("data1", data1), ("data2", data2))
    if native:
        core.compute(_tensor_tensor_int_values, core, loc, dst, data1, data2, INT_ALU[name])
    else:
        core.compute(_tensor_tensor_values, core, loc, dst, data1, data2, fn, bitvec)
    core.record(I, eng, (dst,), (data1, data2),
                elementwise_cycles(core, eng, free_size(dst), dst, [data1, data2], "tensor_tensor", name), loc,
                flops=dst.size)


def _apply(fn, x, operand, reverse):
    """``x op operand`` (``operand op x`` when reversed), shaped like ``x`` (a unary operator applied to a
    reversed scalar operand gives one value per partition, broadcast)."""
    r = fn(operand, x) if reverse else fn(x, operand)
    if np.shape(r) != x.shape:
        r = np.broadcast_to(r, x.shape)
    return r


def _tensor_scalar_values(core, loc, dst, data, p, bv0, steps):
    x = read(core, data, "data", "tensor_scalar", loc).reshape(p, -1)
    if not bv0:
        x = as_f32(x)
    for fn, bv, o, rev in steps:
        if bv:
            # bit-vector ops take the operand's integer bits: not through float32 (which rounds integers above
            # 2^24), and a negative immediate wraps into an unsigned dtype (nl.invert is xor with -1)
            ov = o.np.reshape(p, 1).astype(x.dtype) if isinstance(o, Tensor) else \
                np.array(o, dtype=np.int64).astype(x.dtype)
        else:
            ov = operand_value(core, o)
        x = _apply(fn, x, ov, rev)
    write(core, dst, x)


def _tensor_scalar_int_values(core, loc, dst, data, p, steps):
    a = read(core, data, "data", "tensor_scalar", loc).astype(np.int64).reshape(p, -1)
    _int_values(core, "tensor_scalar", loc, dst, a, steps)


def tensor_scalar(core, loc, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=None, *, _integer=False):
    """``dst = (data op0 operand0) op1 operand1``: fp32 math, the result rounded to ``dst``'s dtype.

    ``_integer`` (set by legacy NKI's arithmetic on integer tiles, ``nl.divide(int32_tile, 38)``): when the
    operators, ``data``, ``dst`` and the operands are all integer (``_int32_native``), the instruction runs on
    GpSimd in native 32-bit integer math, as tensor_tensor does for int32/uint32 tiles; otherwise fp32 as usual.
    (The NKI reference of nki.isa.tensor_scalar itself asks for float32 operands, so a kernel calling the
    instruction directly keeps the fp32 path.)"""
    I = "tensor_scalar"
    names = [op_name(op0)] + ([op_name(op1)] if op1 is not None else [])
    ints = [o for o in (operand0, operand1) if isinstance(o, Tensor)]
    integer = _integer is True and _int32_native(names, engine, dst, data, *ints) and all(
        isinstance(o, Tensor) or (isinstance(o, (int, np.integer)) and not isinstance(o, bool))
        for o in ((operand0,) if op1 is None else (operand0, operand1)))
    eng = pick_engine(I, engine, "gpsimd" if integer else "vector", ("vector", "scalar", "gpsimd"), loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    check_free_match(I, (("dst", dst), ("data", data)), loc)
    n0, f0, bv0 = _resolve_alu(I, "op0", op0, loc)
    p = data.shape[0]
    o0 = scalar_or_vector(I, "operand0", operand0, p, loc)
    if bv0:
        _check_bitvec(I, n0, loc, ("dst", dst), ("data", data), ("operand0", o0))
        o0 = _bitvec_operand(I, "operand0", operand0, loc)
    reverse0 = flag(I, "reverse0", reverse0, loc)
    steps = [(f0, bv0, o0, reverse0)]
    reads = [data] + ([o0] if isinstance(o0, Tensor) else [])
    if op1 is not None:
        n1, f1, bv1 = _resolve_alu(I, "op1", op1, loc)
        if bv1 != bv0:
            fail(I, "op1", f"{n1!r} mixes bitwise and arithmetic operators with op0 {n0!r}", n1, n0, loc)
        if operand1 is None:
            fail(I, "operand1", "is required when op1 is given", None, None, loc)
        o1 = scalar_or_vector(I, "operand1", operand1, p, loc)
        if bv1:
            _check_bitvec(I, n1, loc, ("operand1", o1))
            o1 = _bitvec_operand(I, "operand1", operand1, loc)
        steps.append((f1, bv1, o1, flag(I, "reverse1", reverse1, loc)))
        if isinstance(o1, Tensor):
            reads.append(o1)
    if integer:
        isteps = tuple((INT_ALU[n], _int_operand(I, f"operand{i}", raw, loc), rev)
                       for i, (n, raw, (_, _, _, rev)) in enumerate(zip(names, (operand0, operand1), steps)))
        core.compute(_tensor_scalar_int_values, core, loc, dst, data, p, isteps)
    else:
        core.compute(_tensor_scalar_values, core, loc, dst, data, p, bv0, tuple(steps))
    core.record(I, eng, (dst,), tuple(reads),
                elementwise_cycles(core, eng, free_size(dst), dst, [data], "tensor_scalar"), loc,
                flops=dst.size * len(steps))


def memset(core, loc, dst, value, engine=None):
    I = "memset"
    eng = pick_engine(I, engine, "vector", ("vector", "gpsimd", "scalar"), loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst))
    dt = dst.dtype
    if dt.packed:
        v = number(I, "value", value, loc, integer=True, lo=0, hi=0)   # only zero bits have a meaning
    elif dt.is_float:
        v = number(I, "value", value, loc)
    else:
        # an integer tile takes an integral value inside its range: memset(int8, 300) would not store 300
        v = number(I, "value", value, loc, integer=True, lo=dt.min, hi=dt.max)
    if core.execute:
        write(core, dst, np.full(dst.shape, v, dtype=np.float32 if dst.dtype.is_float else np.int64))
    n = free_size(dst)
    cyc = n / 2.0 if (v == 0 and dst.dtype.name in ("bfloat16", "float16")) else float(n)
    core.record(I, eng, (dst,), (), max(float(core.target.min_ii_cycles), cyc), loc)


def _reduce_axes(instr, data, axis, loc, legacy=False):
    """The free axes a reduction runs over.  They must be consecutive and end at the last axis (NKI 2.27+
    reference, tensor_reduce: "the last contiguous free dimension(s) of the tile, ending at the final
    dimension"); legacy kernels (``legacy``, NKI 2.26 reference: "must contain axis 1 ... must be consecutive",
    e.g. [1, 2, 3, 4] legal, [1, 3, 4] not) may also start at axis 1; at most four free axes."""
    nd = data.ndim
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        raw = (int(axis),)
    elif isinstance(axis, (tuple, list)) and axis and all(isinstance(a, (int, np.integer)) and
                                                          not isinstance(a, bool) for a in axis):
        raw = tuple(int(a) for a in axis)
    else:
        fail(instr, "axis", f"must be an int or a non-empty tuple of ints, got {axis!r}", axis, None, loc)
    for a in raw:
        if not -nd <= a < nd:
            fail(instr, "axis", f"{a} is out of range for a rank-{nd} tensor", a, (-nd, nd - 1), loc)
    axes = tuple(sorted(set(a % nd for a in raw)))
    if 0 in axes:
        fail(instr, "axis", "includes the partition dimension 0; only free dimensions can be reduced",
             axes, "1..", loc)
    consecutive = axes == tuple(range(axes[0], axes[0] + len(axes)))
    if not consecutive or not (axes[-1] == nd - 1 or (legacy and axes[0] == 1)) or len(axes) > 4:
        also = " or start at axis 1" if legacy else ""
        fail(instr, "axis", f"{axes} must be the last free dimensions of a rank-{nd} tensor (up to four "
             f"consecutive ones that end at the last{also}, e.g. {tuple(range(nd - len(axes), nd))})", axes,
             tuple(range(nd - len(axes), nd)), loc)
    return axes


def tensor_reduce(core, loc, dst, op, data, axis, negate=False, keepdims=False, _nki226_axes=False):
    """dst = op-reduction of ``data`` over free ``axis`` (fp32 math; bitwise ops on integer bits).
    ``_nki226_axes``: the legacy front end's wider axis rule (see :func:`_reduce_axes`)."""
    I = "tensor_reduce"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    axes = _reduce_axes(I, data, axis, loc, legacy=_nki226_axes is True)
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    name, _, bitvec = _resolve_reduce(I, "op", op, loc)
    if bitvec:
        _check_bitvec(I, name, loc, ("dst", dst), ("data", data))
    red = reduce_fn(name)
    negate = flag(I, "negate", negate, loc)
    kept = 1
    for d in range(data.ndim):
        if d not in axes and d != 0:
            kept *= data.shape[d]
    if free_size(dst) != kept:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; reducing axes {axes} of shape "
             f"{list(data.shape)} leaves {kept}", free_size(dst), kept, loc)
    if core.execute:
        x = read(core, data, "data", I, loc)
        r = red(x if bitvec else as_f32(x), axis=axes)
        if negate:
            r = -r
        write(core, dst, np.asarray(r).reshape(dst.shape))
    n = free_size(data)
    half = name in ("add", "maximum") and data.dtype.name == "bfloat16" and dst.dtype.name == "bfloat16"
    core.record(I, eng, (dst,), (data,), max(float(core.target.min_ii_cycles), n / 2.0 if half else float(n)),
                loc, flops=data.size)


def reciprocal(core, loc, dst, data, engine=None):
    I = "reciprocal"
    eng = pick_engine(I, engine, "vector", ("vector", "scalar"), loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    check_free_match(I, (("dst", dst), ("data", data)), loc)
    if core.execute:
        with np.errstate(divide="ignore"):
            write(core, dst, np.float32(1.0) / as_f32(read(core, data, "data", I, loc)))
    n = free_size(data)
    cyc = max(core.target.min_ii_cycles, n if eng == "scalar" else 8 * n)
    core.record(I, eng, (dst,), (data,), float(cyc), loc, flops=data.size)


def scalar_tensor_tensor(core, loc, dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None):
    """dst = (data op0 operand0) op1 operand1, operand0 a scalar or [P,1], operand1 a full tensor; fp32 math.
    ``dtype`` (NKI 2.26's output-dtype argument, still passed by kernels) rounds the result to that dtype before
    it is stored in ``dst``."""
    I = "scalar_tensor_tensor"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data), ("operand1", operand1))
    check_same_partitions(I, (("dst", dst), ("data", data), ("operand1", operand1)), loc)
    check_free_match(I, (("dst", dst), ("data", data), ("operand1", operand1)), loc)
    if data.buf.kind == PSUM and operand1.buf.kind == PSUM:
        fail(I, "operand1", "and 'data' are both in PSUM; at most one of them may be", "psum", "sbuf", loc)
    _, f0, _ = _resolve_arith(I, "op0", op0, loc)
    _, f1, _ = _resolve_arith(I, "op1", op1, loc)
    reverse0 = flag(I, "reverse0", reverse0, loc)
    reverse1 = flag(I, "reverse1", reverse1, loc)
    out_dt = None
    if dtype is not None:
        try:
            out_dt = dtype_of(dtype)
        except (TypeError, ValueError) as e:
            fail(I, "dtype", f"is not a NeuronCore dtype: {e}", dtype, None, loc)
    p = data.shape[0]
    o0 = scalar_or_vector(I, "operand0", operand0, p, loc)
    reads = (data, operand1) + ((o0,) if isinstance(o0, Tensor) else ())
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(p, -1)
        x = _apply(f0, x, operand_value(core, o0), reverse0)
        y = as_f32(read(core, operand1, "operand1", I, loc)).reshape(p, -1)
        r = f1(y, x) if reverse1 else f1(x, y)
        if out_dt is not None and out_dt != dst.dtype:
            r = np.asarray(round_to(out_dt, np.asarray(r, dtype=np.float32), core.precise), dtype=np.float32)
        write(core, dst, r)
    core.record(I, eng, (dst,), reads, max(float(core.target.min_ii_cycles), float(free_size(dst))), loc,
                flops=2 * dst.size)


def tensor_tensor_scan(core, loc, dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False):
    """Per partition, along the free elements: r[i] = op1(op0(data0[i], r[i-1]), data1[i]), r[-1] = initial."""
    I = "tensor_tensor_scan"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data0", data0), ("data1", data1))
    check_same_partitions(I, (("dst", dst), ("data0", data0), ("data1", data1)), loc)
    check_free_match(I, (("dst", dst), ("data0", data0), ("data1", data1)), loc)
    if data0.buf.kind == PSUM and data1.buf.kind == PSUM:
        fail(I, "data1", "and 'data0' are both in PSUM; at most one may be", "psum", "sbuf", loc)
    _, f0, _ = _resolve_arith(I, "op0", op0, loc)
    _, f1, _ = _resolve_arith(I, "op1", op1, loc)
    reverse0 = flag(I, "reverse0", reverse0, loc)
    reverse1 = flag(I, "reverse1", reverse1, loc)
    p = data0.shape[0]
    init = scalar_or_vector(I, "initial", initial, p, loc)
    if core.execute:
        a = as_f32(read(core, data0, "data0", I, loc)).reshape(p, -1)
        b = as_f32(read(core, data1, "data1", I, loc)).reshape(p, -1)
        r = np.broadcast_to(operand_value(core, init), (p, 1)).reshape(p).astype(np.float32)
        out = np.empty_like(a)
        for i in range(a.shape[1]):
            t = f0(r, a[:, i]) if reverse0 else f0(a[:, i], r)
            r = f1(b[:, i], t) if reverse1 else f1(t, b[:, i])
            r = np.asarray(r, dtype=np.float32)
            out[:, i] = r
        write(core, dst, out)
    core.record(I, eng, (dst,), (data0, data1), max(float(core.target.min_ii_cycles), 2.0 * free_size(dst)),
                loc, flops=2 * dst.size)


def tensor_copy_predicated(core, loc, dst, src, predicate, reverse_pred=False):
    I = "tensor_copy_predicated"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("predicate", predicate))
    named = [("dst", dst), ("predicate", predicate)]
    if isinstance(src, Tensor):
        _onchip_operands(core, I, eng, loc, ("src", src))
        named.append(("src", src))
        if src.dtype != dst.dtype:
            fail(I, "src", f"has dtype {src.dtype.name} but 'dst' has {dst.dtype.name}; they must match",
                 src.dtype.name, dst.dtype.name, loc)
    else:
        src = number(I, "src", src, loc, integer=not (dst.dtype.is_float),
                     lo=None if dst.dtype.is_float else dst.dtype.min, hi=None if dst.dtype.is_float else dst.dtype.max)
    reverse_pred = flag(I, "reverse_pred", reverse_pred, loc)
    if predicate.dtype.name not in ("uint8", "uint16", "uint32", "int8", "int16", "int32", "bool"):
        fail(I, "predicate", f"has dtype {predicate.dtype.name}; expected an integer dtype (uint8/16/32)",
             predicate.dtype.name, "uint8|uint16|uint32", loc)
    check_same_partitions(I, named, loc)
    check_free_match(I, named, loc)
    if core.execute:
        pred = read(core, predicate, "predicate", I, loc).reshape(dst.shape) != 0   # free sizes match
        if reverse_pred:
            pred = ~pred
        cur = dst.np.copy()
        new = read(core, src, "src", I, loc).reshape(dst.shape) if isinstance(src, Tensor) else src
        write(core, dst, np.where(pred, new, cur))
    core.record(I, eng, (dst,), tuple(t for _, t in named[1:]) + (dst,),
                max(float(core.target.min_ii_cycles), float(free_size(dst))), loc)


BN_STATS_FMAX = 512   # nl.tile_size.bn_stats_fmax (NKI reference, bn_stats: free size up to 512)


def bn_stats(core, loc, dst, data):
    """Per partition: [count, mean, count*var] of the even-indexed and of the odd-indexed free elements."""
    I = "bn_stats"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    f = free_size(data)
    if f > BN_STATS_FMAX:
        fail(I, "data", f"has {f} elements per partition, exceeds maximum {BN_STATS_FMAX} (nl.tile_size."
             "bn_stats_fmax)", f, BN_STATS_FMAX, loc)
    if free_size(dst) != 6:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; bn_stats writes 6", free_size(dst), 6, loc)
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(data.shape[0], -1).astype(np.float64)
        out = np.zeros((x.shape[0], 6), dtype=np.float64)
        for j, sl in enumerate((x[:, 0::2], x[:, 1::2])):
            n = sl.shape[1]
            out[:, 3 * j] = n
            if n:
                m = sl.mean(axis=1)
                out[:, 3 * j + 1] = m
                out[:, 3 * j + 2] = ((sl - m[:, None]) ** 2).sum(axis=1)
        write(core, dst, out.astype(np.float32))
    core.record(I, eng, (dst,), (data,), max(float(core.target.min_ii_cycles), float(f)), loc, flops=3 * data.size)


def bn_aggr(core, loc, dst, data):
    """Combine (count, mean, M2) triples per partition into [mean, variance] (population variance)."""
    I = "bn_aggr"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    f = free_size(data)
    if f % 3:
        fail(I, "data", f"has {f} elements per partition; bn_aggr reads (count, mean, M2) triples, so it must "
             "be a multiple of 3", f, "3k", loc)
    if free_size(dst) != 2:
        fail(I, "dst", f"has {free_size(dst)} elements per partition; bn_aggr writes 2 (mean, variance)",
             free_size(dst), 2, loc)
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(data.shape[0], -1, 3).astype(np.float64)
        n, m, m2 = x[..., 0], x[..., 1], x[..., 2]
        tot = n.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (n * m).sum(axis=1) / tot
            var = (m2.sum(axis=1) + (n * (m - mean[:, None]) ** 2).sum(axis=1)) / tot
        write(core, dst, np.stack([mean, var], axis=1).astype(np.float32))
    core.record(I, eng, (dst,), (data,), max(float(core.target.min_ii_cycles), 13.0 * f / 3.0), loc)


def tensor_scalar_reduce(core, loc, dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=None, reduce_init=None, reduce_res_negate=False):
    """dst = data op0 operand0; reduce_res[p] = reduce_op over the free elements of dst (fp32)."""
    I = "tensor_scalar_reduce"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    check_free_match(I, (("dst", dst), ("data", data)), loc)
    _, f0, _ = _resolve_arith(I, "op0", op0, loc)
    rname, fr, _ = _resolve_reduce(I, "reduce_op", reduce_op, loc, arith=True)
    reverse0 = flag(I, "reverse0", reverse0, loc)
    reduce_res_negate = flag(I, "reduce_res_negate", reduce_res_negate, loc)
    p = data.shape[0]
    o0 = scalar_or_vector(I, "operand0", operand0, p, loc)
    init = scalar_or_vector(I, "reduce_init", reduce_init, p, loc, optional=True)
    writes = (dst,)
    if reduce_res is not None:
        _check_reduce_res(core, I, eng, reduce_res, p, loc)
        writes = (dst, reduce_res)
    if core.execute:
        x = _apply(f0, as_f32(read(core, data, "data", I, loc)).reshape(p, -1), operand_value(core, o0),
                   reverse0)
        write(core, dst, x)
        if reduce_res is not None:
            r = reduce_fn(rname)(np.asarray(x, dtype=np.float32), axis=1, keepdims=True)
            if init is not None:
                r = fr(r, operand_value(core, init))
            if reduce_res_negate:
                r = -r
            write(core, reduce_res, r)
    core.record(I, eng, writes, (data,), max(float(core.target.min_ii_cycles), float(free_size(dst)))
                + core.target.min_ii_cycles, loc, flops=2 * dst.size)


def select_reduce(core, loc, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=None,
                  reduce_op="maximum", reverse_pred=False):
    """dst = on_true where predicate != 0 else on_false; optional per-partition reduction of dst."""
    I = "select_reduce"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("predicate", predicate), ("on_true", on_true))
    named = [("dst", dst), ("predicate", predicate), ("on_true", on_true)]
    p = dst.shape[0]
    of = on_false
    if isinstance(on_false, Tensor):
        _onchip_operands(core, I, eng, loc, ("on_false", on_false))
        if on_false.shape and free_size(on_false) == 1:
            of = scalar_or_vector(I, "on_false", on_false, p, loc)   # a [P, 1] tensor: P must be dst's
    else:
        of = scalar_or_vector(I, "on_false", on_false, p, loc)
    check_same_partitions(I, named, loc)
    check_free_match(I, named, loc)
    if isinstance(of, Tensor) and free_size(of) != 1:
        check_same_partitions(I, (("dst", dst), ("on_false", of)), loc)
        check_free_match(I, (("dst", dst), ("on_false", of)), loc)
    rname = _resolve_reduce(I, "reduce_op", reduce_op, loc, arith=True)[0]
    reverse_pred = flag(I, "reverse_pred", reverse_pred, loc)
    _check_reduce_res(core, I, eng, reduce_res, p, loc)
    writes = (dst,) if reduce_res is None else (dst, reduce_res)
    if core.execute:
        pr = read(core, predicate, "predicate", I, loc).reshape(p, -1) != 0
        if reverse_pred:
            pr = ~pr
        t = as_f32(read(core, on_true, "on_true", I, loc)).reshape(p, -1)
        if isinstance(of, Tensor) and free_size(of) != 1:
            fv = as_f32(of.np).reshape(p, -1)
        else:
            fv = operand_value(core, of)
        out = np.where(pr, t, fv).astype(np.float32)
        write(core, dst, out)
        if reduce_res is not None:
            write(core, reduce_res, reduce_fn(rname)(out, axis=1, keepdims=True))
    core.record(I, eng, writes, (predicate, on_true), max(float(core.target.min_ii_cycles),
                                                         float(free_size(dst))), loc)


_FP32_MIN = float(np.finfo(np.float32).min)


def range_select(core, loc, dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=None,
                 reduce_res=None, reduce_op="maximum", range_start=0, on_false_value=_FP32_MIN):
    """Keep on_true_tile where comp_op0(i, bound0[p]) and comp_op1(i, bound1[p]) for the free index
    i = range_start + j, else on_false_value; optional per-partition max of dst into reduce_res."""
    I = "range_select"
    eng = "vector"
    if core.target.nc_version < 3:
        fail(I, None, f"is not available on {core.target.name} (NeuronCore-v3 and later)", core.target.name,
             "trn2+", loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("on_true_tile", on_true_tile))
    check_same_partitions(I, (("dst", dst), ("on_true_tile", on_true_tile)), loc)
    check_free_match(I, (("dst", dst), ("on_true_tile", on_true_tile)), loc)
    p = dst.shape[0]
    b0 = scalar_or_vector(I, "bound0", bound0, p, loc)
    b1 = scalar_or_vector(I, "bound1", bound1, p, loc)
    _, c0, _ = _resolve_arith(I, "comp_op0", comp_op0, loc)
    _, c1, _ = _resolve_arith(I, "comp_op1", comp_op1, loc)
    rname = _resolve_reduce(I, "reduce_op", reduce_op, loc, arith=True)[0]
    range_start = number(I, "range_start", range_start, loc, integer=True)
    on_false_value = number(I, "on_false_value", on_false_value, loc)
    _check_reduce_res(core, I, eng, reduce_res, p, loc)
    reads = [on_true_tile] + [b for b in (b0, b1) if isinstance(b, Tensor)]
    writes = (dst,) if reduce_res is None else (dst, reduce_res)
    if core.execute:
        f = free_size(dst)
        idx = (np.arange(f, dtype=np.float32) + np.float32(range_start))[None, :]
        mask = (c0(idx, operand_value(core, b0)) != 0) & (c1(idx, operand_value(core, b1)) != 0)
        t = as_f32(read(core, on_true_tile, "on_true_tile", I, loc)).reshape(p, f)
        out = np.where(mask, t, np.float32(on_false_value)).astype(np.float32)
        write(core, dst, out)
        if reduce_res is not None:
            write(core, reduce_res, reduce_fn(rname)(out, axis=1, keepdims=True))
    core.record(I, eng, writes, tuple(reads), max(float(core.target.min_ii_cycles), float(free_size(dst))), loc)
