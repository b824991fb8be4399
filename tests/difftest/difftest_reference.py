"""Stand-ins for a hardware run of difftest_kernels.matmul_k: the same name, computed in float64 on the host."""

import numpy as np


def matmul_k(at, b):
    return (at.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)


def matmul_k_wrong(at, b):
    out = matmul_k(at, b)
    out[3, 5] += 0.5            # one wrong element
    return out


matmul_k_wrong.__name__ = "matmul_k"
