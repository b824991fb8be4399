"""The capacity sweep (``capacity._sweep``) against the plain event loop it replaced (kept here as the
reference): the same peak and the same first overflow (tile, position, live bytes) on random live ranges with
ties in position, narrow tiles sharing quadrants and explicitly placed tiles, and on many wide tiles (the
vectorised sweep, ``_sweep_one_span``)."""

import random

from trnsim.machine import capacity
from trnsim.machine.capacity import _Quadrants, _sweep


def _reference_sweep(tiles, ranges, kind, cap, parts=None, nparts=128):
    ev = []
    for key, (k, size, _, _) in tiles.items():
        if k == kind:
            r = ranges[key]
            ev.append((r[0], 1, size, key))
            ev.append((r[1] + 1, 0, size, key))
    ev.sort(key=lambda e: (e[0], e[1]))
    quads = _Quadrants(nparts)
    peak = 0
    fail = None
    parts = parts or {}
    for s, add, size, key in ev:
        if not add:
            quads.free(key)
            continue
        live = quads.place(key, size, parts.get(key, nparts), tiles[key][3])
        peak = max(peak, live)
        if live > cap and fail is None:
            fail = (key, s, live)
    return peak, fail


def test_sweep_equals_the_reference_event_loop():
    rng = random.Random(7)
    overflowed = 0
    vectorised = []
    real = capacity._sweep_one_span

    def spy(*a):
        got = real(*a)
        vectorised.append(got is not None)
        return got

    capacity._sweep_one_span = spy
    try:
        _trials(rng, overflowed := [])
    finally:
        capacity._sweep_one_span = real
    assert sum(overflowed) > 20          # the overflow path was exercised
    assert sum(vectorised) > 50 and not all(vectorised)     # both sweeps ran


def _trials(rng, overflowed):
    for trial in range(400):
        wide = trial % 3 == 0               # many tiles all spanning the four quadrants
        n = rng.randint(64, 300) if wide else rng.randint(0, 60)
        tiles, ranges, parts = {}, {}, {}
        span = rng.choice((5, 20, 200))          # few positions: many ties
        for i in range(n):
            key = (rng.randint(0, 10 ** 6), rng.choice((-1, -1, 0, 1, 2)))
            kind = rng.choice(("sbuf", "sbuf", "psum"))
            size = rng.choice((4, 64, 512, 2048, 8192))
            placement = None
            if not wide and rng.random() < 0.15:
                p0 = rng.choice((0, 32, 64, 96))
                placement = (p0, rng.randint(1, 128 - p0), rng.randint(0, 4096), size)
            tiles[key] = (kind, size, f"t{i}", placement)
            a = rng.randint(0, span)
            ranges[key] = [a, a + rng.randint(0, span // 2), ("k.py", a), ("k.py", a)]
            if rng.random() < 0.8:
                parts[key] = rng.choice((97, 100, 128) if wide else (1, 16, 32, 33, 64, 65, 128))
        if wide and rng.random() < 0.1 and tiles:       # one odd tile: the vectorised sweep must decline
            k0 = next(iter(tiles))
            parts[k0] = 64
        cap = rng.choice((2048, 8192, 1 << 20)) * (30 if wide else 1)
        for kind in ("sbuf", "psum"):
            got = _sweep(tiles, ranges, kind, cap, parts, 128)
            ref = _reference_sweep(tiles, ranges, kind, cap, parts, 128)
            assert got == ref, (trial, kind)
            assert all(type(x) is int for x in (got[0],) + (got[1][1:] if got[1] else ()))
            overflowed.append(got[1] is not None)
