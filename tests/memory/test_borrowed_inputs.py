"""A large narrow-float kernel input is borrowed, not copied (``Buffer.borrowed``, ``jit._to_input``): the HBM
buffer reads the caller's array through a read-only view and copies it at the kernel's first write into it, so
the caller's array never changes, whatever the kernel writes and through whichever view; legacy kernels still
copy their writes back into the caller's array (``v1/kernel.py _write_back``)."""

import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import _to_input
from trnsim.machine import NeuronCore
from trnsim.memory import dtype_of, space
from trnsim.memory.space import Buffer

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

DTYPES = [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


@pytest.fixture
def native_all(monkeypatch):
    monkeypatch.setattr(space, "NATIVE_MIN_BYTES", 0)        # every narrow-float input held natively


def _x(dt, rows=256, cols=64):
    return (np.random.default_rng(3).standard_normal((rows, cols)) * 2).astype(dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_input_is_borrowed_until_written(native_all, dt):
    x = _x(dt)
    core = NeuronCore("trn2")
    t, _ = _to_input(core, x, "x")
    buf = t.buf
    assert buf.native and buf.borrowed and np.shares_memory(buf.data, x)     # no copy made
    assert not buf.data.flags.writeable and x.flags.writeable                 # the caller's array untouched
    got = t[0:128, :].np                                                      # a read decodes the caller's bits
    np.testing.assert_array_equal(got, x[0:128].astype(np.float32))
    assert buf.borrowed
    w = buf.writable()                                                        # the first write copies
    assert not buf.borrowed and w.flags.writeable and not np.shares_memory(w, x)
    np.testing.assert_array_equal(w.view(np.uint8), x.reshape(-1).view(np.uint8))


def test_non_contiguous_input_is_copied_once(native_all):
    x = _x(ml_dtypes.bfloat16, cols=128)[:, ::2]
    t, _ = _to_input(NeuronCore("trn2"), x, "x")
    assert not t.buf.borrowed and not np.shares_memory(t.buf.data, x) and t.buf.data.flags.writeable


def test_read_only_array_given_to_a_buffer_is_borrowed():
    core = NeuronCore("trn2")
    a = np.zeros(16, np.float32)
    a.flags.writeable = False
    assert Buffer(core.chip.hbm, dtype_of("float32"), (16,), data=a).borrowed
    assert not Buffer(core.chip.hbm, dtype_of("float32"), (16,), data=np.zeros(16, np.float32)).borrowed


@nki.jit
def _writes_into_input(x):
    """Scales row tiles into a new output, writes tiles back into the input (whole rows and a strided column
    block), and writes the input's bits through a reinterpreting view of another element size."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
        nisa.dma_copy(dst=x[i * 128:(i + 1) * 128, 0:C:2], src=t[:, 0:C // 2])
    bits = x.view(nl.int32)
    u = nl.ndarray((128, bits.shape[1]), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=bits[0:128, :])
    nisa.dma_copy(dst=bits[128:256, :], src=u)
    return out, x


@nki.jit
def _reads_only(x):
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out, x


@pytest.mark.parametrize("dt", DTYPES)
def test_kernel_writes_never_reach_the_callers_array(dt, native_all, monkeypatch):
    x = _x(dt)
    keep = x.copy()
    out, xo = _writes_into_input(x)
    np.testing.assert_array_equal(x.view(np.uint8), keep.view(np.uint8))     # the caller's array unchanged
    # the same results as with the input copied up front (a writable array is never borrowed)
    monkeypatch.setattr(space, "NATIVE_MIN_BYTES", 1 << 40)                   # and as the float32 shadow store
    out2, xo2 = _writes_into_input(keep.copy())
    np.testing.assert_array_equal(out.view(np.uint8), out2.view(np.uint8))
    np.testing.assert_array_equal(xo.view(np.uint8), xo2.view(np.uint8))
    assert not np.shares_memory(xo, x)
    # the input as the kernel left it: column block written (2x the rows' values), rows 128-255 = rows 0-127
    assert not np.array_equal(xo.view(np.uint8), keep.view(np.uint8))
    np.testing.assert_array_equal(xo[128:].view(np.uint8), xo[:128].view(np.uint8))


@pytest.mark.parametrize("dt", DTYPES)
def test_input_returned_unwritten_is_a_copy(dt, native_all):
    x = _x(dt)
    out, xo = _reads_only(x)
    np.testing.assert_array_equal(xo.view(np.uint8), x.view(np.uint8))
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))
    assert not np.shares_memory(xo, x) and xo.flags.writeable


def test_borrowed_input_adds_no_copy_to_the_calls_peak():
    """A 16 MiB bf16 input read tile by tile: the call holds the output (N) and its tiles, not a copy of the
    input too (before: the input's HBM copy, N more)."""
    x = np.full((4096, 2048), 1.5, dtype=ml_dtypes.bfloat16)
    assert x.nbytes >= space.NATIVE_MIN_BYTES
    _reads_only(np.ones((128, 64), dtype=x.dtype))       # warm
    tracemalloc.start()
    try:
        out, xo = _reads_only(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert float(out[5, 7]) == 1.5
    # the output and the returned input's copy (2 N) and the float32 tiles; with the input copied: 3 N
    assert peak < 2.5 * x.nbytes, f"peak {peak / x.nbytes:.2f} x the input's bytes"


def test_legacy_kernel_writes_back_into_a_borrowed_input(native_all):
    import neuronxcc.nki as v1nki          # (installed by trnsim.install_nki)
    import neuronxcc.nki.language as vnl

    @v1nki.jit
    def k(a, b):
        t = vnl.load(a[0:128, 0:64])
        vnl.store(b[0:128, 0:64], value=vnl.multiply(t, 2.0))

    a = _x(ml_dtypes.bfloat16, rows=128)
    b = np.zeros((128, 64), ml_dtypes.bfloat16)
    keep = a.copy()
    v1nki.simulate_kernel(k, a, b)
    np.testing.assert_array_equal(a.view(np.uint16), keep.view(np.uint16))
    np.testing.assert_array_equal(b.astype(np.float32), (keep.astype(np.float32) * 2))
