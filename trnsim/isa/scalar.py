"""Scalar Engine (activation) instructions."""

from __future__ import annotations

import numpy as np

from ..memory import Tensor
from .common import (as_f32, check_free_match, check_same_partitions, flag, free_size, operand_value, read,
                     scalar_or_vector, write)
from .errors import fail
from .ops import activation_fn, op_name, reduce_fn
from .vector import _check_reduce_res, _onchip_operands, _resolve_arith, _resolve_reduce

REDUCE_CMDS = ("idle", "reset", "reduce", "reset_reduce", "load_reduce")


def reduce_cmd_name(instr, cmd, loc, default="idle"):
    """The name of a ``nisa.reduce_cmd`` value (enum member or its name)."""
    if cmd is None:
        return default
    n = getattr(cmd, "name", cmd)
    if not isinstance(n, str) or n not in REDUCE_CMDS:
        fail(instr, "reduce_cmd", f"must be one of nisa.reduce_cmd's values ({', '.join(REDUCE_CMDS)}), got "
             f"{cmd!r}", cmd, REDUCE_CMDS, loc)
    return n

__all__ = ["activation", "activation_reduce", "exponential", "activate2"]


def _act(I, op, loc):
    try:
        return activation_fn(op)
    except KeyError as e:
        fail(I, "op", f"{e.args[0]!r} is not an activation function", e.args[0], None, loc)


def _regs(core, p):
    regs = getattr(core, "act_reduce_regs", None)
    if regs is None or regs.shape[0] < p:
        regs = np.zeros((max(p, 128), 1), dtype=np.float32)
        core.act_reduce_regs = regs
    return regs


def _accumulate(core, cmd, rname, combine, y, p, reduce_res):
    """The Scalar Engine's accumulator registers: reset, reduce the free elements of ``y`` into them, read out."""
    regs = _regs(core, p)
    if cmd in ("reset", "reset_reduce"):
        regs[:p] = 0
    if cmd in ("reduce", "reset_reduce", "load_reduce"):
        part_red = reduce_fn(rname)(y, axis=1, keepdims=True)
        # reset_reduce starts from the register's reset value 0 for add; other ops start fresh
        regs[:p] = combine(regs[:p], part_red) if (rname == "add" or cmd == "reduce") else part_red
    if reduce_res is not None:
        write(core, reduce_res, regs[:p])


def _activation_values(core, loc, dst, data, fn, p, sc, bi, cmd, rname, combine, reduce_res):
    x = as_f32(read(core, data, "data", "activation", loc)).reshape(p, -1)
    x = x * operand_value(core, sc) if sc is not None and not (not isinstance(sc, Tensor) and sc == 1.0) else x
    if bi is not None:
        x = x + operand_value(core, bi)
    y = np.asarray(fn(x.astype(np.float32)), dtype=np.float32)
    write(core, dst, y)
    if cmd != "idle" or reduce_res is not None:
        _accumulate(core, cmd, rname, combine, y, p, reduce_res)


def activation(core, loc, dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=None):
    """dst = op(data * scale + bias); optional accumulation of the free-dim sum into the ACT registers."""
    I = "activation"
    eng = "scalar"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    check_free_match(I, (("dst", dst), ("data", data)), loc)
    _, fn = _act(I, op, loc)
    p = data.shape[0]
    sc = scalar_or_vector(I, "scale", scale, p, loc, optional=True)
    bi = scalar_or_vector(I, "bias", bias, p, loc, optional=True)
    cmd = reduce_cmd_name(I, reduce_cmd, loc)
    rname, combine = "add", None
    if reduce_op is not None or cmd != "idle":
        rname, combine, _ = _resolve_reduce(I, "reduce_op", "add" if reduce_op is None else reduce_op, loc,
                                           arith=True)
    if reduce_res is not None:
        _check_reduce_res(core, I, eng, reduce_res, p, loc)
        if cmd == "idle" and reduce_op is not None:
            cmd = "reset_reduce"
    reads = [data] + [t for t in (sc, bi) if isinstance(t, Tensor)]
    writes = [dst] + ([reduce_res] if reduce_res is not None else [])
    core.compute(_activation_values, core, loc, dst, data, fn, p, sc, bi, cmd, rname, combine, reduce_res)
    n = free_size(dst)
    cyc = max(float(core.target.min_ii_cycles), float(n))
    if reduce_res is not None:
        cyc += core.target.min_ii_cycles       # reading the registers out is one more instruction
    core.record(I, eng, tuple(writes), tuple(reads), cyc, loc, flops=dst.size)


def activation_reduce(core, loc, dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0):
    activation(core, loc, dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd="reset_reduce")


def exponential(core, loc, dst, src, max_value=0.0, reduce_res=None, reduce_cmd=None, reduce_init=0.0):
    """dst = exp(src - max_value); optional per-partition sum of dst into reduce_res (plus reduce_init)."""
    I = "exponential"
    eng = "scalar"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("src", src))
    check_same_partitions(I, (("dst", dst), ("src", src)), loc)
    check_free_match(I, (("dst", dst), ("src", src)), loc)
    p = src.shape[0]
    mv = scalar_or_vector(I, "max_value", max_value, p, loc)
    reduce_cmd_name(I, reduce_cmd, loc)
    _check_reduce_res(core, I, eng, reduce_res, p, loc)
    init = scalar_or_vector(I, "reduce_init", reduce_init, p, loc, optional=True)
    writes = (dst,) if reduce_res is None else (dst, reduce_res)
    if core.execute:
        x = as_f32(read(core, src, "src", I, loc)).reshape(p, -1) - operand_value(core, mv)
        with np.errstate(over="ignore"):
            y = np.exp(x).astype(np.float32)
        write(core, dst, y)
        if reduce_res is not None:
            base = operand_value(core, init) if init is not None else np.float32(0)
            write(core, reduce_res, y.sum(axis=1, keepdims=True) + base)
    cyc = max(float(core.target.min_ii_cycles), float(free_size(dst)))
    core.record(I, eng, writes, (src,), cyc, loc, flops=dst.size)


_ACT2_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
               ("subtract", "bypass"), ("bypass", "bypass")}   # the six (op0, op1) forms of the NKI reference


def activate2(core, loc, dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
              reduce_op=None, reduce_res=None, reduce_cmd=None):
    """dst = op((data op0 imm0) op1 imm1) on the Scalar Engine (NeuronCore-v4+), fp32 math; ``relu_param`` is
    the negative slope of ``prelu``; optional reduction through the accumulator registers, as activation's."""
    I = "activate2"
    eng = "scalar"
    if core.target.nc_version < 4:
        fail(I, None, f"is not available on {core.target.name} (NeuronCore-v4 and later)", core.target.name,
             "trn3", loc)
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("data", data))
    check_same_partitions(I, (("dst", dst), ("data", data)), loc)
    check_free_match(I, (("dst", dst), ("data", data)), loc)
    name = op_name(op)
    fn = None if name == "prelu" else _act(I, op, loc)[1]
    n0, f0, _ = _resolve_arith(I, "op0", op0, loc)
    n1, f1, _ = _resolve_arith(I, "op1", op1, loc)
    if (n0, n1) not in _ACT2_PAIRS:
        fail(I, "op1", f"({n0}, {n1}) is not one of the supported (op0, op1) pairs: "
             f"{sorted(_ACT2_PAIRS)}", (n0, n1), sorted(_ACT2_PAIRS), loc)
    reverse0, reverse1 = flag(I, "reverse0", reverse0, loc), flag(I, "reverse1", reverse1, loc)
    p = data.shape[0]
    i0 = scalar_or_vector(I, "imm0", imm0, p, loc)
    i1 = scalar_or_vector(I, "imm1", imm1, p, loc)
    rp = scalar_or_vector(I, "relu_param", relu_param, p, loc)
    cmd = reduce_cmd_name(I, reduce_cmd, loc)
    rname, combine = "add", None
    if reduce_op is not None or cmd != "idle":
        rname, combine, _ = _resolve_reduce(I, "reduce_op", "add" if reduce_op is None else reduce_op, loc,
                                           arith=True)
    if reduce_res is not None:
        _check_reduce_res(core, I, eng, reduce_res, p, loc)
        if cmd == "idle" and reduce_op is not None:
            cmd = "reset_reduce"
    reads = [data] + [t for t in (i0, i1, rp) if isinstance(t, Tensor)]
    writes = [dst] + ([reduce_res] if reduce_res is not None else [])
    if core.execute:
        x = as_f32(read(core, data, "data", I, loc)).reshape(p, -1)
        a0, a1 = operand_value(core, i0), operand_value(core, i1)
        x = f0(a0, x) if reverse0 else f0(x, a0)
        x = f1(a1, x) if reverse1 else f1(x, a1)
        x = np.broadcast_to(np.asarray(x, dtype=np.float32), (p, free_size(data)))
        if fn is None:
            y = np.where(x > 0, x, x * operand_value(core, rp)).astype(np.float32)
        else:
            y = np.asarray(fn(x), dtype=np.float32)
        write(core, dst, y)
        if cmd != "idle" or reduce_res is not None:
            _accumulate(core, cmd, rname, combine, y, p, reduce_res)
    cyc = max(float(core.target.min_ii_cycles), float(free_size(dst)))
    if reduce_res is not None:
        cyc += core.target.min_ii_cycles
    core.record(I, eng, tuple(writes), tuple(reads), cyc, loc, flops=3 * dst.size)
