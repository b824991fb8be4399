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
