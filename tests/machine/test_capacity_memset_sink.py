"""The capacity check's sunk order moves memsets as it moves loads (``reorder.sunk_positions``): a memset reads
nothing, so it depends only on the accesses of the tile it writes and the scheduler may run it right before the
tile's first use.  A kernel that zeroes an accumulator before a phase that needs the rest of SBUF, and first reads the
accumulator after that phase, fits; it is refused when the accumulator is read before the phase too (then it is live
across the phase in every order) or when a barrier lies between the memset and the phase.  (The nki-library moe_cte
SHARD_ON_BLOCK kernel zeroes its ``block_old`` tiles at the top of a block and first reads them after the block's
matmuls.)"""

import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine.capacity import CapacityError
from trnsim.machine.reorder import sunk_positions
from trnsim.targets import TRN2

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

CAP = TRN2.sbuf_partition_bytes          # 224 KiB per partition on trn2 (targets.py, docs/hardware.md)
F = 96 * 1024 // 4                       # a 96 KiB float32 tile per partition
ACC = 48 * 1024 // 4                     # the accumulator: 48 KiB per partition; 96 + 96 + 48 > 224 > 96 + 96
W = 512


def _kernel(read_early=False, fenced=False):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 2 * W), nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, ACC), nl.float32, buffer=nl.sbuf, name="acc")
        nisa.memset(acc, 0.0)                        # in program order acc is live from here
        if read_early:
            nisa.dma_copy(out[:, W:2 * W], acc[:, 0:W])
        if fenced:
            nisa.core_barrier(None, (0,))
        a = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf, name="a")
        b = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf, name="b")
        nisa.dma_copy(a, x)
        nisa.tensor_scalar(b, a, nl.multiply, 2.0)   # a, b and acc live here in program order: 240 KiB
        e = nl.ndarray((128, W), nl.float32, buffer=nl.sbuf, name="e")
        nisa.tensor_tensor(e, a[:, 0:W], b[:, 0:W], nl.add)      # the last reads of a and b
        nisa.tensor_tensor(acc[:, 0:W], acc[:, 0:W], e, nl.add)  # the first read of acc
        nisa.dma_copy(out[:, 0:W], acc[:, 0:W])
        if not read_early:
            nisa.dma_copy(out[:, W:2 * W], e)
        return out
    return k


X = np.random.default_rng(5).standard_normal((128, F)).astype(np.float32)


def test_a_memset_sunk_to_its_first_use_fits():
    assert 2 * F * 4 + W * 4 <= CAP < 2 * F * 4 + ACC * 4
    res = run_kernel(_kernel(), (X,), {}, (1,), "trn2")
    rep = res.cores[0].occupancy.report
    assert rep["program"]["sbuf"] == 2 * F * 4 + ACC * 4 + W * 4 > CAP    # program order: a, b, acc and e
    assert rep["sunk"] and rep["reordered"]["sbuf"] <= CAP        # the sunk order fits
    out = res.outputs if not isinstance(res.outputs, (list, tuple)) else res.outputs[0]
    ref = 3.0 * X[:, 0:W].astype(np.float64)                       # acc = 0 + (a + 2a)
    assert np.abs(out[:, 0:W] - ref).max() <= 1e-5
    assert np.abs(out[:, W:] - ref).max() <= 1e-5


@pytest.mark.parametrize("read_early,fenced", [(True, False), (False, True)])
def test_refused_when_the_accumulator_is_read_before_or_a_fence_is_between(read_early, fenced):
    with pytest.raises(CapacityError, match="in the order trnsim checks") as e:
        run_kernel(_kernel(read_early, fenced), (X,), {}, (1,), "trn2", execute=False)
    msg = str(e.value)
    assert "test_capacity_memset_sink.py" in msg and str(CAP) in msg and "(a load, a memset)" in msg
    assert "`acc` 49152 B on 128 partitions" in msg          # the accumulator is among the live tiles


def _op(buf, lo=0, hi=8):
    return (buf, lo, hi, (lo, (hi - lo,), (1,)))


def test_sunk_positions_moves_a_memset_to_right_before_its_first_conflicting_access():
    tiles = {(b, -1): ("sbuf", 64, f"t{b}", None) for b in (1, 2, 3, 4)}
    ops = [((_op(1),), (), ("k.py", 0)),                 # memset t1
           ((_op(2),), (_op(100),), ("k.py", 1)),        # load t2 from HBM
           ((_op(3),), (_op(2),), ("k.py", 2)),          # t3 = f(t2)
           ((_op(4),), (_op(1),), ("k.py", 3))]          # t4 = f(t1): the memset's first conflict
    pos, _, moved, _ = sunk_positions(ops, tiles, {}, [])
    assert pos == [2, 0, 1, 3] and moved == 1
    # a partial memset of another part of t1 in between: t1's accesses keep their order
    ops2 = ops[:2] + [((_op(1, 4, 8),), (), ("k.py", 2))] + ops[2:]
    pos2, _, _, _ = sunk_positions(ops2, tiles, {}, [])
    assert pos2[0] < pos2[2] < pos2[4]
    # a fence right after the memset: it stays before the fence
    pos3, _, moved3, _ = sunk_positions(ops, tiles, {}, [(1, ("k.py", 1), "core_barrier")])
    assert pos3[0] == 0 and moved3 == 0
    # an explicitly placed tile's memset keeps its place
    placed = dict(tiles)
    placed[(1, -1)] = ("sbuf", 64, "t1", (0, 128, 0, 64))
    pos4, _, _, _ = sunk_positions(ops, placed, {}, [])
    assert pos4 == [0, 1, 2, 3]
