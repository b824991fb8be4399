"""``nl.ndarray(..., address=(partition, byte))``: a tile placed at an explicit SBUF/PSUM address holds those bytes,
shared with every tile placed there (trnsim/memory/space.py): aliasing reads and writes, a new PSUM accumulation
group per tile, refusals naming the limit and the kernel's line, one storage for thousands of placed tiles, the
capacity model's live ranges per tile at the placement; and the scheduler ordering accesses through two tiles at one
address (more in tests/machine/test_alias_deps.py)."""

import numpy as np
import pytest

import trnsim
from trnsim.isa import NkiValidationError
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule
from trnsim.targets import TRN2

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

RNG = np.random.default_rng(31)
BANK = TRN2.psum_bank_bytes        # 2 KiB per partition (docs/hardware.md)


@nki.jit
def _alias(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((64, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    other = nl.ndarray((64, x.shape[1]), x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, 4096))
    b = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, 4096))        # the same bytes
    half = nl.ndarray((64, x.shape[1]), x.dtype, buffer=nl.sbuf, address=(0, 4096))   # its first 64 partitions
    elsewhere = nl.ndarray((64, x.shape[1]), x.dtype, buffer=nl.sbuf, address=(0, 8192))
    nisa.dma_copy(a, x)                 # written through a
    nisa.dma_copy(out, b)               # read through b
    nisa.dma_copy(out2, half)
    nisa.memset(elsewhere, 7.0)
    nisa.dma_copy(other, elsewhere)
    return out, out2, other


def test_two_tiles_at_one_address_alias():
    x = RNG.standard_normal((128, 256)).astype(np.float32)
    out, out2, other = nki.simulate(_alias)(x)
    assert np.array_equal(out, x)                 # what a wrote, b reads
    assert np.array_equal(out2, x[:64])           # a tile of fewer partitions reads the first ones
    assert np.all(other == 7.0)                   # another address is other memory (not x)


@nki.jit
def _psum_groups(s, m):
    out1 = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
    st = nl.ndarray(s.shape, s.dtype, buffer=nl.sbuf)
    mv = nl.ndarray(m.shape, m.dtype, buffer=nl.sbuf)
    nisa.dma_copy(st, s)
    nisa.dma_copy(mv, m)
    # two tiles of one PSUM bank, made up front (as nki-library's kernels make their lists of tiles)
    p1 = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 3 * BANK))
    p2 = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 3 * BANK))
    nisa.nc_matmul(p1, st, mv)
    nisa.nc_matmul(p1, st, mv)            # accumulates into p1: 2 * s.T @ m
    sb1 = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(sb1, p1)
    nisa.nc_matmul(p2, st, mv)            # p2's first matmul: a new accumulation group, s.T @ m
    sb2 = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
    p3 = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 3 * BANK))
    nisa.tensor_copy(sb2, p3)             # a third tile there reads what p2 wrote (the same bytes)
    nisa.dma_copy(out1, sb1)
    nisa.dma_copy(out2, sb2)
    return out1, out2


def test_a_new_tile_at_a_used_psum_address_starts_its_own_accumulation_group():
    s = RNG.standard_normal((128, 128)).astype(np.float32)
    m = RNG.standard_normal((128, 128)).astype(np.float32)
    out1, out2 = nki.simulate(_psum_groups)(s, m)
    ref = s.astype(np.float64).T @ m.astype(np.float64)
    tol = 1e-4 * np.abs(ref).max()
    assert np.abs(out1 - 2 * ref).max() <= tol
    assert np.abs(out2 - ref).max() <= tol            # not 3 * ref: p2 did not add to p1's sums
    assert np.abs(out2 - 3 * ref).max() > 100 * tol


def _place(buffer, shape, address):
    @nki.jit
    def k(x):
        t = nl.ndarray(shape, nl.float32, buffer=buffer, address=address)
        nisa.memset(t, 0.0)
        return x
    return k


@pytest.mark.parametrize("buffer,shape,address,limit", [
    ("sbuf", (128, 64), (0, TRN2.sbuf_partition_bytes - 128), str(TRN2.sbuf_partition_bytes)),   # 256 B from there
    ("psum", (128, 512), (0, TRN2.psum_partition_bytes - BANK + 4), str(TRN2.psum_partition_bytes)),
    ("sbuf", (16, 64), (120, 0), "128 partitions"),
    ("sbuf", (128, 64), (0, -8), "bytes [0,"),
])
def test_out_of_range_address_is_refused_with_the_limit_and_the_line(buffer, shape, address, limit):
    x = np.zeros((1, 1), np.float32)
    with pytest.raises(NkiValidationError, match="ndarray") as e:
        nki.simulate(_place(getattr(nl, buffer), shape, address))(x)
    msg = str(e.value)
    assert limit in msg and buffer.upper() in msg
    assert "test_ndarray_address.py" in msg


def test_address_on_hbm_and_malformed_addresses_are_refused():
    x = np.zeros((1, 1), np.float32)
    with pytest.raises(NkiValidationError, match="HBM"):
        nki.simulate(_place(nl.shared_hbm, (4, 4), (0, 0)))(x)
    with pytest.raises(NkiValidationError, match="two integers"):
        nki.simulate(_place(nl.sbuf, (4, 4), (0, 1.5)))(x)
    nki.simulate(_place(nl.sbuf, (128, 64), (0, TRN2.sbuf_partition_bytes - 256)))(x)   # the last bytes: fine


N_TILES = 10_000


def _root(a):
    while a.base is not None:
        a = a.base
    return a


@nki.jit
def _many(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in range(N_TILES):          # held in a list, at 4 addresses (nki-library's ModularAllocator)
        tiles.append(nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, (i % 4) * 8192)))
    nisa.dma_copy(tiles[N_TILES - 1], x)
    nisa.dma_copy(out, tiles[3])       # the same address as tile N_TILES - 1
    roots = {id(r): r.nbytes for r in (_root(t.buf._data) for t in tiles)}
    _many.held = sum(roots.values())   # the bytes of host memory behind the tiles
    _many.storages = {t.buf.storage.id for t in tiles}
    return out


def test_ten_thousand_placed_tiles_hold_four_tiles_of_memory():
    x = RNG.standard_normal((128, 512)).astype(np.float32)       # 2 KiB per partition, 256 KiB a tile
    out = nki.simulate(_many)(x)
    assert np.array_equal(out, x)
    assert len(_many.storages) == 4
    assert _many.held == 4 * x.nbytes              # fresh storage per tile would hold 10,000 of them


@nki.jit
def _write_then_read(x, same):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, 0))
    b = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, 0 if same else 65536))
    c = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(a, x)                                  # 0: write through a
    nisa.activation(c, nl.exp, b)                        # 1: read through b
    nisa.dma_copy(out, c)
    return out


@pytest.mark.parametrize("same", [True, False])
def test_scheduler_orders_a_read_through_another_tile_at_the_same_address(same):
    x = np.zeros((128, 512), np.float32)
    tl = schedule(run_kernel(_write_then_read, (x, same), {}, (1,), "trn2", execute=False).cores)
    r = list(tl.rows())
    write, read = r[0], r[1]
    assert read.engine == "activation" or read.engine == "scalar", read.engine
    if same:
        assert read.start >= write.done and 0 in read.deps
    else:
        assert read.start < write.done and 0 not in read.deps


KIB = 1024


def _two_addresses(rewrite_first):
    @nki.jit
    def k(x):
        # 8 tiles of 96 KiB per partition at 2 addresses: 768 KiB of tiles on 192 KiB of SBUF bytes (the target's
        # SBUF holds 2 such tiles per partition, not 3: asserted by the test)
        f = 96 * KIB // 4
        out = nl.ndarray((128, f), nl.float32, buffer=nl.shared_hbm)
        tiles = [nl.ndarray((128, f), nl.float32, buffer=nl.sbuf, address=(0, (i % 2) * 96 * KIB))
                 for i in range(8)]
        for i in range(0, 8, 2):
            nisa.dma_copy(tiles[i], x[:, 0:f])
            nisa.dma_copy(tiles[i + 1], x[:, f:2 * f])
            nisa.tensor_tensor(tiles[i], tiles[i], tiles[i + 1], op=nl.add)
        if rewrite_first:
            # tiles[0] is written again after tiles[2] took its bytes: on hardware tiles[2] overwrote it
            nisa.tensor_tensor(tiles[0], tiles[0], tiles[7], op=nl.add)
        nisa.dma_copy(out, tiles[0] if rewrite_first else tiles[6])
        return out
    return k


def test_capacity_counts_placed_tiles_at_their_bytes_and_refuses_two_live_on_the_same_bytes():
    from trnsim.machine.capacity import CapacityError
    assert 2 * 96 * KIB <= TRN2.sbuf_partition_bytes < 3 * 96 * KIB
    f = 96 * KIB // 4
    x = RNG.standard_normal((128, 2 * f)).astype(np.float32)
    res = run_kernel(_two_addresses(False), (x,), {}, (1,), "trn2")
    got = res.outputs if not isinstance(res.outputs, (list, tuple)) else res.outputs[0]
    ref = x[:, :f].astype(np.float64) + x[:, f:]
    assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max()
    assert res.cores[0].occupancy.report["program"]["sbuf"] == 2 * 96 * KIB
    with pytest.raises(CapacityError, match="placed on the same bytes") as e:
        run_kernel(_two_addresses(True), (x,), {}, (1,), "trn2")
    assert "test_ndarray_address.py" in str(e.value)


def test_strict_mode_reads_sbuf_bytes_written_through_another_tile():
    x = RNG.standard_normal((128, 256)).astype(np.float32)
    res = run_kernel(_alias, (x,), {}, (1,), "trn2", strict=True)
    assert np.array_equal(res.outputs[0], x)          # b read what a wrote: no "never written" refusal

    @nki.jit
    def unwritten(x):
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        a = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf, address=(0, 0))
        nisa.activation(a, nl.exp, b)                 # nothing wrote these bytes
        nisa.dma_copy(out, a)
        return out
    with pytest.raises(NkiValidationError, match="never written"):
        run_kernel(unwritten, (x,), {}, (1,), "trn2", strict=True)


def test_sendrecv_between_tiles_placed_at_one_address_on_two_cores():
    # each program's `mine` is at (0, 0) of its own core's SBUF: the receiver reads the peer's, which is not on
    # the receiver's bytes (the capacity check of one core counts and compares its own tiles only)
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        mine = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, address=(0, 0))
        got = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf, address=(0, 4096))
        nisa.dma_copy(dst=mine, src=a[pid * 64:(pid + 1) * 64, :])
        nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nisa.tensor_tensor(dst=got, data1=got, data2=mine, op=nl.add)     # ours, live across the exchange
        nisa.dma_copy(dst=out[pid * 64:(pid + 1) * 64, :], src=got)
        return out
    a = RNG.standard_normal((128, 256)).astype(np.float32)
    got = k[2](a)
    ref = a.astype(np.float64) + np.concatenate([a[64:], a[:64]])
    assert np.abs(got - ref).max() <= 1e-6 * np.abs(ref).max()
