"""The library matmul kernels the device's matmul ops are priced with: numerics against float64, and the plan
choices their cost rests on (resident: b first, at by column chunks; blocked: the block shape whose loads take the
DMA engines the least time)."""

import numpy as np
import pytest

from trnsim.kernels.jit import run_kernel
from trnsim.kernels.library import matmul_blocked, matmul_resident
from trnsim.targets import get_target


def _ref(at, b):
    return at.astype(np.float64).T @ b.astype(np.float64)


@pytest.mark.parametrize("chunk", [None, 256, 384])       # 384: chunks of 384 and a last one of 256 columns
def test_resident_numerics_against_float64(chunk):
    rng = np.random.default_rng(5)
    at = rng.standard_normal((256, 640)).astype(np.float32)
    b = rng.standard_normal((256, 1024)).astype(np.float32)
    o = np.asarray(run_kernel(matmul_resident.resident_matmul, (at, b), {"chunk": chunk}, target="trn1").outputs)
    np.testing.assert_allclose(o, _ref(at, b), rtol=0, atol=1e-4)


def test_resident_chunk_reaches_the_dma_knee():
    tg = get_target("trn1")
    c = matmul_resident.a_chunk(tg, 4096, 2)
    assert c % 128 == 0 and c * 2 >= tg.dma_knee_bytes_per_partition and (c - 128) * 2 < tg.dma_knee_bytes_per_partition
    assert matmul_resident.a_chunk(tg, 256, 2) == 256
    with pytest.raises(ValueError, match="not a multiple of 128"):
        run_kernel(matmul_resident.resident_matmul, (np.zeros((128, 256), np.float32),
                                                     np.zeros((128, 128), np.float32)), {"chunk": 100},
                   target="trn1", execute=False)


def test_blocked_numerics_with_a_wide_block_row_against_float64():
    rng = np.random.default_rng(6)
    at = rng.standard_normal((256, 1024)).astype(np.float32)
    b = rng.standard_normal((256, 1024)).astype(np.float32)
    o = np.asarray(run_kernel(matmul_blocked.blocked_matmul, (at, b), {"mb": 1024, "nb": 512, "kc": 256},
                              target="trn1").outputs)
    np.testing.assert_allclose(o, _ref(at, b), rtol=0, atol=1e-4)


@pytest.mark.parametrize("m, k, n", [(2048, 4096, 1024), (4096, 2048, 1024), (1024, 2048, 4096)])
def test_block_shape_is_the_whole_k_plan_with_the_least_dma_time(m, k, n):
    tg = get_target("trn1")
    mb, nb, kc = matmul_blocked.block_shape(tg, m, n, k, 2)
    assert kc == k
    kt = k // 128
    budget = matmul_blocked.WHOLE_K_FRACTION * tg.sbuf_partition_bytes
    plans = [(matmul_blocked._strip_loads_ns(tg, m, n, kt, a, c, 2), a, c)
             for a in (128, 256, 512, 1024) for c in (512, 1024)
             if a <= m and c <= n and (a // 128) * (c // 512) <= tg.psum_banks and kt * (a + 2 * c) * 2 <= budget]
    assert matmul_blocked._strip_loads_ns(tg, m, n, kt, mb, nb, 2) == min(p[0] for p in plans)
    assert (mb // 128) * (nb // 512) <= tg.psum_banks
