"""Kernels of our own that load MX (x4-packed) weights the way nki-library's MoE/MLP token-generation kernels do
(issue 31): through ``NkiTensor.base_tensor`` -- DMA the allocation in its own dtype, then ``view`` the SBUF tile
as the x4 dtype -- each checked bit for bit against the packed NumPy data."""

import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

from trnsim.memory.dtypes import DTYPES, pack_x4  # noqa: E402

RNG = np.random.default_rng(31)


def _packed(shape, x4="float4_e2m1fn_x4"):
    """Random values of the element format, packed four to an element: ``shape`` packed elements."""
    grid = {"float4_e2m1fn_x4": [0, 0.5, 1, 1.5, 2, 3, 4, 6], "float8_e4m3fn_x4": [0, 0.125, 1, 1.75, 448]}[x4]
    vals = RNG.choice(np.array(grid + [-g for g in grid], np.float32), size=tuple(shape) + (4,))
    return pack_x4(DTYPES[x4], vals)


def test_base_tensor_of_a_kernel_argument_is_the_argument():
    w = RNG.standard_normal((2, 32, 3)).astype(np.float32)
    seen = {}

    @nki.jit
    def k(w):
        b = w.base_tensor
        seen["same"] = (tuple(b.shape), b.dtype, b.buffer, b.name) == (tuple(w.shape), w.dtype, w.buffer, w.name)
        out = nl.ndarray(w.shape, dtype=w.dtype, buffer=nl.shared_hbm)
        for e in range(2):
            t = nl.ndarray((32, 3), dtype=b.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=b[e])
            nisa.dma_copy(dst=out[e], src=t)
        return out
    np.testing.assert_array_equal(nki.simulate(k)(w), w)
    assert seen["same"]


def test_base_tensor_of_a_dtype_view_is_the_allocation_in_its_own_dtype():
    """The pattern of nki-library's selective-expert MX kernels: weights reach the kernel as x4 views of
    another dtype; ``base_tensor`` gives the allocation (uint32 here), whose bytes are DMAed per expert into a
    tile of that dtype and viewed as x4 in SBUF; the matmul operand holds the original packed bits."""
    E, P, F = 3, 32, 4
    packed = _packed((E, P, F), "float8_e4m3fn_x4")
    bits = packed.view(np.uint32)
    seen = {}

    @nki.jit
    def k(w32):
        w = w32.view(nl.float8_e4m3fn_x4)
        base = w.base_tensor
        seen["base"] = (base.dtype.name, tuple(base.shape))
        out = nl.ndarray((E, P, F), dtype=nl.uint32, buffer=nl.shared_hbm)
        for e in range(E):
            t = nl.ndarray((P, F), dtype=base.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=base[e])
            tv = t.view(w.dtype)
            assert tv.dtype.name == "float8_e4m3fn_x4"
            nisa.dma_copy(dst=out[e].view(nl.float8_e4m3fn_x4), src=tv)
        return out
    got = nki.simulate(k, target="trn3")(bits)
    assert seen["base"] == ("uint32", (E, P, F))
    np.testing.assert_array_equal(got, bits)


def test_base_tensor_of_a_slice_is_the_whole_allocation():
    x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    seen = {}

    @nki.jit
    def k(x):
        s = x[1:3, 2:6]
        seen["shapes"] = (tuple(s.shape), tuple(s.base_tensor.shape), tuple(s.base_tensor.base_tensor.shape))
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=s.base_tensor)
        nisa.dma_copy(dst=out, src=t)
        return out
    np.testing.assert_array_equal(nki.simulate(k)(x), x)
    assert seen["shapes"] == ((2, 4), (4, 8), (4, 8))


# -- the MX projection of nki-library's MoE kernels: fp4 weights (loaded through base_tensor) x fp8 activations ------
_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)      # OCP MX: the magnitudes of the 8 e2m1 codes


def _scale_rows(k):
    """The partition of the scale of each 8-partition group (4 scale rows at the start of each 32-partition
    quadrant: the NKI reference's quantize_mx / nc_matmul_mx layout)."""
    g = np.arange(k // 8)
    return 32 * (g // 4) + g % 4


@pytest.mark.parametrize("K, M, N", [(128, 64, 8), (32, 16, 4)])
def test_fp4_weights_times_quantized_fp8_activations_match_float64(K, M, N):
    """Weights as fp4 codes with E8M0 (uint8) block scales, arriving as uint16 (as NxD passes them) and loaded
    through ``base_tensor``; activations quantized on chip by ``quantize_mx``; ``nc_matmul_mx`` into PSUM.  The
    reference, in float64 and written from the OCP MX definitions: each weight is its e2m1 value x 2^(scale - 127),
    each activation block of 8 partitions x 4 values gets the scale 2^(floor(log2 amax) - 8) and is rounded to
    float8_e4m3fn (ml_dtypes), the result is the sum over partitions and the 4 packed values."""
    import ml_dtypes

    codes = RNG.integers(0, 16, size=(K, M, 4))
    w16 = np.zeros((K, M), np.uint16)
    for j in range(4):                                   # element j of a packed x4 in bits 4j..4j+3
        w16 |= (codes[..., j].astype(np.uint16) << np.uint16(4 * j))
    wexp = RNG.integers(120, 131, size=(K // 8, M))      # biased E8M0 exponents: scales 2^-7 .. 2^3
    wscale = np.zeros((K, M), np.uint8)
    wscale[_scale_rows(K)] = wexp
    x = (RNG.standard_normal((K, 4 * N)) * np.exp2(RNG.integers(-6, 6, size=(K // 8, 1)).repeat(8, 0)))
    x = x.astype(ml_dtypes.bfloat16)

    @nki.jit
    def k(w16, wscale, x):
        w = w16.view(nl.float4_e2m1fn_x4)
        base = w.base_tensor
        wt = nl.ndarray((K, M), dtype=base.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=wt, src=base)
        wt = wt.view(w.dtype)
        ws = nl.ndarray((K, M), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.dma_copy(dst=ws, src=wscale)
        xs = nl.ndarray((K, 4 * N), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        xq = nl.ndarray((K, N), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        xsc = nl.ndarray((K, N), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.quantize_mx(dst=xq, src=xs, dst_scale=xsc)
        ps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=ps, stationary=wt, moving=xq, stationary_scale=ws, moving_scale=xsc)
        sb = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sb, src=ps)
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=sb)
        return out
    got = nki.simulate(k, target="trn3")(w16, wscale, x)

    wfac = np.exp2(wexp.astype(np.float64) - 127).repeat(8, 0)[..., None]          # [K, M, 1]
    wv = np.where(codes >= 8, -1.0, 1.0) * _E2M1[codes % 8] * wfac
    xf = x.astype(np.float64).reshape(K // 8, 8, N, 4)
    amax = np.abs(xf).max(axis=(1, 3))
    e = np.frexp(amax)[1] - 1                            # floor(log2 amax) for amax > 0
    scale = np.exp2(e - 8.0)[:, None, :, None]
    xq = np.clip(xf / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * scale
    xq = xq.reshape(K, N, 4)
    terms = np.einsum("kmq,knq->kqmn", wv, xq)
    ref = terms.sum(axis=(0, 1))
    bound = 1e-6 * np.abs(terms).sum(axis=(0, 1)) + 1e-30
    assert np.all(np.abs(got - ref) <= bound), np.abs(got - ref).max()
    assert np.abs(ref).max() > 0
