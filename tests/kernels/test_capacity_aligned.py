"""The capacity sweep over tables read side by side (``capacity._sweep_one_span_aligned``, taken when the tile,
range and partition tables hold the same key objects in the same order, as ``Occupancy`` fills them) against the
sweep by key lookups (``_sweep_one_span`` and the event loop, checked against a reference loop in
tests/machine/test_capacity_sweep.py): the same peak and the same first overflow (tile, position, live bytes).
(The issue path's per-tile cost at the end of a launch: issue 29.)"""

import random

import numpy as np
import pytest

import trnsim
from trnsim.kernels import loop_replay
from trnsim.kernels.jit import run_kernel
from trnsim.machine import capacity
from trnsim.machine.capacity import CapacityError, _sweep

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def _tables(rng, n, span, wide):
    tiles, ranges, parts = {}, {}, {}
    for i in range(n):
        key = (i * 7 + rng.randint(0, 6), rng.choice((-1, -1, 0, 1)))
        if key in tiles:
            continue
        kind = rng.choice(("sbuf", "sbuf", "psum"))
        size = rng.choice((4, 64, 512, 2048, 8192))
        placement = None
        if not wide and rng.random() < 0.05:
            placement = (0, 128, rng.randint(0, 4096), size)
        a = rng.randint(0, span)
        ranges[key] = [a, a + rng.randint(0, span // 2), ("k.py", a), ("k.py", a)]
        tiles[key] = (kind, size, f"t{i}", placement)
        parts[key] = rng.choice((97, 100, 128) if wide else (16, 32, 64, 128))
    return tiles, ranges, parts


def test_the_aligned_sweep_equals_the_sweep_by_key():
    rng = random.Random(11)
    taken, over = [], []
    real = capacity._sweep_one_span_aligned

    def spy(*a):
        got = real(*a)
        taken.append(got is not None)
        return got

    for trial in range(300):
        wide = trial % 4 != 0
        tiles, ranges, parts = _tables(rng, rng.randint(0, 400), rng.choice((5, 30, 300)), wide)
        cap = rng.choice((2048, 8192, 1 << 20)) * (30 if wide else 1)
        for kind in ("sbuf", "psum"):
            capacity._sweep_one_span_aligned = spy
            try:
                got = _sweep(tiles, ranges, kind, cap, parts, 128)
            finally:
                capacity._sweep_one_span_aligned = real
            aligned = capacity._aligned
            capacity._aligned = lambda *a: False
            try:
                want = _sweep(tiles, ranges, kind, cap, parts, 128)
            finally:
                capacity._aligned = aligned
            assert got == want, (trial, kind)
            over.append(got[1] is not None)
    assert sum(taken) > 100 and not all(taken)      # the aligned sweep ran, and declined where it must
    assert sum(over) > 30                           # overflows found by it


def test_tables_not_side_by_side_are_swept_by_key():
    tiles = {(i, -1): ("sbuf", 64, f"t{i}", None) for i in range(100)}
    ranges = {k: [i, i + 3, None, None] for i, k in enumerate(tiles)}
    parts = {(i, -1): 128 for i in range(100)}          # equal keys, not the same objects
    assert capacity._aligned(tiles, ranges, {k: 128 for k in tiles})
    assert not capacity._aligned(tiles, ranges, parts)
    assert not capacity._aligned(tiles, dict(reversed(list(ranges.items()))), {k: 128 for k in tiles})
    assert _sweep(tiles, ranges, "sbuf", 1000, parts, 128) == _sweep(tiles, ranges, "sbuf", 1000,
                                                                        {k: 128 for k in tiles}, 128)


def _overflow(x, n):
    """Tiles kept alive in a list until every one is written: SBUF overflows at the tile that no longer fits."""
    P, F = x.shape
    keep = []
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        keep.append(t)
    for t in keep:
        nisa.dma_copy(x, t)
    return x


def test_a_kernel_refused_names_the_same_tile_either_way(monkeypatch):
    x = np.zeros((128, 2048), np.float32)              # 8 KiB per partition a tile: the 25th does not fit (trn2)
    msgs = []
    import itertools

    from trnsim.memory import space
    for aligned in (True, False):
        monkeypatch.setattr(space, "_ids", itertools.count(1))     # (tile names carry buffer ids)
        if not aligned:
            monkeypatch.setattr(capacity, "_aligned", lambda *a: False)
        prev = loop_replay.set_enabled(False)
        try:
            with pytest.raises(CapacityError) as e:
                run_kernel(_overflow, (x,), {"n": 80}, (1,), "trn2", execute=False)
        finally:
            loop_replay.set_enabled(prev)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] and "SBUF" in msgs[0]
