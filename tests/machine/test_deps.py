"""Dependency tracking by the memory instructions touch: RAW, WAR, WAW; no false dependencies between disjoint
strided tiles; conservative where the geometry is not known."""

import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule
from trnsim.machine.deps import AccessTracker, overlaps
from trnsim.targets import TRN2

trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def view(off, shape, strides):
    return (off, tuple(shape), tuple(strides))


def ext(v):
    off, shape, strides = v
    return off, off + sum((s - 1) * st for s, st in zip(shape, strides)) + 1


def test_column_blocks_of_a_matrix_do_not_overlap():
    a = view(0, (128, 256), (1024, 1))          # out[0:128, 0:256] of a [*, 1024] matrix
    b = view(256, (128, 256), (1024, 1))        # out[0:128, 256:512]
    c = view(128, (128, 256), (1024, 1))        # out[0:128, 128:384]: overlaps both
    assert not overlaps(a, b)
    assert overlaps(a, c) and overlaps(b, c)
    assert overlaps(a, a)
    assert overlaps(a, view(0, (256 * 128,), (1,)))   # unknown geometry against a flat view: conservative


def test_tracker_finds_raw_war_waw_and_drops_covered_entries():
    tr = AccessTracker()
    whole = view(0, (128, 512), (512, 1))
    left = view(0, (128, 256), (512, 1))
    right = view(256, (128, 256), (512, 1))
    tr.add_write(*ext(left), left, 0, "dma")
    tr.add_write(*ext(right), right, 1, "dma")
    out = []
    tr.writers(*ext(left), left, out)
    assert [e[3] for e in out] == [0]           # RAW on the left half only
    tr.add_read(*ext(whole), whole, 2, "vector")
    out = []
    tr.writers(*ext(whole), whole, out)
    tr.readers(*ext(whole), whole, out)
    assert sorted(e[3] for e in out) == [0, 1, 2]
    tr.add_write(*ext(whole), whole, 3, "vector")   # dense write covering everything: older entries go
    assert [e[3] for e in tr.went] == [3] and not tr.rent


def raw_war_waw(x):
    t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)                                   # 0: write t
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)            # 1: RAW on 0 (DMA -> vector)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, t)                                 # 2: RAW on 1 (vector -> DMA)
    nisa.memset(t, 0.0)                                   # 3: WAR on 2 (waits for the store to read t)
    return out


def test_raw_and_war_across_engines_wait_for_completion_plus_semaphore():
    x = np.zeros((128, 512), np.float32)
    tl = schedule(run_kernel(raw_war_waw, (x,), {}, (1,), "trn2", execute=False).cores)
    r = list(tl.rows())
    sema = TRN2.semaphore_ns
    assert r[1].start == pytest.approx(r[0].done + sema) and r[1].deps == (0,)
    assert r[2].start == pytest.approx(r[1].done + sema) and r[2].deps == (1,)
    assert r[3].start == pytest.approx(r[2].done + sema) and 2 in r[3].deps
    assert r[3].bind == 2


def column_stores(x):
    """Stores to column blocks of one output: no false write-after-write between them."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for j in range(x.shape[1] // 128):
        t = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(t, 1.0)
        nisa.dma_copy(out[:, j * 128:(j + 1) * 128], t)
    return out


def test_no_false_dependencies_between_column_tile_stores():
    x = np.zeros((128, 1024), np.float32)
    tl = schedule(run_kernel(column_stores, (x,), {}, (1,), "trn2", execute=False).cores)
    stores = [r for r in tl.rows() if r.engine == "dma"]
    for s in stores:
        assert all(tl.engine[d] == "vector" for d in s.deps)
