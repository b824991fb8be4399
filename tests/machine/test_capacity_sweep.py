"""The capacity sweep (``capacity._sweep``) against the plain event loop it replaced (kept here as the
reference): the same peak and the same first overflow (tile, position, live bytes) on random live ranges with
ties in position, narrow tiles sharing quadrants and explicitly placed tiles."""

import random

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
    for trial in range(300):
        n = rng.randint(0, 60)
        tiles, ranges, parts = {}, {}, {}
        span = rng.choice((5, 20, 200))          # few positions: many ties
        for i in range(n):
            key = (rng.randint(0, 10 ** 6), rng.choice((-1, -1, 0, 1, 2)))
            kind = rng.choice(("sbuf", "sbuf", "psum"))
            size = rng.choice((4, 64, 512, 2048, 8192))
            placement = None
            if rng.random() < 0.15:
                p0 = rng.choice((0, 32, 64, 96))
                placement = (p0, rng.randint(1, 128 - p0), rng.randint(0, 4096), size)
            tiles[key] = (kind, size, f"t{i}", placement)
            a = rng.randint(0, span)
            ranges[key] = [a, a + rng.randint(0, span // 2), ("k.py", a), ("k.py", a)]
            if rng.random() < 0.8:
                parts[key] = rng.choice((1, 16, 32, 33, 64, 65, 128))
        cap = rng.choice((2048, 8192, 1 << 20))
        for kind in ("sbuf", "psum"):
            got = _sweep(tiles, ranges, kind, cap, parts, 128)
            assert got == _reference_sweep(tiles, ranges, kind, cap, parts, 128), (trial, kind)
            overflowed += got[1] is not None
    assert overflowed > 20          # the overflow path was exercised
