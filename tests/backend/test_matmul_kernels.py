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


def _epilogue_ref(at, b, full, small, steps):
    """float64 reference of ``blocked_matmul``'s epilogue chain (``fused._apply``'s steps: "vec" adds the next of
    the other inputs round-robin, "act" is exp, "vs" multiplies by 1, "cast" copies)."""
    x = at.astype(np.float64).T @ b.astype(np.float64)
    others = [np.asarray(f, np.float64) for f in full] + [np.asarray(s, np.float64)[0] for s in small]
    for k, st in enumerate(steps):
        if st == "vec":
            x = x + (others[k % len(others)] if others else x)
        elif st == "act":
            x = np.exp(x)
    return x


@pytest.mark.parametrize("operands", ["float32", "bfloat16"])
@pytest.mark.parametrize("m, k, n, mb, nb, kc", [
    (512, 256, 1024, 256, 1024, 256),      # whole K, two block rows
    (384, 384, 1536, 256, 1024, 128),      # chunked K, a partial last block in both dimensions
])
def test_blocked_epilogue_numerics_against_float64(operands, m, k, n, mb, nb, kc):
    import ml_dtypes
    rng = np.random.default_rng(7)
    dt = ml_dtypes.bfloat16 if operands == "bfloat16" else np.float32
    at = (0.05 * rng.standard_normal((k, m))).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    res = rng.standard_normal((m, n)).astype(dt)
    bias = np.broadcast_to(rng.standard_normal((1, n)), (128, n)).astype(dt)
    steps = ("vec", "vec", "act")            # exp(A^T B + residual + bias)
    o = np.asarray(run_kernel(matmul_blocked.blocked_matmul, (at, b, res, bias),
                              {"mb": mb, "nb": nb, "kc": kc, "n_small": 1, "steps": steps}, target="trn1").outputs,
                   np.float64)
    ref = _epilogue_ref(at, b, [res], [bias], steps)
    # fp32: the product's rounding; bf16: the output is bf16 (8 bits of mantissa)
    np.testing.assert_allclose(o, ref, rtol=1e-5 if operands == "float32" else 4e-3, atol=0)


def test_blocked_epilogue_two_outputs_and_bf16_operand_cast():
    """fp32 operands held as bf16 by the loading DMAs (``operand_dtype``), two outputs, an epilogue of one input
    added to itself (the PSUM tile is first copied out: at most one tensor_tensor input may be in PSUM)."""
    import ml_dtypes
    rng = np.random.default_rng(8)
    at = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 1024)).astype(np.float32)
    o1, o2 = run_kernel(matmul_blocked.blocked_matmul, (at, b),
                        {"mb": 128, "nb": 512, "kc": 256, "steps": ("vec",), "n_out": 2,
                         "operand_dtype": "bfloat16"}, target="trn1").outputs
    rounded = 2 * _ref(at.astype(ml_dtypes.bfloat16).astype(np.float32), b.astype(ml_dtypes.bfloat16).astype(np.float32))
    for o in (o1, o2):
        np.testing.assert_allclose(np.asarray(o, np.float64), rounded, rtol=0, atol=1e-3)
        assert np.abs(np.asarray(o, np.float64) - 2 * _ref(at, b)).max() > 1e-2     # not the fp32 product


def test_blocked_matmul_names_a_dimension_not_padded():
    with pytest.raises(ValueError, match=r"rows M = 200 is not a multiple of 128"):
        run_kernel(matmul_blocked.blocked_matmul, (np.zeros((128, 200), np.float32), np.zeros((128, 512), np.float32)),
                   {}, target="trn1", execute=False)


def test_epilogue_sbuf_shrinks_the_block_plan_to_fit():
    """The epilogue's bands are taken from the whole-K budget: a plan that fits without them may not with them."""
    tg = get_target("trn1")
    m, n, k = 1280, 1536, 3072
    epi = matmul_blocked.epilogue_bytes((4,), 4, 1, True)
    assert epi == (0, 2 * (4 + 4 + 4))
    plain = matmul_blocked.block_shape(tg, m, n, k, 4)
    with_epi = matmul_blocked.block_shape(tg, m, n, k, 4, epi)
    budget = matmul_blocked.WHOLE_K_FRACTION * tg.sbuf_partition_bytes
    for (mb, nb, kc), (fixed, per_col) in ((plain, (0, 0)), (with_epi, epi)):
        if kc == k:
            assert (k // 128) * (mb + 2 * nb) * 4 + fixed + per_col * nb <= budget
    assert plain[2] == k and with_epi[2] < k     # whole K without the epilogue, chunked with it
