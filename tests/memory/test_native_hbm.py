"""Large narrow-float kernel inputs are held in HBM in their own encoding (``Buffer.native``: bf16/fp16 as 2 bytes,
fp8 as 1 byte) and converted at access; every result is bit for bit what the float32 shadow store gives."""

import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.machine import NeuronCore
from trnsim.memory import dtype_of
from trnsim.memory.space import Buffer

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

from trnsim.memory import space  # noqa: E402

DTYPES = [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3]


@nki.jit
def _mix(x):
    """Reads row tiles and a strided column block, writes tiles back into the input (in place) and into a new
    output, copies HBM to HBM, and reads and writes the input through a bit reinterpretation."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.7)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
        nisa.dma_copy(dst=x[i * 128:(i + 1) * 128, 0:C:2], src=t[:, 0:C // 2])    # a strided write
    nisa.dma_copy(dst=out[0:128, 0:C // 2], src=x[128:256, C // 2:C])                # HBM to HBM
    bits = x.view(nl.uint8 if x.dtype.itemsize == 1 else nl.int16)
    u = nl.ndarray((128, C), dtype=bits.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=bits[0:128, :])
    nisa.dma_copy(dst=bits[256:384, :], src=u)            # the bits of rows 0-127 into rows 256-383
    return out, x


def _inputs(dt, rows=512, cols=64):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((rows, cols)) * 3).astype(dt)
    flat = x.reshape(-1)
    flat[3] = np.nan
    if np.dtype(dt).itemsize == 1:                      # a NaN with a payload where the format has several
        b = flat.view(np.uint8)
        b[5] = {"float8_e4m3": 0x7A, "float8_e5m2": 0x7E}.get(np.dtype(dt).name, b[5])
    return x


def _run(x, native_min):
    old = space.NATIVE_MIN_BYTES
    space.NATIVE_MIN_BYTES = native_min
    try:
        return _mix(x.copy())
    finally:
        space.NATIVE_MIN_BYTES = old


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_native_input_matches_float32_store_bit_for_bit(dt):
    x = _inputs(dt)
    ref = _run(x, 1 << 62)            # every HBM tensor in the float32 shadow store
    got = _run(x, 0)                  # every narrow-float HBM tensor (input, output) in its own encoding
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype == np.dtype(dt)
        assert np.array_equal(g.view(np.uint8), r.view(np.uint8))
    # the kernel did something checkable: the output's second row tile is 1.7 x the input's in float32, rounded
    # to the dtype (nearest even, as ml_dtypes converts)
    want = (x[128:256].astype(np.float32) * np.float32(1.7)).astype(dt)
    assert np.array_equal(got[0][128:256].view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn], ids=["bf16", "fp8"])
def test_large_input_is_held_in_its_own_bytes(dt, monkeypatch):
    seen = {}
    orig = NeuronCore.wrap_input

    def spy(self, array, shape, dtype, name="", native=False):
        buf = orig(self, array, shape, dtype, name, native)
        seen[name] = buf
        return buf
    monkeypatch.setattr(NeuronCore, "wrap_input", spy)
    big = np.ones((1024, 1024), dt)              # 1 or 2 MiB: at or over NATIVE_MIN_BYTES (1 MiB)
    small = np.ones((128, 64), dt)

    @nki.jit
    def both(a, b):
        t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[0:128, 0:64])
        nisa.dma_copy(dst=b, src=t)
        return b

    out = both(big, small)
    assert np.array_equal(out, small)
    assert out.dtype == np.dtype(dt)
    assert seen["a"].native and seen["a"].data.nbytes == big.nbytes          # not 4 bytes an element
    assert not seen["b"].native and seen["b"].data.dtype == np.float32      # small: the float32 store


@pytest.mark.parametrize("native_min", [0, 1 << 62], ids=["native", "float32-store"])
def test_hbm_fill_rounds_to_the_dtype(native_min, monkeypatch):
    monkeypatch.setattr(space, "NATIVE_MIN_BYTES", native_min)
    seen = {}

    @nki.jit
    def fill():
        o = nl.full((128, 64), 0.1, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        seen["native"] = o.buf.native
        return o

    out = fill()
    assert seen["native"] == (native_min == 0)
    # 0.1 in float32 is 0x3DCCCCCD: to nearest even in bf16 0x3DCD (truncation would give 0x3DCC)
    assert np.all(out.view(np.uint16) == 0x3DCD)


def test_outputs_sharing_a_native_buffer_are_separate_arrays(monkeypatch):
    monkeypatch.setattr(space, "NATIVE_MIN_BYTES", 0)

    @nki.jit
    def twice(x):
        o = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=o, src=t)
        return o, o, x

    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8).astype(ml_dtypes.bfloat16)
    a, b, xi = twice(x)
    assert a.dtype == b.dtype == xi.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(a.view(np.uint16), x.view(np.uint16)) and np.array_equal(b.view(np.uint16),
                                                                                   x.view(np.uint16))
    assert not np.shares_memory(a, b)        # two outputs of one buffer: copies, not one array twice
    assert not np.shares_memory(xi, x)       # the input the kernel returns: its HBM copy, not the caller's array
    a[0, 0] = 99
    assert b[0, 0] == 0 and x[0, 0] == 0


def test_native_buffer_refused_where_it_does_not_apply():
    core = NeuronCore("trn2")
    with pytest.raises(ValueError, match="native storage is for HBM buffers of narrow float dtypes, not float32"):
        Buffer(core.chip.hbm, dtype_of("float32"), (4, 4), name="w", native=True)
    with pytest.raises(ValueError, match="real encoding"):
        Buffer(core.chip.hbm, dtype_of("bfloat16"), (4,), name="w", data=np.zeros(4, np.float32), native=True)
