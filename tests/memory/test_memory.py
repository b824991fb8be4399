import gc

import ml_dtypes
import numpy as np
import pytest

from trnsim.memory import (Buffer, IndexOutOfBounds, MemorySpace, OutOfMemory, Tensor, UnsupportedDTypeError,
                           ViewError, dtype_of, round_to)


def sbuf():
    return MemorySpace("sbuf", 224 * 1024, 128)


def test_sentinel_fill():
    sp = sbuf()
    f = Tensor.whole(Buffer(sp, dtype_of("bfloat16"), (4, 8)))
    i = Tensor.whole(Buffer(sp, dtype_of("int32"), (4, 8)))
    assert np.isnan(f.np).all()
    assert (i.np == 4).all()


def test_capacity_accounting_and_release():
    sp = sbuf()
    a = Buffer(sp, dtype_of("float32"), (128, 1024))
    b = Buffer(sp, dtype_of("bfloat16"), (64, 1024))
    assert sp.live == 4096 + 2048 and sp.peak == 6144
    with pytest.raises(OutOfMemory, match="SBUF allocation of 229376 bytes per partition.*capacity 229376"):
        Buffer(sp, dtype_of("float32"), (128, 56 * 1024))
    del a
    gc.collect()
    assert sp.live == 2048 and sp.peak == 6144
    c = Buffer(sp, dtype_of("float32"), (128, 1024))
    assert c.addr == 0     # first fit reuses the freed range
    del b, c


def test_psum_tile_does_not_straddle_banks():
    sp = MemorySpace("psum", 16 * 1024, 128, bank_bytes=2048)
    a = Buffer(sp, dtype_of("float32"), (128, 100))
    b = Buffer(sp, dtype_of("float32"), (128, 500))
    assert a.addr == 0 and b.addr == 2048


def test_views_and_access_patterns():
    sp = sbuf()
    t = Tensor.whole(Buffer(sp, dtype_of("float32"), (128, 4, 16), data=np.arange(128 * 64, dtype=np.float32)))
    v = t[32:64, 1, ::2]
    assert v.shape == (32, 8) and v.offset == 32 * 64 + 16 and v.strides == (64, 2)
    np.testing.assert_array_equal(v.np, np.arange(128 * 64).reshape(128, 4, 16)[32:64, 1, ::2])
    assert v.partition_info() == (32, 32, 1)
    r = t.reshape((128, 64))
    assert r.get_pattern() == [[64, 128], [1, 64]]
    a = t.ap([[64, 128], [1, 16]], offset=16)
    np.testing.assert_array_equal(a.np, np.arange(128 * 64).reshape(128, 64)[:, 16:32])
    p = t.permute((0, 2, 1))
    assert p.shape == (128, 16, 4) and p.strides == (64, 1, 16)
    with pytest.raises(ViewError, match="without a copy"):
        p.reshape((128, 64))
    f = t.flatten_dims(1, 2)
    assert f.shape == (128, 64)
    ra = t.rearrange(("p", "a", "b"), ("p", "b", "a"))
    assert ra.shape == (128, 16, 4)
    b = t[:, 0:1, 0].broadcast(1, 5) if False else t[:, 0, 0:1].broadcast(1, 5)
    assert b.shape == (128, 5) and b.strides[1] == 0
    rd = t.reshape_dim(2, (4, 4))
    assert rd.shape == (128, 4, 4, 4)
    assert t.expand_dim(1).shape == (128, 1, 4, 16)


def test_out_of_bounds_slices_raise_not_clamp():
    t = Tensor.whole(Buffer(None, dtype_of("float32"), (100, 4000)), name="x")
    with pytest.raises(IndexOutOfBounds, match=r"Out-of-bound access for tensor `x` on dimension 1: index range "
                                               r"\[0, 4095\] exceed dimension size of 4000"):
        t[:, 0:4096]
    with pytest.raises(IndexOutOfBounds):
        t[100]
    # an access pattern out of range may be formed (kernels form some only for .shape or under a condition)
    # but not accessed: its data, its extent (what an instruction records) and its written flags raise
    v = t.ap([[4000, 101], [1, 4000]])
    assert v.shape == (101, 4000)
    for access in (lambda: v.np, v.extent, lambda: v[1:].np):
        with pytest.raises(IndexOutOfBounds, match=r"reaches elements \[0, 403999\] of tensor `x`, whose "
                                                   r"buffer holds 400000 float32 elements \(pattern formed at "):
            access()
    assert v[:100].np.shape == (100, 4000)           # the part inside the buffer is an ordinary view


def test_packed_mx_dtypes():
    """The MX formats: 4 FP8 values in a 32-bit element (4 FP4 in 16 bits), stored as their bits."""
    from trnsim.memory.dtypes import pack_x4, unpack_x4
    d = dtype_of("float8_e4m3fn_x4")
    assert (d.itemsize, d.packed, d.is_float, d.is_int) == (4, 4, False, False)
    v = np.array([[1.0, -2.0, 0.5, 448.0]], np.float32)
    bits = pack_x4(d, v)
    assert bits[0] == 0x38 | (0xC0 << 8) | (0x30 << 16) | (0x7E << 24)   # e4m3fn codes, element 0 lowest
    np.testing.assert_array_equal(unpack_x4(d, bits), v)
    d4 = dtype_of("float4_e2m1fn_x4")
    assert d4.itemsize == 2
    np.testing.assert_array_equal(unpack_x4(d4, pack_x4(d4, np.array([[1, -6, 0.5, 3]], np.float32))),
                                  [[1, -6, 0.5, 3]])
    assert dtype_of("float8_e8m0fnu").is_float
    with pytest.raises(TypeError, match="unknown dtype"):
        dtype_of("float128")


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"])
def test_round_to_matches_ml_dtypes_round_to_nearest_even(name):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(10000) * 10).astype(np.float32)
    x[:4] = [np.nan, np.inf, -np.inf, 0.0]
    dt = dtype_of(name)
    got = round_to(dt, x)
    want = x.astype(dt.np).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_bf16_rounding_ties_to_even():
    # 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to the even mantissa (1.0)
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8], dtype=np.float32)
    np.testing.assert_array_equal(round_to(dtype_of("bfloat16"), x), [1.0, 1 + 2**-6])
    assert dtype_of(ml_dtypes.bfloat16).name == "bfloat16"


def test_tf32_keeps_10_mantissa_bits():
    x = np.array([1 + 2**-11, 1 + 2**-10], dtype=np.float32)
    np.testing.assert_array_equal(round_to(dtype_of("tfloat32"), x), [1.0, 1 + 2**-10])
