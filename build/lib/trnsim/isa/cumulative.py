"""Vector Engine instructions that run through its accumulator registers: tensor_scalar_cumulative."""

from __future__ import annotations

import numpy as np

from ..memory import Tensor
from .common import (as_f32, check_free_match, check_same_partitions, free_size, operand_value, read,
                     scalar_or_vector, write)
from .errors import fail
from .scalar import reduce_cmd_name
from .vector import _onchip_operands, _resolve_arith, elementwise_cycles

__all__ = ["tensor_scalar_cumulative"]

_CUM_OPS = {"add": (np.add, 0.0), "subtract": (np.subtract, 0.0), "multiply": (np.multiply, 1.0),
            "maximum": (np.maximum, -np.inf), "minimum": (np.minimum, np.inf)}
_NO_INT32 = ("int32", "uint32")


def _vector_regs(core, p):
    """The Vector Engine's per-partition accumulator registers (kept across instructions on the core)."""
    regs = getattr(core, "vector_acc_regs", None)
    if regs is None or regs.shape[0] < p:
        regs = np.zeros((max(p, 128), 1), dtype=np.float32)
        core.vector_acc_regs = regs
    return regs


def tensor_scalar_cumulative(core, loc, dst, src, op0, op1, imm0, imm1=None, reduce_cmd="reset_reduce"):
    """Per partition, along the free elements: ``reg = op1(op0(src[i], imm0), reg); dst[i] = reg`` (fp32), the
    register starting from op1's identity (``reset_reduce``), from ``imm1`` (``load_reduce``) or from its value
    left by the previous accumulating instruction (``reduce``), as the NKI reference's pseudocode."""
    I = "tensor_scalar_cumulative"
    eng = "vector"
    _onchip_operands(core, I, eng, loc, ("dst", dst), ("src", src))
    check_same_partitions(I, (("dst", dst), ("src", src)), loc)
    check_free_match(I, (("dst", dst), ("src", src)), loc)
    for name, t in (("dst", dst), ("src", src)):
        if t.dtype.name in _NO_INT32:
            fail(I, name, f"has dtype {t.dtype.name}; int32/uint32 are not supported by this instruction",
                 t.dtype.name, "not int32/uint32", loc)
    _, f0, _ = _resolve_arith(I, "op0", op0, loc)
    n1, _, _ = _resolve_arith(I, "op1", op1, loc)
    if n1 not in _CUM_OPS:
        fail(I, "op1", f"{n1!r} cannot accumulate; allowed: {', '.join(_CUM_OPS)}", n1, tuple(_CUM_OPS), loc)
    f1, ident = _CUM_OPS[n1]
    cmd = reduce_cmd_name(I, reduce_cmd, loc, default="reset_reduce")
    if cmd not in ("reset_reduce", "load_reduce", "reduce"):
        fail(I, "reduce_cmd", f"is {cmd}; tensor_scalar_cumulative takes reset_reduce, load_reduce or reduce", cmd,
             ("reset_reduce", "load_reduce", "reduce"), loc)
    p = src.shape[0]
    o0 = scalar_or_vector(I, "imm0", imm0, p, loc)
    o1 = scalar_or_vector(I, "imm1", imm1, p, loc, optional=cmd != "load_reduce")
    reads = [src] + [o for o in (o0, o1) if isinstance(o, Tensor)]
    if core.execute:
        x = f0(as_f32(read(core, src, "src", I, loc)).reshape(p, -1), operand_value(core, o0))
        x = np.broadcast_to(np.asarray(x, dtype=np.float32), (p, free_size(src)))
        regs = _vector_regs(core, p)
        if cmd == "reset_reduce":
            start = np.full((p, 1), ident, dtype=np.float32)
        elif cmd == "load_reduce":
            start = np.broadcast_to(operand_value(core, o1), (p, 1)).astype(np.float32)
        else:
            start = regs[:p].copy()
        if n1 == "subtract":              # reg = x[i] - reg: alternating, done column by column
            out = np.empty_like(x)
            r = start[:, 0]
            for i in range(x.shape[1]):
                r = x[:, i] - r
                out[:, i] = r
        else:
            # ufunc.accumulate combines left to right, one fp32 operation per element, as the register does
            out = f1.accumulate(np.concatenate([start, x], axis=1), axis=1, dtype=np.float32)[:, 1:]
        if out.shape[1]:
            regs[:p, 0] = out[:, -1]
        write(core, dst, out)
    core.record(I, eng, (dst,), tuple(reads), elementwise_cycles(core, eng, free_size(dst), dst, [src], "scan"),
                loc, flops=2 * dst.size)
