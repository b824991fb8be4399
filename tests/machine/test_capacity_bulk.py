"""Bulk segments of the capacity tables (``Occupancy.add_bulk``, the loop replay's tiles): the sweep over the
tables and the segments' arrays gives what the sweep over the materialized tables gives -- peak, the first
overflow's tile (also when it is a segment's), its position and live bytes -- and materializing puts each
segment's tiles where one-by-one issue would have (after the first ``at`` entries)."""

import random

import numpy as np
import pytest

from trnsim.machine import capacity
from trnsim.machine.capacity import Occupancy
from trnsim.memory import PSUM, SBUF


class FakeSegment:
    """A segment given as plain lists (the protocol ``Occupancy.add_bulk`` names)."""

    def __init__(self, keys, ranges, tiles, parts):
        self.keys, self.ranges, self.tiles, self.parts = keys, ranges, tiles, parts
        self.n = len(keys)
        self.at = 0
        self.placed = any(t[3] is not None for t in tiles)

    def items(self):
        return self.keys, self.ranges, self.tiles, self.parts

    def columns(self, kind):
        sel = [i for i, t in enumerate(self.tiles) if t[0] == kind]
        a = lambda xs: np.array(xs, np.int64)  # noqa: E731
        return (a([self.keys[i][0] for i in sel]), a([self.keys[i][1] for i in sel]),
                a([self.ranges[i][0] for i in sel]), a([self.ranges[i][1] for i in sel]),
                a([self.tiles[i][1] for i in sel]), a([self.parts[i] for i in sel]), a(sel))


def _tile(rng, bid, seq_hi, kind=None, parts=128):
    first = rng.randrange(seq_hi)
    last = first + rng.randrange(6)
    kind = kind or rng.choice([SBUF, PSUM])
    return (bid, -1), (first, last, None, None), (kind, rng.choice([256, 512, 2048]), f"tile#{bid}", None), parts


def _build(seed, parts=128):
    """An Occupancy with table entries and segments interleaved, and the same tiles one by one (the reference)."""
    rng = random.Random(seed)
    occ, ref = Occupancy(), Occupancy()
    bid = 0
    for _ in range(rng.randrange(1, 4)):
        for _ in range(rng.randrange(0, 30)):          # tiles made one by one
            bid += 1
            k, r, t, p = _tile(rng, bid, 200, parts=parts)
            for o in (occ, ref):
                o.ranges[k], o.tiles[k], o.parts[k] = list(r), t, p
        made = [_tile(rng, bid + 1 + j, 200, parts=parts) for j in range(rng.randrange(1, 60))]
        bid += len(made)
        keys, rs, ts, ps = (list(x) for x in zip(*made))
        occ.add_bulk(FakeSegment(keys, rs, ts, ps))
        for k, r, t, p in made:
            ref.ranges[k], ref.tiles[k], ref.parts[k] = list(r), t, p
    return occ, ref


@pytest.mark.parametrize("seed", range(40))
def test_sweep_with_segments_equals_sweep_of_the_tables(seed):
    occ, ref = _build(seed)
    for kind in (SBUF, PSUM):
        want = capacity._sweep(ref.tiles, ref.ranges, kind, 4096, ref.parts, 128)
        got = capacity._sweep_bulk(occ, kind, 4096, 128)
        assert got == want
        # a limit just under the peak: the first overflow is found at the same tile, position and live bytes
        cap = max(want[0] - 1, 0)
        want = capacity._sweep(ref.tiles, ref.ranges, kind, cap, ref.parts, 128)
        assert capacity._sweep_bulk(occ, kind, cap, 128) == want
    assert occ.bulk
    occ.materialize()
    assert not occ.bulk
    assert list(occ.ranges.items()) == list(ref.ranges.items())
    assert list(occ.tiles.items()) == list(ref.tiles.items())
    assert list(occ.parts.items()) == list(ref.parts.items())


def test_a_segment_tile_can_be_the_first_overflow():
    occ, ref = Occupancy(), Occupancy()
    k0, r0, t0 = (1, -1), [0, 10, None, None], (SBUF, 1000, "a", None)
    for o in (occ, ref):
        o.ranges[k0], o.tiles[k0], o.parts[k0] = list(r0), t0, 128
    seg = FakeSegment([(2, -1), (3, -1)], [(2, 3, None, None), (4, 12, None, None)],
                      [(SBUF, 100, "b", None), (SBUF, 900, "c", None)], [128, 128])
    occ.add_bulk(seg)
    for k, r, t in zip(seg.keys, seg.ranges, seg.tiles):
        ref.ranges[k], ref.tiles[k], ref.parts[k] = list(r), t, 128
    want = capacity._sweep(ref.tiles, ref.ranges, SBUF, 1500, ref.parts, 128)
    assert want == (1900, ((3, -1), 4, 1900))
    assert capacity._sweep_bulk(occ, SBUF, 1500, 128) == want


def test_narrow_tiles_decline_and_the_check_materializes():
    """Tiles of 32 partitions are placed per quadrant: the array sweep declines; check() puts the segments in the
    tables and sweeps them, with the reference's report."""
    occ, ref = _build(3, parts=32)
    assert capacity._sweep_bulk(occ, SBUF, 1 << 20, 128) is None

    class T:
        sbuf_partition_bytes, sbuf_partitions, psum_partition_bytes, psum_partitions = 1 << 20, 128, 1 << 20, 128
    occ.check(T())
    ref.check(T())
    assert not occ.bulk and occ.report == ref.report
    assert list(occ.tiles.items()) == list(ref.tiles.items())
