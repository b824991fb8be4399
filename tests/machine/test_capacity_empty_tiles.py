"""Tiles of no partitions at the capacity check (issue 28: a 1,000,000-call fuzz ended a kernel with
``ValueError: max() arg is an empty sequence`` in capacity.py's quadrant placement).

A zero-size ``dma_copy`` into an SBUF tile of shape ``(0, n)`` (or ``nl.load`` of an empty slice, which makes one)
is accepted by the instruction; at kernel end the capacity sweep offered the tile the start partitions
``0, 32, 64, 96`` and ``128`` (a tile of 0 partitions "fits" at 128), i.e. quadrant 4 of a memory with 4, and
took the maximum of an empty slice.  A tile of no partitions holds no bytes: it spans no quadrant and adds
nothing to what is live."""

import numpy as np
import pytest

import trnsim.kernels.nki as nki
import trnsim.kernels.nki.isa as nisa
import trnsim.kernels.nki.language as nl
from trnsim.machine.capacity import Occupancy, _sweep
from trnsim.targets import get_target

SBUF_CAP = get_target("trn2").sbuf_partition_bytes       # bytes per partition on trn2 (targets.py)


@nki.jit
def dma_into_an_empty_sbuf_tile(a):
    """The fuzz's situation: a zero-size DMA from HBM into an SBUF tile of 0 partitions, and out again."""
    t = nl.ndarray((0, 4), nl.float32, buffer=nl.sbuf, name="empty")
    out = nl.ndarray((0, 4), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(t, a[0:0])
    nisa.dma_copy(out, t)
    return out


@nki.jit
def load_of_an_empty_slice(a):
    """``nl.load`` of an empty slice makes the same tile; a real tile beside it keeps its bytes."""
    nl.load(a[0:0, :])
    t = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf, name="real")
    nisa.dma_copy(t, a)
    out = nl.ndarray((128, 4), nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(out, t)
    return out


def test_zero_size_dma_into_an_empty_sbuf_tile_ends_the_kernel():
    out = dma_into_an_empty_sbuf_tile(np.zeros((4, 4), np.float32))
    assert np.asarray(out).shape == (0, 4)


def test_load_of_an_empty_slice_ends_the_kernel_and_the_data_is_kept():
    a = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(load_of_an_empty_slice(a), a)


class _Buf:
    """The fields of a Buffer that Occupancy reads."""

    class _D:
        itemsize = 1

    def __init__(self, i, parts, size, placement=None):
        self.id, self.shape, self.block, self.bytes_pp, self.kind = i, (parts, size), 0, size, "sbuf"
        self.name, self.placement, self.dtype = f"t{i}", placement, self._D()


@pytest.mark.parametrize("placement", [None, (128, 0), (0, 0)])
def test_a_tile_of_no_partitions_holds_no_bytes(placement):
    """Automatically placed, or explicitly at partition 128 (inside the bounds for 0 partitions) or 0: the
    sweep counts only the real tiles live with it."""
    occ = Occupancy()
    occ._touch_key((0, -1), _Buf(0, 64, 1000), -1, None)
    occ._touch_key((1, -1), _Buf(1, 0, 5000, placement), -1, None)
    occ._touch_key((2, -1), _Buf(2, 128, 3000), -1, None)
    peak, fail = _sweep(occ.tiles, occ.ranges, "sbuf", SBUF_CAP, occ.parts, 128)
    assert (peak, fail) == (4000, None)          # 1000 + 3000 in quadrants 0-1; the empty tile adds nothing
    # and over the capacity the overflow is the real tile's, at the real count
    peak, fail = _sweep(occ.tiles, occ.ranges, "sbuf", 3500, occ.parts, 128)
    assert peak == 4000 and fail == ((2, -1), 0, 4000)
