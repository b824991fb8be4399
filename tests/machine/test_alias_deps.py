"""The scheduler orders accesses through tiles placed on the same bytes (``nl.ndarray(..., address=...)``): read
after write, write after read and write after write across two tiles at one address, across tiles of other
geometries or dtypes that overlap in part (``deps.alias_groups``, ``deps.byte_operand``), a PSUM bank reused by a
new tile, and on several cores (each its own SBUF); tiles on other bytes (or other partitions) stay unordered; the
SBUF capacity gate keeps one entry per tile; kernels without aliased tiles schedule exactly as with dependencies
keyed on buffers alone."""

import itertools
import random
import warnings

import numpy as np
import pytest

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import sched_fast, schedule
from trnsim.machine.deps import alias_groups, byte_operand

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

X = np.zeros((128, 512), np.float32)


def _rows(kernel, *args, grid=(1,), target="trn2"):
    res = run_kernel(kernel, (X,) + args, {}, grid, target, execute=False)
    tl = schedule(res.cores)
    return res, tl, list(tl.rows())


def _waits(later, earlier):
    """``later`` is ordered after ``earlier``: listed among its dependencies and started after its result."""
    return earlier.id in later.deps and later.start >= earlier.done


def _placed_pair(first, second, geo_b, addr_b):
    """Tile ``a`` (128 x 512 float32 at (0, 0)) accessed by ``first`` ("w": a DMA load, "r": an Activation read),
    then tile ``b`` (``geo_b`` = (partitions, free, dtype) at ``addr_b``) by ``second`` ("w": a Vector memset, "r":
    a DMA store); the rows of interest are 0 (through a) and 1 (through b)."""
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
        p, f, dt = geo_b
        b = nl.ndarray((p, f), dt, buffer=nl.sbuf, address=addr_b)
        c = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        if first == "w":
            nisa.dma_copy(a, x)                              # 0: write through a
        else:
            nisa.activation(c, nl.exp, a)                    # 0: read through a
        if second == "w":
            nisa.memset(b, 1.0)                              # 1: write through b
        else:
            nisa.dma_copy(out[0:p, 0:f] if dt == nl.float32 else out[0:p, 0:1], b[:, 0:f] if dt == nl.float32
                          else b[:, 0:1])                    # 1: read through b
        if first == "r":
            nisa.dma_copy(out, c)
        return out
    return k


SAME = (128, 512, nl.float32)


@pytest.mark.parametrize("first,second", [("w", "r"), ("r", "w"), ("w", "w")])
def test_raw_war_waw_through_a_second_tile_at_the_same_address(first, second):
    _, _, r = _rows(_placed_pair(first, second, SAME, (0, 0)))
    assert _waits(r[1], r[0]), (r[0], r[1])


@pytest.mark.parametrize("first,second", [("w", "r"), ("r", "w"), ("w", "w")])
def test_tiles_at_other_bytes_are_not_ordered(first, second):
    _, _, r = _rows(_placed_pair(first, second, SAME, (0, 4 * 512)))      # right after a's 2 KiB per partition
    assert r[0].id not in r[1].deps and r[1].start < r[0].done


@pytest.mark.parametrize("first,second,geo_b,addr_b", [
    ("r", "w", (128, 256, nl.bfloat16), (0, 1024)),      # another dtype over a's bytes [1024, 1536)
    ("w", "w", (128, 64, nl.float32), (0, 2040)),        # overlapping a's last 8 bytes only
    ("r", "w", (32, 1024, nl.bfloat16), (96, 0)),        # a's last 32 partitions, reinterpreted as bf16
    ("w", "r", (128, 1024, nl.bfloat16), (0, 0)),        # the same bytes read as another dtype
])
def test_partial_overlaps_and_other_geometries_are_ordered(first, second, geo_b, addr_b):
    res, _, r = _rows(_placed_pair(first, second, geo_b, addr_b))
    assert _waits(r[1], r[0]), (r[0], r[1])


def test_other_partitions_at_the_same_bytes_are_not_ordered():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray((64, 1024), nl.bfloat16, buffer=nl.sbuf, address=(64, 0))   # partitions 64..127
        nisa.dma_copy(a, x[0:64, :])                    # 0
        nisa.memset(b, 1.0)                             # 1
        nisa.dma_copy(out[0:64, :], a)
        nisa.dma_copy(out[64:128, 0:1], b[:, 0:1])
        return out
    _, _, r = _rows(k)
    assert r[0].id not in r[1].deps and r[1].start < r[0].done


def test_psum_bank_reused_by_a_new_tile_waits_for_the_reads_of_the_last_one():
    bank = 2048

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(s, x[:, 0:128])                                                # 0
        p1 = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 2 * bank))
        nisa.nc_matmul(p1, s, s)                                                     # 1
        nisa.nc_matmul(p1, s, s)                                                     # 2: accumulates
        sb1 = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(sb1, p1)                                                    # 3: reads the sums
        p2 = nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 2 * bank))
        nisa.nc_matmul(p2, s, s)                                                     # 4: a new group there
        sb2 = nl.ndarray((128, 128), nl.float32, buffer=nl.sbuf)
        nisa.activation(sb2, nl.copy, p2)                                            # 5 (Scalar Engine)
        t = nl.ndarray((64, 128), nl.float32, buffer=nl.psum, address=(0, 2 * bank))  # another geometry there
        nisa.tensor_copy(t, sb1[0:64, :])                                            # 6
        nisa.dma_copy(out, sb2)
        nisa.dma_copy(out[0:64, :], t)
        return out
    _, _, r = _rows(k)
    assert [x.opcode for x in r[1:5]] == ["nc_matmul", "nc_matmul", "tensor_copy", "nc_matmul"], r[:7]
    assert _waits(r[3], r[2])            # the copy reads the accumulated sums (read after write)
    assert _waits(r[4], r[3])            # p2's matmul after p1's sums were read (write after read, via the alias)
    assert _waits(r[5], r[4])
    assert _waits(r[6], r[5])            # a tile of another geometry on the bank's bytes after p2's last read


def test_each_core_orders_its_own_tiles():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        a = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
        c = nl.ndarray((64, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(a, x[pid * 64:(pid + 1) * 64, :])     # 0
        nisa.activation(c, nl.exp, b)                      # 1: reads what a got, on this core
        nisa.dma_copy(out[pid * 64:(pid + 1) * 64, :], c)
        return out
    res = run_kernel(k, (X,), {}, (2,), "trn2", execute=False)
    assert len(res.cores) == 2
    for core in res.cores:
        tl = schedule([core])
        r = list(tl.rows())
        assert _waits(r[1], r[0])
        # the core's alias group holds its own two tiles only
        groups = sched_fast._dep_keys(core, *_enc_args(core))
        assert groups[0] is not None


def _enc_args(core):
    c = sched_fast._columns(core)
    ba = np.array(c["b"], np.int64)
    ub, op_b = np.unique(ba, return_inverse=True)
    views = c["v"]
    vmap = {}
    op_v = np.array([vmap.setdefault(v, len(vmap)) for v in views], np.int64)
    return ba, ub, op_b, c["lo"], c["hi"], views, op_v, vmap


def test_capacity_gate_keeps_one_entry_per_tile():
    # 4 tiles at one address, each live in turn: the SBUF counter of the timeline holds one of them at a time
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        for i in range(4):
            t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, 0))
            nisa.dma_copy(t, x)
            nisa.dma_copy(out, t)
        return out
    res, tl, r = _rows(k)
    assert len(r) == 8
    peak = max(v for _, v in tl.counters[(0, "sbuf_bytes")])
    assert peak == 512 * 4 * 128              # one tile's bytes on every partition, never two at once


# ------------------------------------------------------------------------------- the byte coordinates

def _elements(view):
    off, shape, strides = view
    for idx in itertools.product(*(range(s) for s in shape)):
        yield off + sum(i * st for i, st in zip(idx, strides))


def _bytes_of(elems, tile, group):
    p0, a0, pf, isz = tile
    pmin, amin, row = group
    out = set()
    for e in elems:
        q, r = divmod(e, pf)
        b = (p0 - pmin + q) * row + (a0 - amin) + r * isz
        out.update(range(b, b + isz))
    return out


def test_byte_operand_names_exactly_the_bytes_of_a_view_or_covers_its_extent():
    rnd = random.Random(29)
    exact = 0
    for _ in range(400):
        isz = rnd.choice((1, 2, 4))
        pf = rnd.choice((8, 12, 64))
        parts = rnd.randint(1, 8)
        tile = (rnd.randint(0, 4), rnd.choice((0, 16, 100)), pf, isz)
        group = (0, 0, pf * isz + 200)
        # a random view of the tile: partition rows (a step), a free slice, perhaps a second free dim
        p_lo = rnd.randrange(parts)
        p_n = rnd.randint(1, parts - p_lo)
        step = rnd.choice((1, 1, 2)) if p_n > 1 else 1
        p_n = min(p_n, (parts - p_lo + step - 1) // step)
        f_lo = rnd.randrange(pf)
        f_n = rnd.randint(1, pf - f_lo)
        if rnd.random() < 0.3 and f_n >= 2:
            view = (p_lo * pf + f_lo, (p_n, 2, f_n // 2), (step * pf, f_n // 2, 1))
        elif rnd.random() < 0.15:
            view = (p_lo * pf + f_lo, (p_n * f_n,), (1,))     # a flat run, crossing partitions perhaps
        else:
            view = (p_lo * pf + f_lo, (p_n, f_n), (step * pf, 1))
        els = list(_elements(view))
        lo, hi = min(els), max(els) + 1
        want = _bytes_of(els, tile, group)
        blo, bhi, bv = byte_operand(lo, hi, view, tile, group)
        got = set()
        for b in _elements(bv):
            got.add(b)
        assert want <= got, (view, tile)
        assert min(got) >= blo and max(got) < bhi
        if got == want:
            assert min(want) == blo and max(want) == bhi - 1
            exact += 1
    assert exact >= 300          # the row-structured views (most of them) are named exactly


def test_alias_groups_join_overlapping_placements_only():
    # (bid, kind, partition0, partitions, addr, bytes per partition, element bytes)
    placed = [(1, "sbuf", 0, 128, 0, 2048, 4), (2, "sbuf", 0, 128, 0, 2048, 4),      # one geometry, one address
              (3, "sbuf", 0, 64, 4096, 1024, 2), (4, "sbuf", 0, 64, 4608, 512, 4),   # overlap in part
              (5, "sbuf", 64, 64, 4096, 1024, 2),                                   # other partitions
              (6, "psum", 0, 128, 0, 2048, 4), (7, "sbuf", 0, 128, 8192, 64, 4)]    # alone
    g = alias_groups(placed)
    assert set(g) == {1, 2, 3, 4}
    assert g[1][0] == g[2][0] and not g[1][1]
    assert g[3][0] == g[4][0] and g[3][1] and g[3][0] != g[1][0]
    assert g[3][3] == (0, 4096, 1024)


# ------------------------------------------------------------------ kernels without aliased placements

def _fuzz_core(seed, target):
    from trnsim.isa.fuzz import Fuzzer
    from trnsim.machine import NeuronCore
    core = NeuronCore(target, execute=False)
    fz = Fuzzer(random.Random(seed), lambda: core, calls_per_core=10 ** 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fz.run(800)
    return core


def _sched_fast_tests():
    import os
    from suite_files import load_file
    return load_file("_tsf", os.path.join(os.path.dirname(__file__), "test_sched_fast.py"))


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_timelines_without_aliases_are_those_of_buffer_keyed_dependencies(target, monkeypatch):
    tsf = _sched_fast_tests()
    runs = [[_fuzz_core(s, target)] for s in (0, 1)]
    for name, (fn, args, grid, *kw) in list(tsf.CASES.items())[:6]:
        runs.append(run_kernel(fn, args, kw[0] if kw else {}, grid, target, execute=False).cores)

    @nki.jit
    def placed_apart(x):            # placed tiles on bytes of their own: no group, as before
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        for i in range(3):
            t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf, address=(0, i * 2048))
            nisa.dma_copy(t, x)
            nisa.dma_copy(out, t)
        return out
    runs.append(run_kernel(placed_apart, (X,), {}, (1,), target, execute=False).cores)
    for cores in runs:
        for core in cores:
            assert sched_fast._dep_keys(core, *_enc_args(core))[0] is None
        now = schedule(cores)
        monkeypatch.setattr(sched_fast, "_dep_keys", lambda *a: (None, None, None, None))
        before = schedule(cores)
        monkeypatch.undo()
        tsf.assert_same(before, now)


def test_aliased_tiles_only_add_dependencies():
    # the same kernel keyed on buffers: the alias key adds the write-after-read wait and moves nothing earlier
    k = _placed_pair("r", "w", SAME, (0, 0))
    res = run_kernel(k, (X,), {}, (1,), "trn2", execute=False)
    now = list(schedule(res.cores).rows())
    orig = sched_fast._dep_keys
    try:
        sched_fast._dep_keys = lambda *a: (None, None, None, None)
        before = list(schedule(res.cores).rows())
    finally:
        sched_fast._dep_keys = orig
    assert now[0].id in now[1].deps and now[0].id not in before[1].deps
    assert all(a.start >= b.start for a, b in zip(now, before))
