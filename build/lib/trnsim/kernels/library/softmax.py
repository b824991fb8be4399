"""Row softmax and log-softmax behind the PyTorch device's softmax ops (NKI v2 style).

``x`` is ``[R, C]`` in HBM, softmax over each row.  A row lives whole in SBUF (``C`` up to ``MAX_COLS``); the
max, the exponentials with their running sum (one Scalar Engine pass) and the scaling are computed in fp32.
"""

from ..nki import isa as nisa
from ..nki import language as nl

MAX_COLS = 14336   # the row, its fp32 exponentials and the result: 3 x 56 KiB of the 192-256 KiB partition


def row_softmax(x, log=False):
    R, C = x.shape
    if C > MAX_COLS:
        raise ValueError(f"row_softmax: {C} columns exceed the kernel's limit of {MAX_COLS}")
    P = nl.tile_size.pmax
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        t = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, :])
        mx = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(mx, "maximum", t, axis=1)
        neg = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(neg, mx, "multiply", -1.0)
        e = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(e, "exp", t, bias=neg, reduce_op="add", reduce_res=s)
        res = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        if log:
            ls = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(ls, "log", s)
            # x - max - log(sum)
            nisa.tensor_scalar(res, t, "subtract", mx, op1="subtract", operand1=ls)
        else:
            r = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(r, s)
            nisa.tensor_scalar(res, e, "multiply", r)
        nisa.dma_copy(out[r0:r0 + p, :], res)
        t = e = res = None          # the next row block's tiles reuse this block's space
    return out
