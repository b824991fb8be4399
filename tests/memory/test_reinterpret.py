"""Bit reinterpretation of a buffer as another dtype (``view``, ``ap(dtype=)``), checked against NumPy/ml_dtypes
byte views of the same data: reads give exactly the values the bytes encode, writes through a view leave exactly
the bytes a NumPy byte view would, across trnsim's float32 shadow store of narrow floats."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.memory import Buffer, IndexOutOfBounds, MemorySpace, Tensor, ViewError, dtype_of
from trnsim.memory.reinterpret import reinterp

REAL = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
        "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
        "float8_e5m2": ml_dtypes.float8_e5m2, "int8": np.int8, "uint8": np.uint8, "int16": np.int16,
        "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32}


def tensor_of(arr, name, shape=None, space=None):
    """A buffer of dtype ``name`` holding the real values ``arr`` (stored as trnsim stores them)."""
    from trnsim.memory.dtypes import from_real
    dt = dtype_of(name)
    a = np.asarray(arr).astype(REAL[name])
    b = Buffer(space, dt, shape or a.shape)
    t = Tensor.whole(b)
    t.np[...] = from_real(dt, a).reshape(t.shape)
    return t, a


def finite_bytes(n, seed):
    """Random bytes, with some that are NaN or infinite in each fp8 format (their payloads must survive)."""
    r = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    r[:8] = [0x79, 0x7B, 0xFD, 0x7F, 0xFE, 0x7C, 0xFA, 0x78]
    return r


@pytest.mark.parametrize("src", ["float32", "bfloat16", "float16", "float8_e4m3", "int32", "uint8", "int16"])
@pytest.mark.parametrize("dst", ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn",
                                 "float8_e5m2", "int8", "uint16", "int32"])
def test_view_reads_the_bytes_as_numpy_does(src, dst):
    raw = finite_bytes(64, 1)
    a = raw.view(REAL[src])
    t, _ = tensor_of(a, src)
    v = t.view(dst)
    want = raw.view(REAL[dst])
    assert v.shape == want.shape and v.dtype.name == dst
    got = np.asarray(v.np)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    if dst in ("float32", "int8", "uint16", "int32"):           # stored as their bits: compare the bits
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    else:                                                          # shadow store: its bits survive the way back
        from trnsim.memory.dtypes import to_real
        np.testing.assert_array_equal(to_real(dtype_of(dst), got).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("src,dst", [("float32", "float8_e4m3"), ("float32", "bfloat16"), ("bfloat16", "float32"),
                                     ("float8_e4m3fn", "float32"), ("float16", "bfloat16"), ("int32", "float32"),
                                     ("float32", "uint8"), ("bfloat16", "int8"), ("uint8", "float16")])
def test_write_through_a_view_leaves_the_bytes_numpy_would(src, dst):
    """Write new values through a view of a part of the buffer: the bytes outside the view are kept, the bytes
    under it are those of the values written (np.frombuffer of the same byte image is the reference)."""
    raw = finite_bytes(48, 2)
    t, _ = tensor_of(raw.view(REAL[src]), src)
    nsz = np.dtype(REAL[dst]).itemsize
    n = 48 // nsz
    v = t.view(dst)[2:n - 1:2] if n > 3 else t.view(dst)[1:]         # a strided part
    new = finite_bytes(v.size * nsz, 3).view(REAL[dst])
    arr = v.np
    from trnsim.memory.dtypes import from_real
    arr[...] = from_real(dtype_of(dst), new).reshape(arr.shape)
    v.store_back()
    want = raw.copy()
    wv = want.view(REAL[dst])
    if n > 3:
        wv[2:n - 1:2] = new
    else:
        wv[1:] = new
    from trnsim.memory.dtypes import to_real
    got = to_real(dtype_of(src), np.asarray(t.np))
    np.testing.assert_array_equal(got.view(np.uint8), want)


def test_four_fp8_bytes_written_into_an_fp32_scale_read_back_bit_exact():
    """rmsnorm_quant's trick: an fp32 scale stored as four fp8 bytes and read back as the fp32."""
    sp = MemorySpace("sbuf", 224 * 1024, 128)
    scale = np.array([[0.0123], [-7.5e-9], [3.4e38], [1.0], [-np.inf], [1.7e38]], np.float32)   # NaN fp8 bytes
    t = Tensor.whole(Buffer(sp, dtype_of("float32"), (6, 1)))
    fp8 = t.ap([[4, 6], [1, 4]], dtype="float8_e4m3")            # per partition: the 4 bytes of the fp32
    assert fp8.shape == (6, 4) and fp8.partition_info() == (0, 6, 1)
    from trnsim.memory.dtypes import from_real, to_real
    bytes_ = scale.view(np.uint8).view(ml_dtypes.float8_e4m3)
    assert np.isnan(bytes_.astype(np.float32)).sum() >= 2
    arr = fp8.np
    arr[...] = from_real(dtype_of("float8_e4m3"), bytes_)
    fp8.store_back()
    np.testing.assert_array_equal(t.np.view(np.uint32), scale.view(np.uint32))
    np.testing.assert_array_equal(to_real(dtype_of("float8_e4m3"), fp8.np).view(np.uint8), bytes_.view(np.uint8))


def test_same_dtype_views_keep_the_fast_path():
    t, _ = tensor_of(np.arange(8), "float32")
    assert t._rv is None and t[2:6]._rv is None and t.ap([[1, 4]], dtype="float32")._rv is None
    assert t.np.base is not None and np.shares_memory(t[2:6].np, t.buf.data)
    assert reinterp(dtype_of("float32"), dtype_of("int32")) is None        # same size, both real: a NumPy view
    iv = t.view("int32")
    assert np.shares_memory(iv.np, t.buf.data)
    iv.np[0] = 0x3F800000
    assert t.np[0] == 1.0


def test_extent_and_partitions_of_a_view_of_another_size_are_in_buffer_elements():
    sp = MemorySpace("sbuf", 224 * 1024, 128)
    t = Tensor.whole(Buffer(sp, dtype_of("float32"), (8, 3)))
    v = t.ap([[12, 8], [1, 6]], offset=4, dtype="uint8")           # bytes 4..9 of each partition's 12
    assert v.extent() == (1, 3 * 7 + 3)                                # fp32 elements 1..2 of row 0 .. 7
    assert v.partition_info() == (0, 8, 1)
    h = t.ap([[6, 8], [1, 6]], dtype="bfloat16")
    assert h.partition_info() == (0, 8, 1)


def test_written_flags_through_a_view_of_another_size():
    t = Tensor.whole(Buffer(None, dtype_of("float32"), (4,), track_written=True))
    v = t.view("uint8")
    assert not v.written_view().any()
    v[4:6].mark_written()                                # two bytes of element 1
    assert list(t.written_view()) == [False, True, False, False]
    assert list(v.written_view()) == [False] * 4 + [True] * 4 + [False] * 8


def test_invalid_reinterpretations_name_the_shapes_and_dtypes():
    t, _ = tensor_of(np.arange(12), "float32")
    t2 = Tensor.whole(Buffer(None, dtype_of("bfloat16"), (3, 3)))
    with pytest.raises(ViewError, match=r"view\(float32\) of tensor .* \(bfloat16, shape \[3, 3\].*6 bytes, not a "
                                        r"multiple of float32's 4 bytes"):
        t2.view("float32")
    with pytest.raises(ViewError, match="last dimension must be contiguous"):
        t2[:, ::2].view("float8_e4m3")
    with pytest.raises(ViewError, match=r"starts at byte 2 of its buffer, not a multiple of float32's 4 bytes"):
        Tensor.whole(Buffer(None, dtype_of("bfloat16"), (8,)))[1:].ap([[1, 2]], dtype="float32")
    with pytest.raises(ViewError, match=r"at .*test_reinterpret.py:\d+"):              # the kernel line
        t2.view("float32")
    v = t.ap([[1, 49]], dtype="uint8")                      # 49 bytes of a 48-byte buffer: refused when accessed
    with pytest.raises(IndexOutOfBounds, match="whose buffer holds 48 uint8 elements"):
        v.np
