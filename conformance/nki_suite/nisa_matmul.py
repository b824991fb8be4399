"""Numerics cases of the Tensor Engine instructions: nc_matmul, nc_transpose."""

from __future__ import annotations

import numpy as np

from .references import FLOATS, TINY, U32, f64
from .harness import _M, _gen, _ld, _new, _numerics, _sim, _st


@_numerics("nisa.nc_matmul", ["float32", "bfloat16", "float16", "float8_e4m3"])
def _mm(dt, rng):
    nisa = _M["nisa"]
    cases = []
    specs = [(1, 1, 1, 1), (128, 128, 512, 1), (32, 13, 100, 2), (77, 128, 1, 1), (127, 1, 512, 3), (128, 64, 33, 1),
             (5, 7, 511, 1)]
    for i, (K, M, N, reps) in enumerate(specs):
        a = _gen(rng, (reps, K, M), dt, -2, 2)
        b = _gen(rng, (reps, K, N), dt, -2, 2)
        offset = 0 if N > 256 else (i % 2) * (512 - N)     # dst placed at the end of its bank

        def thunk(a=a, b=b, K=K, M=M, N=N, reps=reps, offset=offset):
            def body(x, y):
                ps = _new((M, 512), "float32", "psum")
                d = ps[:, offset:offset + N]
                for r in range(reps):
                    tx, ty = _ld(x[r]), _ld(y[r])
                    nisa.nc_matmul(d, tx, ty, accumulate=None if r == 0 else True)
                sb = _new((M, N), "float32")
                nisa.tensor_copy(sb, d)
                return (_st(sb),)
            got, = _sim(body, a, b)
            A, B = f64(a), f64(b)
            ref = sum(A[r].T @ B[r] for r in range(reps))
            # K products (exact in fp32 for <=12-bit significands; one rounding for fp32) summed in fp32 per
            # matmul, then reps PSUM accumulations: gamma_{reps*K+1} * sum |a||b| (Higham 3.1)
            n = reps * K + 1
            mag = sum(np.abs(A[r]).T @ np.abs(B[r]) for r in range(reps))
            return [("dst", got, ref, n * U32 / (1 - n * U32) * mag + TINY)]
        cases.append((f"K={K} M={M} N={N} accumulate x{reps} psum offset={offset}", thunk))
    # PE-array tiling: a 64x64 (or 32x32) tile of the array at a tile position computes the same product
    for (K, M, N), size, pos in [((64, 64, 512), (64, 64), (64, 0)), ((32, 17, 100), (32, 32), (96, 32)),
                                 ((64, 128, 7), (64, 128), (0, 0))]:
        a = _gen(rng, (K, M), dt, -2, 2)
        b = _gen(rng, (K, N), dt, -2, 2)

        def tiled(a=a, b=b, K=K, M=M, N=N, size=size, pos=pos):
            def body(x, y):
                ps = _new((M, N), "float32", "psum")
                nisa.nc_matmul(ps, _ld(x), _ld(y), tile_position=pos, tile_size=size)
                sb = _new((M, N), "float32")
                nisa.tensor_copy(sb, ps)
                return (_st(sb),)
            got, = _sim(body, a, b, target="trn2")        # 32-row tiles: NeuronCore-v3 and later
            A, B = f64(a), f64(b)
            n = K + 1
            return [("dst", got, A.T @ B, n * U32 / (1 - n * U32) * (np.abs(A).T @ np.abs(B)) + TINY)]
        cases.append((f"K={K} M={M} N={N} tile_size={size} tile_position={pos}", tiled))
    if dt == "float8_e4m3":
        for K, M, N in [(1, 1, 1), (128, 128, 512), (64, 33, 100)]:
            a = _gen(rng, (K, 2, M), dt, -2, 2)
            b = _gen(rng, (K, 2, N), dt, -2, 2)

            def thunk(a=a, b=b, K=K, M=M, N=N):
                def body(x, y):
                    ps = _new((M, N), "float32", "psum")
                    nisa.nc_matmul(ps, _ld(x), _ld(y), perf_mode="double_row")
                    sb = _new((M, N), "float32")
                    nisa.tensor_copy(sb, ps)
                    return (_st(sb),)
                got, = _sim(body, a, b, target="trn2")      # fp8 double-row: trn2 and later
                A = f64(a).transpose(1, 0, 2).reshape(2 * K, M)
                B = f64(b).transpose(1, 0, 2).reshape(2 * K, N)
                n = 2 * K
                return [("dst", got, A.T @ B, n * U32 / (1 - n * U32) * (np.abs(A).T @ np.abs(B)) + TINY)]
            cases.append((f"double_row K=2x{K} M={M} N={N}", thunk))
    return cases


@_numerics("nisa.nc_transpose", FLOATS)
def _ncT(dt, rng):
    nisa = _M["nisa"]
    cases = []
    for i, (p, f, eng) in enumerate([(1, 1, "tensor"), (128, 128, "tensor"), (77, 13, "tensor"), (1, 128, "tensor"),
                                     (1, 1, "vector"), (32, 32, "vector"), (7, 31, "vector"), (32, 1, "vector")]):
        x = _gen(rng, (p, f), dt)
        pl = ("sbuf", "psum") if eng == "tensor" else [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")][i % 3]

        def thunk(x=x, p=p, f=f, eng=eng, pl=pl):
            def body(a):
                ta = _ld(a, pl[0])
                d = _new((f, p), dt, pl[1])
                nisa.nc_transpose(d, ta, engine=getattr(nisa, f"{eng}_engine"))
                return (_st(d),)
            got, = _sim(body, x)
            return [("dst", got, f64(x).T, 0.0)]
        cases.append((f"[{p},{f}] {eng} engine {pl}", thunk))
    return cases
