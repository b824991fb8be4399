"""Every hardware rule the ISA enforces, broken on purpose: the error names the instruction, the operand, the
value, the limit, and the kernel's own source line."""

import re

import numpy as np
import pytest

import trnsim


def run(nki, body, *arrays, target=None):
    kern = nki.jit(body)
    if target:
        kern = nki.simulate(kern, target=target)
    return kern(*arrays)


def expect(nki, body, pattern, *arrays, target=None):
    with pytest.raises(trnsim.NkiValidationError) as ei:
        run(nki, body, *(arrays or (np.zeros((128, 64), np.float32),)), target=target)
    msg = str(ei.value)
    assert re.search(pattern, msg), msg
    assert "test_rules.py:" in msg, msg            # the user's kernel line
    assert ei.value.location[0].endswith("test_rules.py")
    return ei.value


def test_partitions_exceed_128(nki, nl, nisa):
    def k(x):
        nl.ndarray((256, 64), nl.float32, buffer=nl.sbuf)
    e = expect(nki, k, "number of partitions 256 exceed architecture limitation of 128")
    assert e.value == 256 and e.limit == 128


def test_tensor_tensor_operand_over_128_partitions_via_view(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 2, 64), nl.float32, buffer=nl.sbuf)
        v = a.reshape((256, 64)) if False else a.ap([[64, 256], [1, 64]])
        nisa.tensor_tensor(v, v, v, op=nl.add)
    expect(nki, k, r"tensor_tensor: operand 'dst'.*(exceeds maximum 128|partitions)")


def test_tensor_engine_reads_sbuf_only(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.psum)
        m = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m)
    expect(nki, k, r"nc_matmul: operand 'stationary' \(tensor `.*`\) is in PSUM; expected in SBUF for the tensor "
                   r"engine")


def test_tensor_engine_writes_psum_only(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.nc_matmul(d, s, m)
    expect(nki, k, r"nc_matmul: operand 'dst'.*is in SBUF; expected in PSUM")


def test_gpsimd_cannot_access_psum(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        b = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(b, a, engine=nisa.gpsimd_engine)
    expect(nki, k, r"tensor_copy: operand 'src'.*GpSimd engine cannot access PSUM")


def test_engine_not_allowed(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(a, a, a, op=nl.add, engine=nisa.tensor_engine)
    expect(nki, k, r"tensor_tensor: operand 'engine' cannot run on the tensor engine; allowed: vector, gpsimd")


def test_start_partition_rule(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(a[16:64], 0.0)        # 48 partitions must start at 0 or 64
    e = expect(nki, k, r"memset: operand 'dst'.*of 48 partitions starts at partition 16; a tile of 48 "
                       r"partitions must start at 0 or 64")
    assert e.value == 16


def test_start_partition_rule_large_tile(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.memset(a[32:128], 0.0)
    expect(nki, k, r"96 partitions starts at partition 32; a tile of 96 partitions must start at 0")


def test_stationary_free_over_128(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 256), nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m)
    e = expect(nki, k, r"nc_matmul: operand 'stationary' has free size 256, exceeds maximum 128")
    assert e.limit == 128


def test_moving_free_over_512(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((128, 1024), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m)
    expect(nki, k, r"nc_matmul: operand 'moving' has free size 1024, exceeds maximum 512")


def test_matmul_output_must_fit_one_psum_bank(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d[:, 256:768], s, m)
    expect(nki, k, r"nc_matmul: operand 'dst'.*crossing a 2048-byte PSUM bank boundary")


def test_psum_dtype_rule_per_target(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(s, 1.0)
        nisa.memset(m, 1.0)
        d = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.psum)
        nisa.nc_matmul(d, s, m)
    expect(nki, k, r"nc_matmul: operand 'dst' has dtype bfloat16; PSUM matmul output on trn2 must be float32",
           target="trn2")
    run(nki, k, np.zeros((1,), np.float32), target="trn3")      # trn3 accumulates bf16 in PSUM


def test_matmul_mixed_fp32(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m)
    expect(nki, k, r"when either is float32/tfloat32 both must be")


def test_matmul_int_dtype_rejected(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 128), nl.int32, buffer=nl.sbuf)
        m = nl.ndarray((128, 512), nl.int32, buffer=nl.sbuf)
        d = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m)
    expect(nki, k, r"nc_matmul: operand 'stationary' has dtype int32; the Tensor Engine takes")


def test_double_row_not_on_trn1(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((128, 2, 64), nl.float8_e4m3, buffer=nl.sbuf)
        m = nl.ndarray((128, 2, 256), nl.float8_e4m3, buffer=nl.sbuf)
        d = nl.ndarray((64, 256), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m, perf_mode=nisa.matmul_perf_mode.double_row)
    expect(nki, k, "double_row is not available on trn1", target="trn1")


def test_tile_position_rules(nki, nl, nisa):
    def k(x):
        s = nl.ndarray((64, 64), nl.bfloat16, buffer=nl.sbuf)
        m = nl.ndarray((64, 512), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((64, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(d, s, m, tile_position=(32, 0), tile_size=(64, 64))
    expect(nki, k, r"tile_position\[0\]' is 32; it must be a multiple of the tile size 64")


def test_shape_mismatch(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(a, a, b, op=nl.add)
    e = expect(nki, k, r"tensor_tensor: operand 'data2' has 32 elements per partition but 'dst' has 64")
    assert (e.value, e.limit) == (32, 64)


def test_vector_psum_free_limit(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 4096 + 512), nl.bfloat16, buffer=nl.psum)
        nisa.memset(a, 0.0)
    expect(nki, k, r"memset: operand 'dst'.*4608 elements per partition, exceeds maximum 4096 for PSUM")


def test_both_tensor_tensor_inputs_in_psum(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        d = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(d, a, a, op=nl.add)
    expect(nki, k, "both in PSUM")


def test_bitwise_op_needs_ints(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(a, a, a, op=nl.bitwise_and)
    expect(nki, k, r"bitwise operator 'bitwise_and' needs integer dtypes")


def test_reduce_partition_axis(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        d = nl.ndarray((1, 64), nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(d, nl.add, a, axis=0)
    expect(nki, k, "includes the partition dimension 0")


def test_bn_stats_free_limit(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)
        d = nl.ndarray((128, 6), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(d, a)
    expect(nki, k, r"bn_stats: operand 'data' has 1024 elements per partition, exceeds maximum 512")


def test_transpose_vector_limit(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
        d = nl.ndarray((64, 64), nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(d, a, engine=nisa.vector_engine)
    expect(nki, k, r"the vector engine transposes at most 32x32")


def test_transpose_dtype_must_match(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 64), nl.bfloat16, buffer=nl.sbuf)
        d = nl.ndarray((64, 128), nl.float32, buffer=nl.psum)
        nisa.nc_transpose(d, a)
    expect(nki, k, r"nc_transpose: operand 'dst' has dtype float32 but 'data' has bfloat16")


def test_dma_element_count(nki, nl, nisa):
    def k(x):
        a = nl.ndarray((128, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(a, x)
    expect(nki, k, r"dma_copy: operand 'dst' has 4096 elements .* but 'src' has 8192")


def test_out_of_bounds_index_names_user_line(nki, nl, nisa):
    def k(x):
        x[:, 0:65]
    with pytest.raises(IndexError, match=r"Out-of-bound access for tensor `x` on dimension 1: index range "
                                         r"\[0, 64\] exceed dimension size of 64"):
        run(nki, k, np.zeros((128, 64), np.float32))


def test_sbuf_capacity(nki, nl, nisa):
    def k(x):
        a, b = [nl.ndarray((128, 32 * 1024), nl.float32, buffer=nl.sbuf) for _ in range(2)]
        nisa.memset(a, 0.0)
        nisa.memset(b, 1.0)             # a is still live (read below): 2 x 128 KiB per partition
        nisa.tensor_tensor(b, a, b, op=nl.add)
    expect(nki, k, r"SBUF allocation of 131072 bytes per partition.*capacity 229376")
