"""Kernels written by the team in legacy NKI (neuronxcc.nki, SDK 2.26) style, imports as on hardware."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

TILE_P = 128
TILE_F = 512


@nki.jit
def add_spmd(a, b):
    """a + b; launched on a 2-D grid [ceil(M/128), ceil(N/512)], masks trim the ragged edge tiles."""
    M, N = a.shape
    c = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(TILE_P)[:, None]
    i_f = nl.arange(TILE_F)[None, :]
    rows = nl.program_id(0) * TILE_P + i_p
    cols = nl.program_id(1) * TILE_F + i_f
    inside = (rows < M) & (cols < N)
    x = nl.load(a[rows, cols], mask=inside)
    y = nl.load(b[rows, cols], mask=inside)
    z = nl.add(x, y, mask=inside)
    nl.store(c[rows, cols], value=z, mask=inside)
    return c


@nki.jit
def matmul_tiled(a_t, b):
    """C = a_t.T @ b: K accumulated in PSUM with `psum += nisa.nc_matmul(...)`, M in 128-row, N in 512-col
    tiles."""
    K, M = a_t.shape
    _, N = b.shape
    c = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_P):
        for n in nl.affine_range(N // TILE_F):
            acc = nl.zeros((TILE_P, TILE_F), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_P):
                s = nl.load(a_t[k * TILE_P:(k + 1) * TILE_P, m * TILE_P:(m + 1) * TILE_P])
                mv = nl.load(b[k * TILE_P:(k + 1) * TILE_P, n * TILE_F:(n + 1) * TILE_F])
                acc += nisa.nc_matmul(s, mv)
            r = nl.copy(acc, dtype=nl.float32)
            nl.store(c[m * TILE_P:(m + 1) * TILE_P, n * TILE_F:(n + 1) * TILE_F], value=r)
    return c


@nki.jit
def softmax(x):
    """Row softmax of x [R, F] (F <= 512), one 128-row tile per program; the last tile masked."""
    R, F = x.shape
    out = nl.ndarray((R, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(TILE_P)[:, None]
    i_f = nl.arange(F)[None, :]
    rows = nl.program_id(0) * TILE_P + i_p
    t = nl.load(x[rows, i_f], mask=(rows < R))
    mx = nl.max(t, axis=1, keepdims=True, mask=(rows < R))
    e = nl.exp(nl.subtract(t, mx, mask=(rows < R)), mask=(rows < R))
    s = nl.sum(e, axis=1, keepdims=True, mask=(rows < R))
    y = nl.divide(e, s, mask=(rows < R), dtype=x.dtype)
    nl.store(out[rows, i_f], value=y, mask=(rows < R))
    return out


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis of x [R, F]; gamma and beta are [1, F], broadcast to every row by the DMA."""
    R, F = x.shape
    out = nl.ndarray((R, F), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(TILE_P)[:, None]
    i_f = nl.arange(F)[None, :]
    g = nl.load(gamma[0 * i_p, i_f])
    bt = nl.load(beta[0 * i_p, i_f])
    for r in nl.affine_range((R + TILE_P - 1) // TILE_P):
        rows = r * TILE_P + i_p
        keep = rows < R
        t = nl.load(x[rows, i_f], mask=keep, dtype=nl.float32)
        mean = nl.mean(t, axis=1, keepdims=True, mask=keep)
        xc = nl.subtract(t, mean, mask=keep)
        var = nl.mean(nl.square(xc, mask=keep), axis=1, keepdims=True, mask=keep)
        rstd = nl.rsqrt(nl.add(var, eps, mask=keep), mask=keep)
        y = nl.multiply(xc, rstd, mask=keep)
        y = nl.add(nl.multiply(y, g, mask=keep), bt, mask=keep, dtype=x.dtype)
        nl.store(out[rows, i_f], value=y, mask=keep)
    return out


@nki.jit
def avg_pool2d(x, pool):
    """k x k average pooling with stride k of x [C, H, W] (C <= 128 channels on partitions), index arithmetic
    on nl.mgrid."""
    C, H, W = x.shape
    Ho, Wo = H // pool, W // pool
    out = nl.ndarray((C, Ho, Wo), dtype=x.dtype, buffer=nl.shared_hbm)
    c, i, j, di, dj = nl.mgrid[0:C, 0:Ho, 0:Wo, 0:pool, 0:pool]
    win = nl.load(x[c, pool * i + di, pool * j + dj])
    s = nl.sum(win, axis=(3, 4), dtype=nl.float32)
    avg = nl.multiply(s, 1.0 / (pool * pool), dtype=x.dtype)
    g = nl.mgrid[0:C, 0:Ho, 0:Wo]
    nl.store(out[g.p, g.x, g.y], value=avg)
    return out


@nki.jit
def transpose2d(x):
    """out = x.T for x [F, P] (P <= 128) through nl.load_transpose2d."""
    F, P = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load_transpose2d(x)
    nl.store(out, value=t)
    return out


@nki.jit
def add_into(a, b, c):
    """Old style: the caller passes the output array `c`, which the kernel writes."""
    t = nl.load(a) + nl.load(b)
    nl.store(c, value=t)
