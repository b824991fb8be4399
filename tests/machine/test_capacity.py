"""SBUF/PSUM capacity from each tile's live range in program order (first to last access), block tensors,
explicit placements checked for overlap."""

import numpy as np
import pytest

import trnsim.kernels.nki as nki
import trnsim.kernels.nki.isa as nisa
import trnsim.kernels.nki.language as nl
from trnsim.isa.errors import NkiValidationError
from trnsim.kernels import context
from trnsim.kernels.tensor import NkiTensor
from trnsim.machine.capacity import CapacityError, modulo_placement
from trnsim.memory import dtype_of
from trnsim.targets import get_target

KiB = 1024
SBUF_CAP = get_target("trn2").sbuf_partition_bytes       # 224 KiB per partition on trn2 (targets.py)
PSUM_CAP = get_target("trn2").psum_partition_bytes       # 16 KiB per partition


def _tile(shape, dtype="float32", kind="sbuf", name="", **kw):
    """A tile made the way the front ends make one (``NeuronCore.allocate``), with the machine's keywords."""
    buf = context.current().core.allocate(tuple(shape), dtype_of(dtype), kind, name, **kw)
    return NkiTensor.whole(buf, name)


def _line(fn, marker):
    import inspect
    src, first = inspect.getsourcelines(fn)
    return next(first + i for i, ln in enumerate(src) if f"# <{marker}>" in ln)


@nki.jit
def held_but_used_one_at_a_time(x):
    """Four 128 KiB tiles all held by Python to the end, each live for two instructions only: in program order at
    most one is live, so the compiler fits them (the old, reference-counted accounting refused the second)."""
    out = nl.ndarray((128, 32 * KiB), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = [nl.ndarray((128, 32 * KiB), dtype=nl.float32, buffer=nl.sbuf, name=f"t{i}") for i in range(4)]
    for i, t in enumerate(tiles):
        nisa.memset(t, float(i))
        nisa.dma_copy(out, t)
    return out


def test_python_references_do_not_occupy_sbuf():
    out = held_but_used_one_at_a_time(np.zeros(1, np.float32))
    np.testing.assert_array_equal(out, 3.0)


@nki.jit
def two_live_at_once(x):
    a = nl.ndarray((128, 32 * KiB), dtype=nl.float32, buffer=nl.sbuf, name="big_a")
    b = nl.ndarray((128, 25 * KiB), dtype=nl.float32, buffer=nl.sbuf, name="big_b")
    nl.ndarray((128, 32 * KiB), dtype=nl.float32, buffer=nl.sbuf, name="never_used")   # occupies nothing
    nisa.memset(a, 1.0)                                                   # <a>
    nisa.memset(b, 2.0)                                                   # <b>
    nisa.tensor_tensor(b[:, 0:16], a[:, 0:16], b[:, 0:16], op=nl.add)     # <last>
    return x


def test_overlapping_live_ranges_over_capacity_are_refused_with_line_live_set_and_limit():
    with pytest.raises(CapacityError) as ei:
        two_live_at_once(np.zeros(1, np.float32))
    e = ei.value
    msg = str(e)
    fn = two_live_at_once.fn
    assert isinstance(e, NkiValidationError)
    assert e.location[1] == _line(fn, "b")                     # where the live set first exceeds the capacity
    assert f"capacity {SBUF_CAP} bytes per partition" in msg and e.limit == SBUF_CAP
    assert "SBUF allocation of 102400 bytes per partition for tensor `big_b`" in msg
    assert f"{(32 + 25) * KiB * 4} bytes per partition would be live" in msg
    assert (f"`big_a` 131072 B on 128 partitions (test_capacity.py:{_line(fn, 'a')} .. "
            f"test_capacity.py:{_line(fn, 'last')})") in msg
    assert "2 tiles, 233472 bytes per partition, are live" in msg
    assert "never_used" not in msg


@nki.jit
def psum_tiles(x, live_together):
    """Nine 2 KiB-per-partition PSUM tiles (a bank each; PSUM holds eight)."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    ps = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name=f"ps{i}") for i in range(9)]
    for p in ps:
        nisa.memset(p, 1.0)                                                  # <ps-set>
        if not live_together:
            nisa.tensor_tensor(acc, acc, p, op=nl.add)
    if live_together:
        for p in ps:
            nisa.tensor_tensor(acc, acc, p, op=nl.add)                       # <ps-read>
    nisa.dma_copy(out, acc)
    return out


def test_psum_live_ranges():
    np.testing.assert_array_equal(psum_tiles(np.zeros(1, np.float32), False), 9.0)
    with pytest.raises(CapacityError, match=rf"PSUM allocation of 2048 bytes per partition for tensor `ps8`.*"
                                            rf"{9 * 2048} bytes per partition would be live.*capacity {PSUM_CAP}"):
        psum_tiles(np.zeros(1, np.float32), True)


def test_psum_refusal_names_the_tiles_made_in_one_loop_and_read_in_another():
    fn = psum_tiles.fn
    first, last = _line(fn, "ps-set"), _line(fn, "ps-read")
    with pytest.raises(CapacityError) as e:
        psum_tiles(np.zeros(1, np.float32), True)
    msg = str(e.value)
    assert (f"9 of them ({9 * 2048} bytes per partition) are first accessed at test_capacity.py:{first} and last "
            f"accessed at test_capacity.py:{last}") in msg
    assert "Allocation.LINEAR" in msg and "default flow" in msg


def test_a_tile_larger_than_the_memory_is_refused_at_once():
    @nki.jit
    def k(x):
        nl.ndarray((128, SBUF_CAP // 4 + 1), dtype=nl.float32, buffer=nl.sbuf)     # <alloc>
    with pytest.raises(NkiValidationError, match=rf"SBUF allocation of {SBUF_CAP + 4} bytes per partition.*"
                                                 rf"capacity {SBUF_CAP}") as ei:
        k(np.zeros(1, np.float32))
    assert ei.value.location[1] == _line(k.fn, "alloc")


@nki.jit
def block_tensor(x, mode):
    """A [4, par_dim(128), 16K fp32] block tensor (256 KiB per partition, more than SBUF) used a block at a time:
    four tiles of 64 KiB with their own live ranges (the compiler allocates fewer physical tiles)."""
    out = nl.ndarray((128, 16 * KiB), dtype=nl.float32, buffer=nl.shared_hbm)
    blk = _tile((128, 4, 16 * KiB), name="blocks", block=16 * KiB, block_shape=(4,))
    nisa.memset(blk[:, 0, :], 0.0)
    for i in range(1, 4):
        b = blk[:, i, :]
        nisa.memset(b, float(i))                                             # <set>
        src = blk[:, 0, :] if mode == "keep0" else blk[:, i - 1, :]
        nisa.tensor_tensor(b, b, src, op=nl.add)
    if mode == "all":                                                        # every block live to the end
        for i in range(3):
            nisa.tensor_tensor(blk[:, 3, :], blk[:, 3, :], blk[:, i, :], op=nl.add)
    nisa.dma_copy(out, blk[:, 3, :])
    return out


def test_block_tensor_blocks_have_their_own_live_ranges():
    # each block lives from its memset to the next block's add: two blocks (128 KiB) live at a time
    np.testing.assert_array_equal(block_tensor(np.zeros(1, np.float32), "chain"), 6.0)    # 3 + 2 + 1 + 0
    np.testing.assert_array_equal(block_tensor(np.zeros(1, np.float32), "keep0"), 3.0)    # block 0 kept: still 2
    with pytest.raises(CapacityError, match=rf"tensor `blocks` \(block 3\) does not fit: at this line "
                                            rf"{4 * 64 * KiB} bytes per partition would be live.*`blocks` block 0 "):
        block_tensor(np.zeros(1, np.float32), "all")


@nki.jit
def placed(x, addr_b, reuse):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = _tile((128, 64), name="pa", address=(0, 0))
    b = _tile((128, 64), name="pb", address=(0, addr_b))
    nisa.memset(a, 1.0)                                      # <a>
    if reuse:                                                # a is dead before b is written: same bytes are fine
        nisa.dma_copy(out, a)
        nisa.memset(b, 2.0)
        nisa.dma_copy(out, b)
    else:
        nisa.memset(b, 2.0)                                  # <b>
        nisa.tensor_tensor(b, a, b, op=nl.add)
        nisa.dma_copy(out, b)
    return out


def test_explicit_placements_overlapping_while_live_are_refused():
    np.testing.assert_array_equal(placed(np.zeros(1, np.float32), 256, False), 3.0)     # disjoint bytes
    np.testing.assert_array_equal(placed(np.zeros(1, np.float32), 0, True), 2.0)        # same bytes, in turn
    with pytest.raises(CapacityError) as ei:
        placed(np.zeros(1, np.float32), 128, False)                                      # [128, 256) shared
    msg = str(ei.value)
    assert "`pa` and `pb` are placed on the same bytes [128, 256) of partitions [0, 128)" in msg
    assert f"test_capacity.py:{_line(placed.fn, 'a')}" in msg
    assert ei.value.location[1] == _line(placed.fn, "b")


def test_explicit_placement_outside_the_memory_is_refused():
    @nki.jit
    def k(x):
        _tile((128, 64), name="far", address=(0, SBUF_CAP - 128))      # 256 bytes per partition from there
    with pytest.raises(Exception, match=rf"placement of tensor 'far' at byte {SBUF_CAP - 128} .*ends at "
                                        rf"{SBUF_CAP + 128}, beyond the capacity of {SBUF_CAP}"):
        k(np.zeros(1, np.float32))


@nki.jit
def mod_alloc_blocks(x, ntiles):
    """Four blocks on ``ntiles`` physical tiles (mod_alloc): block i and block i + ntiles share bytes."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    blk = _tile((128, 4, 64), name="ring", block=64, block_shape=(4,),
                address=modulo_placement(base_addr=1024, num_free_tiles=(ntiles,)))
    for i in range(4):
        nisa.memset(blk[:, i, :], float(i))
        if i >= 2:                                           # reads the block two back: needs 3 live tiles
            nisa.tensor_tensor(blk[:, i, :], blk[:, i, :], blk[:, i - 2, :], op=nl.add)   # <read>
    nisa.dma_copy(out, blk[:, 3, :])
    return out


def test_mod_alloc_ring_too_small_for_the_live_blocks_is_refused():
    np.testing.assert_array_equal(mod_alloc_blocks(np.zeros(1, np.float32), 3), 4.0)     # 3 + 1
    with pytest.raises(CapacityError, match=r"`ring block 0` and `ring block 2` are placed on the same bytes "
                                            r"\[1024, 1280\)"):
        mod_alloc_blocks(np.zeros(1, np.float32), 2)


def test_modulo_placement_formula():
    f = modulo_placement(base_addr=4096, base_partition=0, num_par_tiles=(2,), num_free_tiles=(2, 3))
    # partitions: block index mod (2,) times 64 partitions; bytes: (i mod 2, j mod 3) row-major times 512
    assert f((0, 0), 64, 512) == (0, 4096)
    assert f((1, 1), 64, 512) == (64, 4096 + (1 * 3 + 1) * 512)
    assert f((2, 4), 64, 512) == (0, 4096 + (0 * 3 + 1) * 512)
    assert modulo_placement(100)((7,), 128, 64) == (0, 100)          # no tile counts: every block on one tile


@nki.jit
def narrow_tiles(x, n):
    """``n`` tiles of 13 partitions x 7 KiB, all read by the last instruction (the weight tiles of a projection
    whose heads are all accumulated into one PSUM tile): every one is live at the end, whatever the order."""
    out = nl.ndarray((13, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((13, 512), dtype=nl.float32, buffer=nl.sbuf, name="acc")
    nisa.memset(acc, 0.0)
    ws = [nl.ndarray((13, 7 * KiB // 2), dtype=nl.bfloat16, buffer=nl.sbuf, name=f"w{i}") for i in range(n)]
    for w in ws:
        nisa.memset(w, 1.0)
    for w in ws:
        nisa.tensor_tensor(acc, acc, w[:, 0:512], op=nl.add)
    nisa.dma_copy(out, acc)
    return out


def test_narrow_tiles_share_byte_ranges_in_different_quadrants():
    """Tiles of 13 partitions may start at partition 0, 32, 64 or 96 (hardware.md "Memory rules"), so four of
    them can hold the same bytes per partition in different quadrants: the check counts bytes per quadrant.  The
    accumulator (2 KiB) and the 7 KiB weight tiles are spread over the four quadrants; one tile more than fits in
    the emptiest quadrant is refused, and the refusal lists the tiles' partitions."""
    fit = (SBUF_CAP - 2 * KiB) // (7 * KiB) + 3 * (SBUF_CAP // (7 * KiB))
    assert fit > 3 * (SBUF_CAP // (7 * KiB))           # far more than the ~31 a whole-partition count allows
    np.testing.assert_array_equal(narrow_tiles(np.zeros(1, np.float32), fit), float(fit))
    with pytest.raises(CapacityError) as ei:
        narrow_tiles(np.zeros(1, np.float32), fit + 1)
    msg = str(ei.value)
    assert "7168 B on 13 partitions" in msg
    assert "tiles of 32 or fewer partitions may share a byte range in different quadrants" in msg
    # the emptiest quadrant is the accumulator's: 2 KiB + (fit // 4 + 1) weight tiles
    assert f"{2 * KiB + (SBUF_CAP - 2 * KiB) // (7 * KiB) * 7 * KiB + 7 * KiB} bytes per partition would be live" in msg


@pytest.mark.parametrize("parts,per_range", [(40, 2), (64, 2), (65, 1), (128, 1)])
def test_wider_tiles_share_only_what_their_start_partitions_allow(parts, per_range):
    """33-64 partitions start at 0 or 64 (two per byte range); more than 64 start at 0 (one per byte range)."""
    from trnsim.machine.capacity import Occupancy

    def live_together(n):                          # n tiles touched by one instruction
        occ = Occupancy()
        for i in range(n):
            occ._touch_key((i, -1), _FakeBuf(i, parts, size), -1, None)
        occ._check_kind("sbuf", SBUF_CAP, 128)
    size = SBUF_CAP // 4
    live_together(4 * per_range)                   # exactly fills the memory
    with pytest.raises(CapacityError, match=f"{SBUF_CAP + size} bytes per partition would be live"):
        live_together(4 * per_range + 1)


class _FakeBuf:
    """The fields of a Buffer that Occupancy reads."""

    def __init__(self, i, parts, size):
        self.id, self.shape, self.block, self.bytes_pp, self.kind = i, (parts, size), 0, size, "sbuf"
        self.name, self.placement = f"t{i}", None

        class _D:
            itemsize = 1
        self.dtype = _D()