"""SBUF/PSUM capacity from each tile's live range (first to last access), in program order and, when that
overflows, in the order the compiler's scheduler may choose (each tile's last reader moved up to right after what it
depends on, not across fences); block tensors; explicit placements checked for overlap."""

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
    """Nine 2 KiB-per-partition PSUM tiles (a bank each; PSUM holds eight).  Each is set from ``acc`` (acc * 0 + 1)
    rather than by a memset: a memset depends on nothing, so the compiler may schedule it right before its tile's
    first read (the capacity check's sunk order), while a read of ``acc`` must come before the sums that write it."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(acc, 0.0)
    ps = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name=f"ps{i}") for i in range(9)]
    for p in ps:
        nisa.tensor_scalar(p, acc, nl.multiply, 0.0, op1=nl.add, operand1=1.0)   # <ps-set>
        if not live_together:
            nisa.tensor_tensor(acc, acc, p, op=nl.add)
    if live_together:               # read in reverse: the first read waits for the last tile, so all are live
        for p in reversed(ps):
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
    """``n`` tiles of 13 partitions x 7 KiB, summed into one tile in the reverse order of their making: the first
    sum waits for the last tile, so every one is live then, in any order the dependencies allow (each is set from
    ``acc``, which the sums then write: a memset, depending on nothing, could wait for its tile's first read)."""
    out = nl.ndarray((13, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((13, 512), dtype=nl.float32, buffer=nl.sbuf, name="acc")
    nisa.memset(acc, 0.0)
    ws = [nl.ndarray((13, 7 * KiB // 2), dtype=nl.bfloat16, buffer=nl.sbuf, name=f"w{i}") for i in range(n)]
    for w in ws:
        nisa.tensor_scalar(w[:, 0:512], acc, nl.multiply, 0.0, op1=nl.add, operand1=1.0)
    for w in reversed(ws):
        nisa.tensor_tensor(acc, acc, w[:, 0:512], op=nl.add)
    nisa.dma_copy(out, acc)
    return out


def test_narrow_tiles_share_byte_ranges_in_different_quadrants():
    """Tiles of 13 partitions may start at partition 0, 32, 64 or 96 (docs/hardware.md "Memory rules"), so four of
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
    from trnsim.machine.capacity import Occupancy, _sweep

    def live_together(n):                          # n tiles touched by one instruction: (peak, first overflow)
        occ = Occupancy()
        for i in range(n):
            occ._touch_key((i, -1), _FakeBuf(i, parts, size), -1, None)
        return _sweep(occ.tiles, occ.ranges, "sbuf", SBUF_CAP, occ.parts, 128)
    size = SBUF_CAP // 4
    assert live_together(4 * per_range) == (SBUF_CAP, None)          # exactly fills the memory
    peak, fail = live_together(4 * per_range + 1)
    assert peak == SBUF_CAP + size and fail is not None and fail[2] == SBUF_CAP + size


class _FakeBuf:
    """The fields of a Buffer that Occupancy reads."""

    def __init__(self, i, parts, size):
        self.id, self.shape, self.block, self.bytes_pp, self.kind = i, (parts, size), 0, size, "sbuf"
        self.name, self.placement = f"t{i}", None

        class _D:
            itemsize = 1
        self.dtype = _D()


# -- program order overflows, the compiler's schedule need not (capacity.py: the reordered check) ----------------
N_ACC = 12          # 12 PSUM accumulators of 2 KiB per partition: 24 KiB, PSUM holds 16 KiB (moe_cte's pattern)


def _moe_inputs():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 2, 128)).astype(np.float32)
    x = rng.standard_normal((128, 2, 512)).astype(np.float32)
    ref = np.einsum("kjm,kjn->mn", w.astype(np.float64), x.astype(np.float64))      # sum over both k tiles
    return w, x, ref


def psum_fill_then_copy(w, x, mode):
    """``N_ACC`` PSUM accumulators, each filled by two matmuls in a first loop and copied out in a second (the gate/up
    projection of moe_cte's SHARD_ON_INTERMEDIATE kernel).  Accumulator i gets ``(i + 1) * (w^T x)``.  ``mode``:
    "copy": each copied to its own SBUF tile and stored (the compiler can copy each out right after its last
    matmul); "reverse_sum": summed into one tile in reverse order (the sum of the last-made one comes first, so all
    must be live together); "dynamic_range" / "register": the copy loop is a runtime loop, which the compiler
    cannot move instructions into or out of; "placed": the copies write explicitly placed SBUF tiles."""
    out = nl.ndarray((128, N_ACC * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ws = nl.ndarray((128, 2, 128), dtype=nl.float32, buffer=nl.sbuf, name="ws")
    xs = nl.ndarray((128, 2, 512), dtype=nl.float32, buffer=nl.sbuf, name="xs")
    nisa.dma_copy(ws, w)
    nisa.dma_copy(xs, x)
    ps = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, name=f"acc{i}") for i in range(N_ACC)]
    for i, p in enumerate(ps):
        for _ in range(i + 1):
            for k in range(2):
                nisa.nc_matmul(p, ws[:, k, :], xs[:, k, :])                      # <fill>
    if mode == "reverse_sum":
        tot = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf, name="tot")
        nisa.memset(tot, 0.0)
        for i in reversed(range(N_ACC)):
            nisa.tensor_tensor(tot, tot, ps[i], op=nl.add)                       # <sum>
        nisa.dma_copy(out[:, 0:512], tot)
        return out
    if mode == "dynamic_range":
        idx = nl.dynamic_range(N_ACC)                                            # <fence-dyn>
    elif mode == "register":
        idx = range(nisa.register_alloc(N_ACC))                                  # <fence-reg>
    else:
        idx = range(N_ACC)
    for i in idx:
        if mode == "placed":
            r = _tile((128, 512), name=f"res{i}", address=(0, 4096 + 2048 * i))
        else:
            r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf, name=f"res{i}")
        nisa.tensor_copy(r, ps[i])                                               # <copy>
        nisa.dma_copy(out[:, i * 512:(i + 1) * 512], r)
    return out


def _run(fn, *args, record=True):
    """Run ``fn`` on one core (``record=False``: a core that keeps no instruction record, as the device bridge's
    cached calls); returns (outputs, core)."""
    from trnsim.kernels import launch
    from trnsim.kernels.jit import _to_input
    from trnsim.machine import Chip, NeuronCore
    tg = get_target("trn2")
    core = NeuronCore(tg, chip=Chip(tg), record=record)
    wrapped = [_to_input(core, a, f"a{i}")[0] if isinstance(a, np.ndarray) else a for i, a in enumerate(args)]
    ctx = context.KernelContext([core], (1,))
    prev = context.push(ctx)
    try:
        out = launch.run_programs(fn, wrapped, {}, ctx, [core], None)
    finally:
        context.pop(prev)
    return np.asarray(out.np, dtype=np.float64) if out is not None else None, core


@pytest.mark.parametrize("record", [True, False])
def test_accumulators_copied_out_in_a_later_loop_fit_as_the_compiler_schedules(record):
    w, x, ref = _moe_inputs()
    out, core = _run(psum_fill_then_copy, w, x, "copy", record=record)
    for i in range(N_ACC):
        np.testing.assert_allclose(out[:, i * 512:(i + 1) * 512], (i + 1) * ref, rtol=1e-5, atol=1e-3)
    rep = core.occupancy.report
    # program order overflows PSUM (all 12 live: 24 KiB); the reordered schedule has at most two accumulators live
    # (one being filled, and the one before it until its copy)
    assert rep["program"]["psum"] == N_ACC * 2048
    assert rep["reordered"]["psum"] <= 2 * 2048 and rep["moved"] >= N_ACC


def test_accumulators_that_must_be_live_together_are_still_refused():
    w, x, _ = _moe_inputs()
    fn = psum_fill_then_copy
    with pytest.raises(CapacityError) as ei:
        _run(fn, w, x, "reverse_sum")
    e = ei.value
    msg = str(e)
    assert e.location[1] == _line(fn, "fill") and e.limit == PSUM_CAP
    assert "PSUM allocation of 2048 bytes per partition for tensor `acc8` does not fit" in msg
    assert f"{9 * 2048} bytes per partition would be live" in msg
    for i in range(9):
        assert (f"`acc{i}` 2048 B on 128 partitions (test_capacity.py:{_line(fn, 'fill')} .. "
                f"test_capacity.py:{_line(fn, 'sum')})") in msg
    assert f"9 tiles, {9 * 2048} bytes per partition, are live" in msg and "`acc9`" not in msg
    assert "moved up" in msg                    # says that trnsim tried the compiler's freedom to reorder


@pytest.mark.parametrize("mode", ["dynamic_range", "register"])
def test_a_runtime_loop_between_fill_and_copy_is_a_fence(mode):
    w, x, _ = _moe_inputs()
    fn = psum_fill_then_copy
    with pytest.raises(CapacityError) as ei:
        _run(fn, w, x, mode)
    msg = str(ei.value)
    assert "PSUM allocation of 2048 bytes per partition for tensor `acc8` does not fit" in msg
    fence = _line(fn, "fence-dyn" if mode == "dynamic_range" else "fence-reg")
    assert f"test_capacity.py:{fence}" in msg and "runtime" in msg


def test_instructions_on_explicitly_placed_tiles_are_not_moved():
    w, x, _ = _moe_inputs()
    with pytest.raises(CapacityError, match=r"PSUM allocation of 2048 bytes per partition for tensor `acc8`"):
        _run(psum_fill_then_copy, w, x, "placed")


def test_refusal_is_the_same_without_an_instruction_record():
    w, x, _ = _moe_inputs()
    msgs = []
    for record in (True, False):
        with pytest.raises(CapacityError) as ei:
            _run(psum_fill_then_copy, w, x, "reverse_sum", record=record)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1]


N_SB = 8            # 8 SBUF tiles of 32 KiB per partition: 256 KiB, SBUF holds 224 KiB (trn2)
P_SB = 65           # partitions of each: more than 64, so no two share a byte range (capacity.py, _Quadrants)


def sbuf_fill_then_store(mode):
    """``N_SB`` SBUF tiles (``P_SB`` partitions x 32 KiB per partition) set in a first loop and stored in a second;
    "barrier": a core_barrier between the loops (nothing moves across it)."""
    out = nl.ndarray((P_SB, N_SB * 8 * KiB), dtype=nl.float32, buffer=nl.shared_hbm)
    ts = [nl.ndarray((P_SB, 8 * KiB), dtype=nl.float32, buffer=nl.sbuf, name=f"sb{i}") for i in range(N_SB)]
    for i, t in enumerate(ts):
        nisa.memset(t, float(i))                                                 # <sb-set>
    if mode == "barrier":
        nisa.core_barrier(None, (0,))                                            # <barrier>
    for i, t in enumerate(ts):
        nisa.dma_copy(out[:, i * 8 * KiB:(i + 1) * 8 * KiB], t)
    return out


def test_sbuf_tiles_stored_in_a_later_loop_fit_unless_a_barrier_separates_the_loops():
    out, core = _run(sbuf_fill_then_store, "plain")
    np.testing.assert_array_equal(out.reshape(P_SB, N_SB, 8 * KiB), np.broadcast_to(
        np.arange(N_SB, dtype=np.float64)[None, :, None], (P_SB, N_SB, 8 * KiB)))
    assert core.occupancy.report["program"]["sbuf"] == N_SB * 32 * KiB
    assert core.occupancy.report["reordered"]["sbuf"] == 32 * KiB      # each tile stored right after its memset
    with pytest.raises(CapacityError) as ei:
        _run(sbuf_fill_then_store, "barrier")
    msg = str(ei.value)
    assert ei.value.location[1] == _line(sbuf_fill_then_store, "sb-set") and ei.value.limit == SBUF_CAP
    assert f"{N_SB * 32 * KiB} bytes per partition would be live" in msg
    assert f"test_capacity.py:{_line(sbuf_fill_then_store, 'barrier')}" in msg


def test_the_reordered_sequence_keeps_every_dependency_and_fence():
    """Random instruction sequences over a few buffers (1-D views; overlapping extents conflict): in the order
    ``reorder.reordered_positions`` makes, every read comes after the writes it may read, every write after the
    accesses it may overwrite, nothing crosses a fence, and instructions on a placed tile keep their order."""
    from trnsim.machine.reorder import reordered_positions
    rng = np.random.default_rng(1)
    tiles = {(b, -1): ("sbuf", 64, f"t{b}", None) for b in range(4)}
    tiles[(4, -1)] = ("sbuf", 64, "placed", (0, 1, 0, 64))           # buffer 5: HBM (not a tile)
    total_moved = 0
    for _ in range(200):
        n = int(rng.integers(5, 40))
        ops = []
        for i in range(n):
            def op():
                b = int(rng.integers(0, 6))
                lo = int(rng.integers(0, 12))
                hi = lo + int(rng.integers(1, 6))
                return (b, lo, hi, (lo, (hi - lo,), (1,)))
            ops.append((tuple(op() for _ in range(int(rng.integers(0, 2)) + (i % 2))),
                        tuple(op() for _ in range(int(rng.integers(0, 3)))), ("k.py", i)))
        fences = [(f, ("k.py", f), "test") for f in sorted(set(int(x) for x in rng.integers(0, n, 2)))
                  if rng.random() < .5]
        for every in (False, True):
            pos, tkeys, moved, blocked = reordered_positions(ops, tiles, {}, fences, every)
            total_moved += moved
            assert sorted(pos) == list(range(n))
            for j in range(n):
                wj, rj, _ = ops[j]
                for i in range(j):
                    wi, ri, _ = ops[i]
                    conflict = any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for a, b in
                                   [(x, y) for x in wi for y in rj + wj] + [(x, y) for x in ri for y in wj])
                    if conflict:
                        assert pos[i] < pos[j], (i, j, ops)
            for f, _, _ in fences:
                assert max((pos[i] for i in range(f)), default=-1) < min((pos[j] for j in range(f, n)), default=n)
            placed = [i for i in range(n) if any(op[0] == 4 for op in ops[i][0] + ops[i][1])]
            assert [pos[i] for i in placed] == sorted(pos[i] for i in placed)
    assert total_moved > 50                 # the sequences do get reordered

    def o(b, lo, hi):
        return (b, lo, hi, (lo, (hi - lo,), (1,)))
    # a read of two regions written by two instructions, the later of which moved above the earlier: it must come
    # after both (the latest dependency in the new order, not the latest conflicting access in program order)
    ops = [((o(0, 0, 4),), (), ("k.py", 0)),                   # t0 written
           ((o(1, 0, 4),), (), ("k.py", 1)),                   # t1 written
           ((o(5, 0, 5),), (), ("k.py", 2)),                   # HBM [0, 5)
           ((o(5, 5, 10),), (o(0, 0, 4),), ("k.py", 3)),       # t0's only read: moves up to after 0, above 1 and 2
           ((), (o(5, 0, 10), o(1, 0, 4)), ("k.py", 4))]       # t1's only read: must stay after 2 and 3
    pos = reordered_positions(ops, tiles, {}, [])[0]
    assert pos[3] < pos[1] and pos[4] > pos[2] and pos[4] > pos[3]
    # a write after reads of its region: a read that moved up does not stand for the reads before it (a covering
    # write would: whatever conflicts with the region conflicts with that write)
    ops = [((o(0, 0, 4),), (), ("k.py", 0)),                   # t0 written
           ((o(1, 0, 4),), (), ("k.py", 1)),                   # t1 written
           ((o(5, 0, 5),), (), ("k.py", 2)),                   # HBM [0, 5) written
           ((), (o(5, 0, 5),), ("k.py", 3)),                   # read, kept
           ((), (o(0, 0, 4), o(5, 0, 5)), ("k.py", 4)),        # t0's only read: moves up to after 2, above 3
           ((o(5, 0, 5),), (o(1, 0, 4),), ("k.py", 5))]        # t1's only read, overwrites what 3 and 4 read
    pos = reordered_positions(ops, tiles, {}, [])[0]
    assert pos[4] < pos[3] < pos[5]


def sbuf_read_twice(fenced):
    """``N_SB`` SBUF tiles set in a first loop and each read twice in a second (copied to a small tile and stored):
    no read is a tile's only one, so the first reordering keeps them; the second moves every read up."""
    out = nl.ndarray((P_SB, N_SB * 8 * KiB), dtype=nl.float32, buffer=nl.shared_hbm)
    ts = [nl.ndarray((P_SB, 8 * KiB), dtype=nl.float32, buffer=nl.sbuf, name=f"sb{i}") for i in range(N_SB)]
    for i, t in enumerate(ts):
        nisa.memset(t, float(i))
    if fenced:
        nisa.core_barrier(None, (0,))
    for i, t in enumerate(ts):
        c = nl.ndarray((P_SB, 512), dtype=nl.float32, buffer=nl.sbuf, name=f"c{i}")
        nisa.tensor_copy(c, t[:, 0:512])
        nisa.dma_copy(out[:, i * 8 * KiB:i * 8 * KiB + 512], c)
        nisa.dma_copy(out[:, i * 8 * KiB + 512:(i + 1) * 8 * KiB], t[:, 512:])
    return out


def test_tiles_read_several_times_in_a_later_loop_fit_with_every_read_moved():
    out, core = _run(sbuf_read_twice, False)
    np.testing.assert_array_equal(out.reshape(P_SB, N_SB, 8 * KiB), np.broadcast_to(
        np.arange(N_SB, dtype=np.float64)[None, :, None], (P_SB, N_SB, 8 * KiB)))
    rep = core.occupancy.report
    assert rep["program"]["sbuf"] > SBUF_CAP and rep["every_read"] and rep["reordered"]["sbuf"] <= SBUF_CAP
    with pytest.raises(CapacityError, match="core_barrier at test_capacity.py"):
        _run(sbuf_read_twice, True)


def sbuf_fori(bound_is_register):
    """``sbuf_fill_then_store`` with the store loop as ``nl.fori_loop``: with a register bound it is a runtime loop
    (a fence at each iteration), with an int bound an ordinary one."""
    out = nl.ndarray((P_SB, N_SB * 8 * KiB), dtype=nl.float32, buffer=nl.shared_hbm)
    ts = [nl.ndarray((P_SB, 8 * KiB), dtype=nl.float32, buffer=nl.sbuf, name=f"sb{i}") for i in range(N_SB)]
    for i, t in enumerate(ts):
        nisa.memset(t, float(i))

    def store(i):
        nisa.dma_copy(out[:, i * 8 * KiB:(i + 1) * 8 * KiB], ts[i])
    nl.fori_loop(0, nisa.register_alloc(N_SB) if bound_is_register else N_SB, store)       # <fori>
    return out


def test_fori_loop_with_a_register_bound_is_a_runtime_loop():
    out, _ = _run(sbuf_fori, False)
    assert out[0, -1] == N_SB - 1
    with pytest.raises(CapacityError, match=rf"runtime loop.* at test_capacity.py:{_line(sbuf_fori, 'fori')}"):
        _run(sbuf_fori, True)
