"""Fused kernels behind ``torch.compile(backend="neuron")`` (NKI v2 style).

The compile backend groups an aten graph's ops into these kernels and charges each group the shape-only simulation
of the kernel it becomes.  A step list says which instructions run on the on-chip tiles between the loads and the
stores; every intermediate stays in SBUF (fp32), only the group's inputs are read from HBM and only its
materialised outputs are written back.

Step names (one instruction each on the working tile):

* ``"act"``  -- an activation on the Scalar Engine (exp, tanh, rsqrt, sigmoid, ...)
* ``"vec"``  -- a tensor-tensor op on the Vector Engine (the second operand is the next input tile, or the tile
  itself when the group has a single input)
* ``"vs"``   -- a tensor-scalar op on the Vector Engine (an immediate, or a per-row ``[p, 1]`` operand in a row
  kernel)
* ``"cast"`` -- a copy with conversion (``tensor_copy``)
* row kernels only: ``"red"`` (``tensor_reduce`` over the free axis into ``[p, 1]``), ``"row"`` (a Vector Engine
  op on a ``[p, 1]`` tile), ``"rowact"`` (an activation on a ``[p, 1]`` tile)
"""

from ..nki import isa as nisa
from ..nki import language as nl

FREE_TILE = 2048   # elements per partition per instruction, as in elementwise.py
MAX_COLS = 16384   # a row kernel holds whole rows in SBUF: the limit of softmax.py and normalization.py


def _apply(step, t, others, k, src=None):
    """Issue one step writing tile ``t`` from ``src`` (default ``t`` itself: in place); ``others`` are the other
    input tiles (same shape), used round-robin.  An engine reads and writes any dtype and computes in fp32, so
    the first step of a chain reads the loaded tile directly and the last writes the output's dtype directly (no
    separate conversion copies)."""
    src = t if src is None else src
    if step == "act":
        nisa.activation(t, "exp", src)
    elif step == "vec":
        u = others[k % len(others)] if others else src
        nisa.tensor_tensor(t, src, u, op="add")
    elif step == "vs":
        nisa.tensor_scalar(t, src, "multiply", 1.0)
    elif step == "cast":
        nisa.tensor_copy(t, src)
    else:
        raise ValueError(f"fused kernel: unknown step {step!r}")


def _chain(steps, first, others, make_work, out_tile):
    """Run ``steps`` from tile ``first``: intermediate results in an fp32 work tile (``make_work()``), the last step
    straight into ``out_tile`` when one is given; returns the tile holding the result."""
    cur = first
    for k, st in enumerate(steps):
        last = k == len(steps) - 1
        dst = out_tile if (last and out_tile is not None) else (cur if cur is not first else make_work())
        _apply(st, dst, others, k, src=cur)
        cur = dst
    return cur


def pointwise(*ins, shape, dtype="float32", n_small=0, steps=(), n_out=1):
    """A chain of elementwise steps over ``shape = (R, C)``: each full input (the first ``len(ins) - n_small``, of
    that shape) is loaded once per tile, each small (broadcast) input once for the whole kernel, each of the
    ``n_out`` outputs (of ``dtype``) stored once per tile.  With no full input the tile starts from a memset (a
    fill, ``arange``)."""
    full = ins[:len(ins) - n_small]
    small = ins[len(ins) - n_small:]
    R, C = shape
    P = nl.tile_size.pmax
    outs = [nl.ndarray((R, C), dtype=dtype, buffer=nl.shared_hbm, name=f"out{i}") for i in range(n_out)]
    res = []
    for s in small:
        p, f = s.shape
        t = nl.ndarray((p, f), dtype=s.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, s)
        res.append(t)
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        for c0 in range(0, C, FREE_TILE):
            f = min(FREE_TILE, C - c0)
            tiles = []
            for x in full:
                t = nl.ndarray((p, f), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(t, x[r0:r0 + p, c0:c0 + f])
                tiles.append(t)
            others = tiles[1:] + [s[0:p, 0:f] for s in res if s.shape[0] >= p and s.shape[1] >= f]
            if tiles:
                first = tiles[0]
            else:
                first = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
                nisa.memset(first, 0.0)
            single = n_out == 1 and steps
            out_t = nl.ndarray((p, f), dtype=outs[0].dtype, buffer=nl.sbuf) if single else None
            work = _chain(steps, first, others, lambda: nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf),
                          out_t)
            for o in outs:
                if single:
                    t = work                    # the last step wrote the output's dtype
                else:
                    t = nl.ndarray((p, f), dtype=o.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(t, work)
                nisa.dma_copy(o[r0:r0 + p, c0:c0 + f], t)
    return tuple(outs) if n_out != 1 else outs[0]


def rows(*ins, shape, dtype="float32", n_row=0, steps=(), n_out=1, n_out_row=0):
    """Ops over whole rows of ``[R, C]`` tensors (softmax, normalisation, their backward, row reductions) with the
    elementwise ops around them: the full inputs are loaded once per 128-row tile, the last ``n_row`` inputs are
    per-row ``[R, 1]`` values; ``n_out`` full and ``n_out_row`` per-row outputs are stored."""
    full = ins[:len(ins) - n_row]
    rowin = ins[len(ins) - n_row:]
    R, C = shape
    if C > MAX_COLS:
        raise ValueError(f"fused row kernel: {C} columns exceed the kernel's limit of {MAX_COLS}")
    P = nl.tile_size.pmax
    outs = [nl.ndarray((R, C), dtype=dtype, buffer=nl.shared_hbm, name=f"out{i}") for i in range(n_out)]
    routs = [nl.ndarray((R, 1), dtype=nl.float32, buffer=nl.shared_hbm, name=f"row{i}") for i in range(n_out_row)]
    for r0 in range(0, R, P):
        p = min(P, R - r0)
        tiles = []
        for x in full:
            t = nl.ndarray((p, C), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x[r0:r0 + p, :])
            tiles.append(t)
        rtiles = []
        for x in rowin:
            t = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(t, x[r0:r0 + p, :])
            rtiles.append(t)
        work = nl.ndarray((p, C), dtype=nl.float32, buffer=nl.sbuf)
        if tiles:
            nisa.tensor_copy(work, tiles[0])
        else:
            nisa.memset(work, 0.0)
        rv = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
        if rtiles:
            nisa.tensor_copy(rv, rtiles[0])
        else:
            nisa.memset(rv, 0.0)
        others = tiles[1:]
        for k, st in enumerate(steps):
            if st == "red":
                nisa.tensor_reduce(rv, "add", work, axis=1)
            elif st == "row":
                nisa.tensor_scalar(rv, rv, "multiply", 1.0)
            elif st == "rowact":
                nisa.activation(rv, "rsqrt", rv)
            elif st == "vs":
                nisa.tensor_scalar(work, work, "multiply", rv)
            else:
                _apply(st, work, others, k)
        for o in outs:
            t = nl.ndarray((p, C), dtype=o.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(t, work)
            nisa.dma_copy(o[r0:r0 + p, :], t)
        for o in routs:
            nisa.dma_copy(o[r0:r0 + p, :], rv)
    res = tuple(outs) + tuple(routs)
    return res if len(res) != 1 else res[0]


SBUF_BUDGET_FRACTION = 0.75   # as matmul_resident.py


def epilogue_fits(target, m, k, n, itemsize, n_full):
    """Whether the resident operands, one output band and the band's epilogue inputs fit the SBUF budget."""
    kt = (k + target.pmax - 1) // target.pmax
    need = kt * (m + n) * itemsize + (1 + n_full) * n * itemsize + n * 4
    return need <= SBUF_BUDGET_FRACTION * target.sbuf_partition_bytes


def matmul_epilogue(at, b, *ins, n_small=0, steps=(), n_out=1, operand_dtype=None):
    """``C = AT^T @ B`` with operands resident in SBUF (as ``matmul_resident.resident_matmul``) and an elementwise
    epilogue applied to each output band on its way out of PSUM: full ``[M, N]`` inputs (a residual) are loaded per
    band, small ones (a bias row, broadcast over partitions) once; ``n_out`` outputs are stored per band.
    ``operand_dtype``: the dtype the operands are held in SBUF (and multiplied in), cast by the loading DMAs
    (default: their own)."""
    K, M = at.shape
    _, N = b.shape
    full = ins[:len(ins) - n_small]
    small = ins[len(ins) - n_small:]
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    TN = min(TN, N)
    KT = K // TK
    outs = [nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm, name=f"c{i}") for i in range(n_out)]
    a_s = nl.ndarray((TK, KT * M), dtype=operand_dtype or at.dtype, buffer=nl.sbuf, name="at_resident")
    b_s = nl.ndarray((TK, KT * N), dtype=operand_dtype or b.dtype, buffer=nl.sbuf, name="b_resident")
    for k in range(KT):
        nisa.dma_copy(a_s[:, k * M:(k + 1) * M], at[k * TK:(k + 1) * TK, :])
        nisa.dma_copy(b_s[:, k * N:(k + 1) * N], b[k * TK:(k + 1) * TK, :])
    res = []
    for s in small:
        t = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, s)
        res.append(t)
    for m in range(M // TM):
        single = n_out == 1
        # PSUM is evacuated straight into the output's dtype when no epilogue follows
        band = nl.ndarray((TM, N), dtype=outs[0].dtype if single and not steps else nl.float32, buffer=nl.sbuf,
                          name="c_band")
        tiles = []
        for x in full:
            t = nl.ndarray((TM, N), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, x[m * TM:(m + 1) * TM, :])
            tiles.append(t)
        for n in range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(KT):
                nisa.nc_matmul(acc, a_s[:, k * M + m * TM:k * M + (m + 1) * TM],
                               b_s[:, k * N + n * TN:k * N + (n + 1) * TN])
            nisa.tensor_copy(band[:, n * TN:(n + 1) * TN], acc)
        others = tiles + [s for s in res if tuple(s.shape) == (TM, N)]
        out_t = nl.ndarray((TM, N), dtype=outs[0].dtype, buffer=nl.sbuf) if single and steps else None
        band = _chain(steps, band, others, lambda: band, out_t)
        for o in outs:
            if single:
                t = band                        # already the output's dtype
            else:
                t = nl.ndarray((TM, N), dtype=o.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(t, band)
            nisa.dma_copy(o[m * TM:(m + 1) * TM, :], t)
    return tuple(outs) if n_out != 1 else outs[0]
