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
    """Per 128-row tile: the row statistics on the Vector Engine (``bn_stats``/``bn_aggr``), ``rsqrt`` on the
    Scalar Engine, then the three elementwise passes spread over the engines that can run them, so that no engine
    is busier than the tile's loads and stores: ``(x - mean) * rstd`` (one ``tensor_scalar``) and ``+ b`` on
    GpSimd, ``* w`` on the Vector Engine; the four stages are software pipelined over the tiles (in-order
    engines: iteration j issues stage s of tile j - s).  (All on the Vector Engine, as the plain NKI layer norm writes them, it
    does ``bn_stats`` + ``tensor_scalar`` + two fp32 ``tensor_tensor`` = 6N cycles per tile against 4N of DMA
    time at fp32: the Vector Engine bounds the kernel; split, it does 3N and GpSimd 3N, each engine under the
    DMA time.  Instruction costs: docs/hardware.md, "Instruction cost model".)"""
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

    def stats(r0):
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
        nisa.tensor_scalar(ve, mv[:, 1:2], "add", float(eps), engine="scalar")
        r = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(r, "rsqrt", ve)
        return r0, p, t, mv, r

    def shift(r0, p, t, mv, r):
        y = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(y, t, "subtract", mv[:, 0:1], op1="multiply", operand1=r, engine="gpsimd")
        return r0, p, y

    def scale(r0, p, y):
        nisa.tensor_tensor(y, y, tw[0:p, :], op="multiply", engine="vector")
        return r0, p, y

    def add_store(r0, p, y):
        res = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(res, y, tb[0:p, :], op="add", engine="gpsimd")
        nisa.dma_copy(out[r0:r0 + p, :], res)

    # software pipelined over tiles: iteration j issues stage s of tile j - s, so each instruction depends on one
    # issued an iteration earlier and no in-order engine waits on another between its own instructions
    stages = (stats, shift, scale, add_store)
    live = [None] * len(stages)
    tiles = list(range(0, R, P))
    for j in range(len(tiles) + len(stages) - 1):
        for s in range(len(stages) - 1, -1, -1):
            if s == 0:
                live[0] = stats(tiles[j]) if j < len(tiles) else None
            elif live[s - 1] is not None:
                live[s] = stages[s](*live[s - 1])
                live[s - 1] = None
    return out
