"""Kernels written by the team in plain NKI v2 style (the imports are the ones a kernel file on hardware has)."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_grid(a, b):
    """a + b over a grid of 128 x 256 tiles."""
    R, C = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(R // 128):
        for j in nl.affine_range(C // 256):
            ta = nl.ndarray((128, 256), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((128, 256), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(ta, a[i * 128:(i + 1) * 128, j * 256:(j + 1) * 256])
            nisa.dma_copy(tb, b[nl.ds(i * 128, 128), nl.ds(j * 256, 256)])
            nisa.tensor_tensor(ta, ta, tb, op=nl.add)
            nisa.dma_copy(out[i * 128:(i + 1) * 128, j * 256:(j + 1) * 256], ta)
    return out


@nki.jit
def matmul_psum(at, b):
    """C = at.T @ b with K tiles accumulated in one PSUM tile (accumulate=None: first write overwrites)."""
    K, M = at.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in range(K // 128):
        s = nl.ndarray((128, M), dtype=at.dtype, buffer=nl.sbuf)
        m = nl.ndarray((128, N), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(s, at[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(m, b[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(acc, s, m)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, acc)
    nisa.dma_copy(out, res)
    return out


@nki.jit
def softmax_rows(x):
    P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    mx = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(mx, nl.maximum, t, axis=1, negate=True)
    e = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(e, nl.exp, t, bias=mx, reduce_op=nl.add, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(r, s)
    y = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(y, e, nl.multiply, r)
    nisa.dma_copy(out, y)
    return out


@nki.jit
def rmsnorm(x, w):
    """y = x / sqrt(mean(x^2) + eps) * w, rows on partitions; w is [1, F] broadcast over partitions."""
    P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    wt = nl.ndarray((P, F), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(wt, w.broadcast(0, P))
    sq = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    ss = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(sq, nl.square, t, reduce_op=nl.add, reduce_res=ss, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    rs = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(rs, ss, nl.multiply, 1.0 / F, op1=nl.add, operand1=1e-6)
    nisa.activation(rs, nl.rsqrt, rs)
    y = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(y, t, nl.multiply, rs, nl.multiply, wt)
    nisa.dma_copy(out, y)
    return out


@nki.jit
def layernorm(x):
    P, F = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    chunks = F // 512
    st = nl.ndarray((P, chunks * 6), dtype=nl.float32, buffer=nl.sbuf)
    for c in range(chunks):
        nisa.bn_stats(st[:, c * 6:(c + 1) * 6], t[:, c * 512:(c + 1) * 512])
    mv = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(mv, st)
    rstd = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(rstd, mv[:, 1:2], nl.add, 1e-5)
    nisa.activation(rstd, nl.rsqrt, rstd)
    y = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(y, t, nl.subtract, mv[:, 0:1], op1=nl.multiply, operand1=rstd)
    nisa.dma_copy(out, y)
    return out


@nki.jit
def transpose_te(x):
    P, F = x.shape
    out = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    pt = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.psum)
    nisa.nc_transpose(pt, t, engine=nisa.tensor_engine)
    st = nl.ndarray((F, P), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(st, pt)
    nisa.dma_copy(out, st)
    return out


@nki.jit
def causal_attention(qt, kt, v):
    """One head: softmax(mask(q @ k.T / sqrt(d))) @ v with q, k given transposed ([d, S]) and v as [S, d]."""
    d, S = qt.shape
    out = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.shared_hbm)
    q_s = nl.ndarray((d, S), dtype=qt.dtype, buffer=nl.sbuf)
    k_s = nl.ndarray((d, S), dtype=kt.dtype, buffer=nl.sbuf)
    v_s = nl.ndarray((S, d), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(q_s, qt)
    nisa.dma_copy(k_s, kt)
    nisa.dma_copy(v_s, v)
    sc_p = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(sc_p, q_s, k_s)                       # scores[i, j] = q_i . k_j
    sc = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(sc, sc_p, nl.multiply, 1.0 / (d ** 0.5))
    masked = nl.ndarray((S, S), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(masked, [[-1, S]], 1, sc, -1e30, cmp_op=nl.greater_equal)   # keep j <= i
    mx = nl.ndarray((S, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(mx, nl.maximum, masked, axis=1, negate=True)
    p = nl.ndarray((S, S), dtype=nl.bfloat16, buffer=nl.sbuf)
    ssum = nl.ndarray((S, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(p, nl.exp, masked, bias=mx, reduce_op=nl.add, reduce_res=ssum)
    pt_p = nl.ndarray((S, S), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_transpose(pt_p, p)
    pt = nl.ndarray((S, S), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(pt, pt_p)
    o_p = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(o_p, pt, v_s)                         # o[i, :] = sum_j p[i, j] v[j, :]
    r = nl.ndarray((S, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(r, ssum)
    o = nl.ndarray((S, d), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(o, o_p, nl.multiply, r)
    nisa.dma_copy(out, o)
    return out


@nki.jit
def scale_lnc(x):
    """Each logical core doubles its half of the rows (split by nl.program_id)."""
    R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    half = R // nl.num_programs()
    base = nl.program_id(0) * half
    for i in range(half // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[base + i * 128: base + (i + 1) * 128, :])
        nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(out[base + i * 128: base + (i + 1) * 128, :], t)
    return out
