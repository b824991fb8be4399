"""Example NKI kernels: the ones README.md, `trnsim profile --help` and docs/guides/kernel-prototyping.md time."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul(a_t, b):
    """out[M, N] = a_t.T @ b for a_t [K, M] and b [K, N]: the contraction K runs on the partitions.

    Each 128-column block of a_t is loaded once and stays in SBUF while every 512-column block of b streams past
    it; the Tensor Engine accumulates the K tiles in fp32 in PSUM, and the result is rounded once to b's dtype."""
    K, M = a_t.shape
    K2, N = b.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, min(N, nl.tile_size.gemm_moving_fmax)
    if K2 != K or K % TK or M % TM or N % TN:
        raise ValueError(f"matmul: a_t {a_t.shape} and b {b.shape} need the same K, a multiple of {TK}, "
                         f"M a multiple of {TM} and N at most {TN} or a multiple of it")
    out = nl.ndarray((M, N), dtype=b.dtype, buffer=nl.shared_hbm)
    for m in range(M // TM):
        stationary = []
        for k in range(K // TK):
            t = nl.ndarray((TK, TM), dtype=a_t.dtype, buffer=nl.sbuf)
            nisa.dma_copy(t, a_t[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            stationary.append(t)
        for n in range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // TK):
                moving = nl.ndarray((TK, TN), dtype=b.dtype, buffer=nl.sbuf)
                nisa.dma_copy(moving, b[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, stationary[k], moving)
            res = nl.ndarray((TM, TN), dtype=b.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], res)
    return out


@nki.jit
def scaled_add(a, b):
    """out = 2 * a + b over [128, 512] tiles of bf16 or fp32 inputs."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    P, F = nl.tile_size.pmax, 512
    for r in range(a.shape[0] // P):
        for c in range(a.shape[1] // F):
            rows, cols = slice(r * P, (r + 1) * P), slice(c * F, (c + 1) * F)
            ta = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
            tb = nl.ndarray((P, F), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(ta, a[rows, cols])
            nisa.dma_copy(tb, b[rows, cols])
            nisa.scalar_tensor_tensor(dst=ta, data=ta, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=tb)
            nisa.dma_copy(out[rows, cols], ta)
    return out


def make_inputs():
    """matmul's inputs: a_t [512, 256] and b [512, 1024], bf16, seeded."""
    import ml_dtypes
    import numpy as np
    rng = np.random.default_rng(0)
    return (rng.standard_normal((512, 256), dtype=np.float32).astype(ml_dtypes.bfloat16),
            rng.standard_normal((512, 1024), dtype=np.float32).astype(ml_dtypes.bfloat16))


def make_add_inputs():
    """scaled_add's inputs: two [256, 1024] fp32 arrays, seeded."""
    import numpy as np
    rng = np.random.default_rng(0)
    return rng.standard_normal((256, 1024), dtype=np.float32), rng.standard_normal((256, 1024), dtype=np.float32)
