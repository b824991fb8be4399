"""An MX chain whose contraction dimension is not a multiple of 32 partitions (issue 31: nki-library's fp4 MoE tests
with intermediate sizes 180 and 192 on trn3).

nki-library's ``gate_up_projection_mx`` (moe_tkg, snapshot d2ad3a5) writes the first ``I/4`` partitions of its
activation tile, quantizes ``pad_to_valid_qmx_partitions(I/4)`` of them (46 -> 64 for I = 184) and
``down_projection_mx`` multiplies all 128 partitions of the quantized tile against weights it zero-pads; the
partitions past ``I/4`` are never written ("Extra zero-padded partitions are harmless: downstream weight is
zero-padded").  AWS's CPU simulator guide (aws-neuron-sdk ``nki/guides/nki_simulator.rst``, "Uninitialized Memory
Detection") fills new tensors with NaN and says hardware memory holds arbitrary leftover values, so the result
depends on what the never-written partitions hold: NaN from the sentinel (trnsim and AWS's simulator), the exact
product when they hold finite values (0 x finite = 0).  This file checks both readings against a float64 reference
with a small kernel of the same shape, and that strict mode names the read."""

import ml_dtypes
import numpy as np
import pytest

from trnsim import isa
from trnsim.isa.errors import NkiValidationError
from trnsim.machine import NeuronCore
from trnsim.memory import PSUM, SBUF, Tensor
from trnsim.memory.dtypes import DTYPES, pack_x4

LOC = ("test_mx_unwritten_padding.py", 1)
VALID = 46          # partitions the kernel writes (I = 184: 46 rows of 4 packed values)
QP = 64             # quantize_mx's partition count, VALID padded to a multiple of 32
F = 8               # values per partition (2 packed elements: the stationary free size M)
N = 16              # moving free size


def _tile(core, shape, dtype, values=None):
    t = Tensor.whole(core.allocate(tuple(shape), DTYPES[dtype], SBUF, name=f"t_{dtype}"))
    if values is not None:
        t.np[...] = np.asarray(values).astype(DTYPES[dtype].storage)
        t.buf.all_written = True
    return t


def _scale_rows(p):
    g = np.arange(p // 8)
    return 32 * (g // 4) + g % 4


def _ref_quantize(x):
    """float64 reference of quantize_mx to float8_e4m3fn: per 8 partitions x 4 values, X = 2^(floor(log2 amax) - 8)
    (2^-127 for an all-zero group), each value v / X rounded to e4m3fn (ml_dtypes, nearest even); returns the
    dequantized values (as nc_matmul_mx sees them)."""
    p, f = x.shape
    g = x.reshape(p // 8, 8, f // 4, 4).astype(np.float64)
    amax = np.abs(g).max(axis=(1, 3))
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 8, -127)
    x_scale = 2.0 ** e[:, None, :, None]
    q = np.clip(g / x_scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return (q * x_scale).reshape(p, f)


def _chain(core, act, padding):
    """The kernel's chain: ``act`` written into partitions [0, VALID) of a 128-partition bf16 tile; ``padding``:
    None (partitions VALID.. never written), or a finite value the tiles held before (what hardware leftovers
    could be: the bf16 tile filled with it, the quantized tile with zeros and its scales with 2^0).  Returns the PSUM result [M, N]."""
    a = _tile(core, (128, F), "bfloat16")
    q = _tile(core, (128, F // 4), "float8_e4m3fn_x4")
    sc = _tile(core, (128, F // 4), "uint8")
    if padding is not None:                              # (a tile starts at partition 0: whole tiles first)
        isa.memset(core, LOC, a, padding)
        isa.memset(core, LOC, q, 0)                      # packed fp8 bits 0: four zeros
        isa.memset(core, LOC, sc, 127)                   # scale 2^0
    isa.tensor_copy(core, LOC, a[:VALID], _tile(core, (VALID, F), "bfloat16", act))
    isa.quantize_mx(core, LOC, q[:QP], a[:QP], sc[:QP])
    # fp4 weights: rows [0, VALID) random, the rest zero (the kernel's memset then partial DMA); scales 2^0
    r = np.random.default_rng(7)
    w = np.zeros((128, N, 4), np.float32)
    w[:VALID] = r.choice([-6.0, -1.5, -0.5, 0.0, 0.5, 1.0, 3.0, 4.0], size=(VALID, N, 4))
    wt = _tile(core, (128, N), "float4_e2m1fn_x4", pack_x4(DTYPES["float4_e2m1fn_x4"], w))
    wsc = _tile(core, (128, N), "uint8", np.full((128, N), 127))
    dst = Tensor.whole(core.allocate((F // 4, N), DTYPES["float32"], PSUM, name="dst"))
    isa.nc_matmul_mx(core, LOC, dst, q, wt, sc, wsc)
    return dst.np.copy(), w


def _act():
    r = np.random.default_rng(3)
    return (r.standard_normal((VALID, F)) * 3).astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.parametrize("padding", [0.0, 1.0e4, -3.5])
def test_finite_padding_gives_the_product_of_the_written_rows(padding):
    # whatever finite values the padding holds, zero weights cancel them: the float64 product of the written rows
    act = _act()
    out, w = _chain(NeuronCore("trn3"), act, padding)
    pad = np.full((QP - VALID, F), padding, np.float64)
    deq = _ref_quantize(np.concatenate([act.astype(np.float64), pad]))[:VALID]       # [VALID, F]
    ref = np.einsum("kmq,knq->mn", deq.reshape(VALID, F // 4, 4), w[:VALID].astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


def test_never_written_padding_reads_the_nan_sentinel_through_the_chain():
    # the sentinel (NaN; the packed fp8 sentinel is the NaN code in each byte) reaches every output element: the
    # contraction sums over partitions the kernel never wrote, and NaN x 0 is NaN
    out, _ = _chain(NeuronCore("trn3"), _act(), None)
    assert np.isnan(out).all()


def test_strict_mode_names_the_first_read_of_never_written_partitions():
    # the message counts the never-written elements of the operand and names the first: partitions VALID..QP
    with pytest.raises(NkiValidationError, match="quantize_mx: operand 'src'.*never written") as e:
        _chain(NeuronCore("trn3", strict=True), _act(), None)
    assert f"{(QP - VALID) * F} of {QP * F} elements of its [{QP}, {F}] view, the first at index [{VALID}, 0]" \
        in str(e.value)


def test_scale_rows_written_by_quantize_mx_match_the_layout():
    # quantize_mx over QP partitions writes the scales at partitions 32q + 0..3 and zeroes the rest of the
    # quadrants it spans
    core = NeuronCore("trn3")
    a = _tile(core, (QP, F), "bfloat16", np.ones((QP, F)))
    q = _tile(core, (128, F // 4), "float8_e4m3fn_x4")
    sc = _tile(core, (128, F // 4), "uint8")
    isa.quantize_mx(core, LOC, q[:QP], a, sc[:QP])
    rows = _scale_rows(QP)
    assert (sc.np[rows] == 127 - 8).all()                 # amax 1.0: exponent 0 - 8, biased 119
    assert (sc.np[np.setdiff1d(np.arange(QP), rows)] == 0).all()
