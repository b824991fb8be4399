"""The capacity check's third order: loads sunk to their first use (``reorder.sunk_positions``).  A kernel that
loads three large tiles before using any, and uses the first two after an instruction written late in program order
(so no read can move up), fits once the third load waits for its first use; it is refused when the three tiles are
read together (live at once in every order), or when a fence (a barrier) lies between the load and its use; the
order keeps every dependency (checked on random records)."""

import random

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

CAP = TRN2.sbuf_partition_bytes          # 224 KiB per partition on trn2 (docs/hardware.md)
F = 96 * 1024 // 4                       # 96 KiB of float32 per partition: two fit in CAP with room, three do not
W = 1024


def _kernel(all_three=False, fenced=False):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 2 * W), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf, name="a")
        b = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf, name="b")
        c = nl.ndarray((128, F), nl.float32, buffer=nl.sbuf, name="c")
        nisa.dma_copy(a, x[:, 0:F])
        nisa.dma_copy(b, x[:, F:2 * F])
        nisa.dma_copy(c, x[:, 2 * F:3 * F])          # in program order a, b and c are live here: 288 KiB
        if fenced:
            nisa.core_barrier(None, (0,))
        e = nl.ndarray((128, W), nl.float32, buffer=nl.sbuf, name="e")
        d = nl.ndarray((128, W), nl.float32, buffer=nl.sbuf, name="d")
        nisa.memset(d, 0.0)                          # the accumulator, set after the loads: a's and b's reads
        nisa.tensor_tensor(d, d, a[:, 0:W], nl.add)  # depend on it, so they cannot move above c's load
        if all_three:
            # a is read before and after, b and c here: all three live at once in every order
            nisa.tensor_tensor(e, c[:, 0:W], b[:, 0:W], nl.multiply)
            nisa.tensor_tensor(d, d, a[:, 0:W], nl.add)
        nisa.tensor_tensor(d, d, b[:, 0:W], nl.add)
        nisa.dma_copy(out[:, 0:W], d)
        if not all_three:
            nisa.tensor_scalar(e, c[:, 0:W], nl.multiply, 2.0)
        nisa.dma_copy(out[:, W:2 * W], e)
        return out
    return k


X = np.random.default_rng(3).standard_normal((128, 3 * F)).astype(np.float32)


def test_a_load_sunk_to_its_first_use_fits():
    assert 2 * F * 4 + 2 * W * 4 <= CAP < 3 * F * 4
    res = run_kernel(_kernel(), (X,), {}, (1,), "trn2")
    rep = res.cores[0].occupancy.report
    assert rep["program"]["sbuf"] > CAP                       # program order overflows
    assert rep["sunk"] and rep["reordered"]["sbuf"] <= CAP    # the sunk order fits
    out = res.outputs if not isinstance(res.outputs, (list, tuple)) else res.outputs[0]
    x = X.astype(np.float64)
    assert np.abs(out[:, :W] - (x[:, 0:W] + x[:, F:F + W])).max() <= 1e-6
    assert np.abs(out[:, W:] - 2 * x[:, 2 * F:2 * F + W]).max() <= 1e-6


@pytest.mark.parametrize("all_three,fenced,why", [(True, False, "in the order trnsim checks"),
                                                   (False, True, "core_barrier")])
def test_refused_when_three_are_read_together_or_a_fence_is_between(all_three, fenced, why):
    with pytest.raises(CapacityError, match=why) as e:
        run_kernel(_kernel(all_three, fenced), (X,), {}, (1,), "trn2", execute=False)
    msg = str(e.value)
    assert "test_capacity_sink.py" in msg and str(CAP) in msg and "down to right before its first use" in msg


def _random_ops(rnd, n, nbuf=6):
    """Random records over tiles 1..nbuf (on chip) and buffers 100..102 (HBM): loads, stores, engine ops."""
    ops = []
    for i in range(n):
        kind = rnd.random()
        t = rnd.randint(1, nbuf)
        lo = rnd.randrange(0, 8)
        hi = rnd.randint(lo + 1, 8)
        view = (lo, (hi - lo,), (1,))
        h = rnd.randint(100, 102)
        if kind < 0.35:        # load
            ops.append((((t, lo, hi, view),), ((h, lo, hi, view),), ("k.py", i)))
        elif kind < 0.55:      # store
            ops.append((((h, lo, hi, view),), ((t, lo, hi, view),), ("k.py", i)))
        elif kind < 0.65:      # memset (sunk as loads are)
            ops.append((((t, lo, hi, view),), (), ("k.py", i)))
        else:                  # engine op: t2 = f(t)
            t2 = rnd.randint(1, nbuf)
            ops.append((((t2, lo, hi, view),), ((t, lo, hi, view),), ("k.py", i)))
    return ops


def _conflict(a, b):
    wa, ra, _ = a
    wb, rb, _ = b
    for x in wa:
        for y in list(wb) + list(rb):
            if x[0] == y[0] and x[1] < y[2] and y[1] < x[2]:
                return True
    for x in ra:
        for y in wb:
            if x[0] == y[0] and x[1] < y[2] and y[1] < x[2]:
                return True
    return False


@pytest.mark.parametrize("seed", range(30))
def test_sunk_order_keeps_every_dependency_and_fence(seed):
    rnd = random.Random(seed)
    n = rnd.randint(5, 60)
    ops = _random_ops(rnd, n)
    tiles = {(b, -1): ("sbuf", 64, f"t{b}", None) for b in range(1, 7)}
    fences = sorted({(rnd.randrange(n), ("k.py", 0), "barrier") for _ in range(rnd.randint(0, 2))})
    pos, _, moved, _ = sunk_positions(ops, tiles, {}, fences)
    assert sorted(pos) == list(range(n))
    for i in range(n):
        for j in range(i + 1, n):
            if _conflict(ops[i], ops[j]):
                assert pos[i] < pos[j], (i, j, ops[i], ops[j])
    for f, _, _ in fences:                   # nothing crosses a fence, either way
        for i in range(n):
            assert (pos[i] < f) == (i < f) or f == 0
    if moved:
        assert pos != list(range(n))
