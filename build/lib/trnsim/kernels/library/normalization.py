"""RMSNorm and LayerNorm over the last dimension, behind the PyTorch device's norm ops (NKI v2 style).

``x`` is ``[R, C]`` in HBM, normalised per row; ``w`` (and ``b``) are ``[P, C]`` with the weight row repeated on
every partition (the caller broadcasts it once in HBM), ``P = min(R, pmax)``.  Statistics are computed in fp32.
"""

from ..nki import isa as nisa
from ..nki import language as nl

MAX_COLS = 16384


def _check(C):
    if C > MAX_COLS:
        raise ValueError(f"normalisation kernel: {C} columns exceed the kernel's limit of {MAX_COLS}")


def rms_norm(x, w, eps=1e-6):
    R, C = x.shape
    _check(C)
    P = nl.tile_size.pmax
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
    wp = min(R, P)
    tw = nl.ndarray((wp, C), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(tw, w[0:wp, :])
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        t = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, :])
        sq = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        ss = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(sq, "square", t, reduce_op="add", reduce_res=ss)
        ms = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(ms, ss, "multiply", 1.0 / C, op1="add", operand1=float(eps))
        r = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(r, "rsqrt", ms)
        y = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(y, t, "multiply", r)
        res = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(res, y, tw[0:p, :], op="multiply")
        nisa.dma_copy(out[r0:r0 + p, :], res)
    return out


def layer_norm(x, w, b, eps=1e-5):
    R, C = x.shape
    _check(C)
    P = nl.tile_size.pmax
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
    wp = min(R, P)
    tw = nl.ndarray((wp, C), dtype=w.dtype, buffer=nl.sbuf)
    tb = nl.ndarray((wp, C), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(tw, w[0:wp, :])
    nisa.dma_copy(tb, b[0:wp, :])
    FM = 512   # bn_stats free size limit (nl.tile_size.bn_stats_fmax)
    nch = (C + FM - 1) // FM
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        t = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r0:r0 + p, :])
        st = nl.ndarray((p, 6 * nch), dtype=nl.float32, buffer=nl.sbuf)
        for i in range(nch):
            c0 = i * FM
            nisa.bn_stats(st[:, 6 * i:6 * (i + 1)], t[:, c0:min(C, c0 + FM)])
        mv = nl.ndarray((p, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(mv, st)
        ve = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(ve, mv[:, 1:2], "add", float(eps))
        r = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(r, "rsqrt", ve)
        y = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(y, t, "subtract", mv[:, 0:1], op1="multiply", operand1=r)
        nisa.tensor_tensor(y, y, tw[0:p, :], op="multiply")
        res = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(res, y, tb[0:p, :], op="add")
        nisa.dma_copy(out[r0:r0 + p, :], res)
    return out
