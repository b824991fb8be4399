"""Kernels of our own that reinterpret bits between dtypes (``ap(dtype=)``, ``view``) and form access patterns
out of range (issue 13: the byte-view and the bounds rules nki-library's kernels rely on), each checked against
a NumPy byte view of the same data."""

import ml_dtypes
import numpy as np
import pytest

import trnsim

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(7)


def test_fp32_scale_stored_as_four_fp8_bytes_next_to_fp8_data():
    """A row-quantisation epilogue: fp8 data and, after it, the row's fp32 scale as four fp8 bytes."""
    P, F = 16, 8
    x = RNG.standard_normal((P, F)).astype(np.float32)
    # scales whose bytes include fp8 NaN and infinity patterns (0x7f, 0xff, 0x78...): they must survive
    scale = np.abs(RNG.standard_normal((P, 1))).astype(np.float32) * 3e-3
    scale[:4, 0] = np.array([0x3F7F7F7F, 0x7F7FFFFF, 0x3C78F97C, 0x41FD7EFF], np.uint32).view(np.float32)

    @nki.jit
    def k(x, scale):
        xs = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        sc = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=sc, src=scale)
        q = nl.ndarray((P, F), dtype=nl.float8_e4m3, buffer=nl.sbuf)
        nisa.tensor_copy(dst=q, src=xs)
        out = nl.ndarray((P, F + 4), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out[:, 0:F], src=q)
        nisa.dma_copy(dst=out[:, F:F + 4], src=sc.ap(pattern=[[4, P], [1, 4]], dtype=nl.float8_e4m3))
        return out
    out = k(x, scale)
    assert out.dtype == ml_dtypes.float8_e4m3
    np.testing.assert_array_equal(out[:, :F].astype(np.float32), x.astype(ml_dtypes.float8_e4m3).astype(np.float32))
    got = np.ascontiguousarray(out[:, F:]).view(np.uint8).view(np.uint32)
    np.testing.assert_array_equal(got, scale.view(np.uint32))       # bit-exact fp32 scales


def test_fp8_bytes_written_through_a_view_read_back_as_fp32():
    """The reverse: a tensor_copy writes four fp8 values per row into an fp32 tile (through an fp8 view);
    reading the tile as fp32 gives exactly the fp32 those bytes encode."""
    P = 8
    codes = RNG.integers(0, 256, (P, 4), dtype=np.uint8)
    codes[codes == 0x7F] = 0x7E                        # keep one NaN pattern (0xff) and the others random
    codes[0] = [0xFF, 0x79, 0x78, 0x00]
    vals = codes.view(ml_dtypes.float8_e4m3)

    @nki.jit
    def k(v):
        src = nl.ndarray((P, 4), dtype=nl.float8_e4m3, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=v)
        word = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=word.ap(pattern=[[4, P], [1, 4]], dtype=nl.float8_e4m3), src=src)
        out = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=word)
        return out
    out = k(vals)
    np.testing.assert_array_equal(out.view(np.uint32), codes.view(np.uint32))


def test_view_of_bf16_as_int16_and_fp32_as_bf16_pairs():
    x = RNG.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    y = RNG.standard_normal((4, 6)).astype(np.float32)

    @nki.jit
    def k(x, y):
        xs = nl.ndarray((4, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        bits = nl.ndarray((4, 8), dtype=nl.int16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=bits, src=xs.view(nl.int16))
        ys = nl.ndarray((4, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ys, src=y)
        halves = nl.ndarray((4, 12), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=halves, src=ys.view(nl.bfloat16))
        return bits, halves
    bits, halves = k(x, y)
    np.testing.assert_array_equal(bits, x.view(np.int16))
    np.testing.assert_array_equal(halves.view(np.uint16), y.view(np.uint16))


def test_access_pattern_out_of_range_may_be_formed_but_not_accessed():
    x = np.arange(32, dtype=np.float32).reshape(4, 8)

    @nki.jit
    def k(x, access):
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        for j in range(3):                          # j == 2 forms a pattern past the tensor's end
            v = x.ap(pattern=[[8, 4], [1, 4]], offset=4 * j)
            tmp = nl.ndarray(v.shape, dtype=nl.float32, buffer=nl.sbuf)     # used for its shape only
            if j < 2 or access:
                nisa.dma_copy(dst=tmp, src=v)
                nisa.dma_copy(dst=out[:, 4 * j:4 * j + 4], src=tmp)
        return out
    np.testing.assert_array_equal(k(x, False), x)
    with pytest.raises(IndexError, match=r"reaches elements \[8, 35\] of tensor .*whose buffer holds 32 float32 "
                                         r"elements \(pattern formed at .*test_reinterpret_kernels.py:\d+"):
        k(x, True)


def test_dma_oob_skip_drops_a_scalar_offset_past_the_last_row():
    """A sentinel index one past the last expert (as blockwise MoE kernels use for "reuse the loaded weights")
    with oob_mode=skip leaves the destination as it was; with the default mode it is an error."""
    w = RNG.standard_normal((3, 4, 8)).astype(np.float32)       # 3 "experts"

    @nki.jit
    def k(w, idx, skip):
        i = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=i, src=idx)
        t = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=-1.0)
        kw = {"oob_mode": nisa.oob_mode.skip} if skip else {}
        nisa.dma_copy(dst=t, src=w.ap(pattern=[[8, 4], [1, 8]], offset=0, scalar_offset=i, indirect_dim=0), **kw)
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    np.testing.assert_array_equal(k(w, np.array([[2]], np.int32), True), w[2])
    np.testing.assert_array_equal(k(w, np.array([[3]], np.int32), True), np.full((4, 8), -1.0, np.float32))
    with pytest.raises(IndexError, match="whose buffer holds 96 float32 elements"):
        k(w, np.array([[3]], np.int32), False)
