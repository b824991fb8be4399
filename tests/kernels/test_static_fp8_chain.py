"""Numerics two nki-library golden checks rely on (issue 13, docs/notes/nki-library.md), each pinned by a small kernel of our
own against a float64 / ml_dtypes reference:

- static fp8 input quantization as nki-library's STATIC projections write it: scale on the Scalar Engine into bf16,
  clip to +-240 with ``tensor_scalar(minimum, maximum)`` into a float8_e4m3 tile (round to nearest even, ties
  included), a Tensor Engine matmul of that fp8 tile with fp8 weights into fp32 PSUM, and a bf16 dequantization;
- a kernel-allocated ``nl.ndarray(..., buffer=nl.shared_hbm)`` output keeps the documented never-written sentinel
  (4 for integers, NaN for floats) where the kernel does not write it: nothing zero-fills it.
"""

import ml_dtypes
import numpy as np

import trnsim

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

F8, BF = ml_dtypes.float8_e4m3, ml_dtypes.bfloat16
K, T, N = 128, 64, 32           # contraction (partitions), tokens, output columns
IN_SCALE, DEQ = 0.5, 0.375      # x / IN_SCALE is exact in bf16 (a power of two); DEQ is not a power of two


def _inputs():
    rng = np.random.default_rng(7)
    mag = rng.uniform(0.5, 200.0, (K, T))                       # |x / IN_SCALE| in [1, 400]: clips above 240
    x = (np.sign(rng.uniform(-1, 1, (K, T))) * mag).astype(BF)
    # fp8 ties after scaling: 17 lies halfway between 16 and 18 (-> 16, even), 19 between 18 and 20 (-> 20),
    # 232 between 224 and 240 (-> 224)
    x[0, :3] = np.array([8.5, 9.5, 116.0], dtype=np.float32).astype(BF)
    w = rng.choice(np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), (K, N)).astype(F8)
    return x, w


@nki.jit
def _static_fp8_projection(x, w):
    out = nl.ndarray((T, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    q_out = nl.ndarray((K, T), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
    flags = nl.ndarray((8, 4), dtype=nl.uint8, buffer=nl.shared_hbm)       # only row 0 is written below
    spill = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)     # only rows 0..1 are written below
    xs = nl.ndarray((K, T), dtype=nl.bfloat16, buffer=nl.sbuf)
    a = nl.ndarray((K, T), dtype=nl.bfloat16, buffer=nl.sbuf)
    q = nl.ndarray((K, T), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    ws = nl.ndarray((K, N), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    ps = nl.ndarray((T, N), dtype=nl.float32, buffer=nl.psum)
    o = nl.ndarray((T, N), dtype=nl.bfloat16, buffer=nl.sbuf)
    f = nl.ndarray((1, 4), dtype=nl.uint8, buffer=nl.sbuf)
    g = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=xs, src=x)
    nisa.dma_copy(dst=ws, src=w)
    nisa.activation(dst=a, op=nl.copy, data=xs, scale=1.0 / IN_SCALE)
    nisa.tensor_scalar(dst=q, data=a, op0=nl.minimum, operand0=240.0, op1=nl.maximum, operand1=-240.0)
    nisa.nc_matmul(dst=ps, stationary=q, moving=ws)
    nisa.activation(dst=o, op=nl.copy, data=ps, scale=DEQ)
    nisa.dma_copy(dst=out, src=o)
    nisa.dma_copy(dst=q_out, src=q)
    nisa.memset(dst=f, value=1)
    nisa.dma_copy(dst=flags[0:1, :], src=f)
    nisa.memset(dst=g, value=2.5)
    nisa.dma_copy(dst=spill[0:2, :], src=g)
    return out, q_out, flags, spill


def _reference(x, w):
    a = (x.astype(np.float32) * np.float32(1.0 / IN_SCALE)).astype(BF)
    q = np.clip(a.astype(np.float64), -240.0, 240.0).astype(np.float32).astype(F8)
    r = q.astype(np.float64).T @ w.astype(np.float64)          # exact here: |sum| < 2**16, step 2**-4
    o = (r.astype(np.float32) * np.float32(DEQ)).astype(BF)
    return o, q


def test_static_fp8_quantized_projection_matches_float64():
    x, w = _inputs()
    out, q, flags, spill = nki.simulate(_static_fp8_projection, target="trn2")(x, w)
    o_ref, q_ref = _reference(x, w)
    assert q.dtype == F8 and out.dtype == BF
    np.testing.assert_array_equal(q.astype(np.float32), q_ref.astype(np.float32))
    assert q[0, :3].astype(np.float32).tolist() == [16.0, 20.0, 224.0]      # ties to even
    assert np.abs(q.astype(np.float32)).max() == 240.0                       # clipped, not saturated elsewhere
    np.testing.assert_array_equal(out.astype(np.float32), o_ref.astype(np.float32))


def test_unwritten_rows_of_a_kernel_allocated_output_keep_the_sentinel():
    x, w = _inputs()
    _, _, flags, spill = nki.simulate(_static_fp8_projection, target="trn2")(x, w)
    assert flags[0].tolist() == [1, 1, 1, 1]
    assert (flags[1:] == 4).all()                       # integers: 4, never 0
    assert (spill[:2] == 2.5).all() and np.isnan(spill[2:]).all()
