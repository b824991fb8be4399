"""The capacity tables' tile entries (``capacity.Occupancy.tiles``): an unnamed tile placed automatically shares one
entry per memory and size, named "" and shown as ``tile#<buffer id>``; named, placed and block tiles keep entries of
their own.  The refusals name every tile as before (the name in the entry, else ``tile#<buffer id>``), whichever
issue path (instruction by instruction, the issue cache, its site functions) made the entries."""

import re

import numpy as np
import pytest

import trnsim.kernels.nki as nki
import trnsim.kernels.nki.isa as nisa
import trnsim.kernels.nki.language as nl
from trnsim.kernels import context, issue_cache
from trnsim.kernels.jit import run_kernel
from trnsim.kernels.tensor import NkiTensor
from trnsim.machine.capacity import CapacityError
from trnsim.memory import dtype_of


def _tile(shape, name="", **kw):
    buf = context.current().core.allocate(tuple(shape), dtype_of("float32"), "sbuf", name, **kw)
    return NkiTensor.whole(buf, name)


def mixed(x, n):
    """Unnamed tiles of two sizes in a loop, a named tile, a placed tile and an unnamed block tensor."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    named = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, name="named")
    nisa.memset(named, 1.0)
    pl = _tile((128, 64), name="", address=(0, 0))
    nisa.memset(pl, 2.0)
    blk = _tile((128, 2, 64), block=64, block_shape=(2,))
    nisa.memset(blk[:, 0, :], 0.0)
    nisa.memset(blk[:, 1, :], 0.0)
    for i in range(n):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(a, x)
        nisa.tensor_scalar(b, a[:, 0:32], nl.multiply, 2.0)
        nisa.tensor_tensor(a[:, 0:32], a[:, 0:32], b, op=nl.add)
        nisa.dma_copy(out, a)
    nisa.tensor_tensor(named, named, pl, op=nl.add)
    nisa.dma_copy(out, named)
    return out


def _run(fn, args, kw, cache):
    prev = issue_cache.set_enabled(cache)
    try:
        return run_kernel(fn, args, kw, (1,), "trn2", execute=False)
    finally:
        issue_cache.set_enabled(prev)


@pytest.mark.parametrize("cache", [False, True])
def test_unnamed_tiles_share_one_entry_per_memory_and_size(cache):
    res = _run(mixed, (np.zeros((128, 64), np.float32),), {"n": 80}, cache)   # (past KEY_AFTER: site functions)
    occ = res.cores[0].occupancy
    plain = {}
    for key, e in occ.tiles.items():
        kind, size, name, place = e
        if name == "" and place is None and key[1] < 0:
            plain.setdefault((kind, size), set()).add(id(e))
    assert sorted(plain) == [("sbuf", 128), ("sbuf", 256)]
    assert all(len(ids) == 1 for ids in plain.values())            # one entry object per memory and size
    assert sum(1 for e in occ.tiles.values() if e[2] == "" and e[3] is None) == 2 * 80 + 2   # + the two blocks
    names = sorted(e[2] for e in occ.tiles.values() if e[2])
    assert names == ["named", f"tile#{next(k[0] for k, e in occ.tiles.items() if e[3] is not None)}"]


def test_tables_equal_on_every_issue_path():
    x = np.zeros((128, 64), np.float32)
    tables = []
    for cache in (False, True):
        occ = _run(mixed, (x,), {"n": 80}, cache).cores[0].occupancy
        ids = {}                                # buffer ids renumbered in order met (each run counts on)
        norm = lambda k: (ids.setdefault(k[0], len(ids)), k[1])     # noqa: E731
        tables.append(([(norm(k), v[:2]) for k, v in occ.ranges.items()],
                       [(norm(k), v) for k, v in occ.tiles.items() if v[3] is None],
                       [(norm(k), v) for k, v in occ.parts.items()]))
    assert tables[0] == tables[1]


def overflow(x, n, named):
    """``n`` 48 KiB tiles set from ``acc`` and added to it in reverse (the first add waits for the last tile, so
    all are live together, in any order the compiler may choose: psum_tiles in test_capacity.py): with ``acc``,
    SBUF overflows at the fourth.  The tiles are named ``t<i>`` or not at all."""
    F = 12 * 1024
    out = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf, name="acc")
    nisa.memset(acc, 0.0)
    ts = []
    for i in range(n):
        t = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf, name=f"t{i}" if named else "")
        nisa.tensor_scalar(t, acc, nl.multiply, 0.0, op1=nl.add, operand1=float(i))
        ts.append(t)
    for t in reversed(ts):
        nisa.tensor_tensor(acc, acc, t, op=nl.add)
    nisa.dma_copy(out, acc)
    return out


@pytest.mark.parametrize("cache", [False, True])
def test_refusal_names_unnamed_tiles_by_their_buffer_id(cache):
    x = np.zeros(1, np.float32)
    with pytest.raises(CapacityError) as ei:
        _run(overflow, (x,), {"n": 5, "named": False}, cache)
    msg = str(ei.value)
    assert f"SBUF allocation of {48 * 1024} bytes per partition for tensor `tile#" in msg
    shown = [int(m) for m in re.findall(r"`tile#(\d+)` 49152 B on 128 partitions", msg)]
    assert len(shown) == 4 and len(set(shown)) == 4          # the four live ones, each by its own buffer id
    head = int(re.search(r"for tensor `tile#(\d+)`", msg).group(1))
    assert head == max(shown)                                  # the fourth tile made, where SBUF overflows
    with pytest.raises(CapacityError) as ej:
        _run(overflow, (x,), {"n": 5, "named": True}, cache)
    named = str(ej.value)
    # the same message with the names in place of tile#<id>: the tiles were made in the same order
    order = sorted(set(shown))
    assert re.sub(r"tile#(\d+)", lambda m: f"t{order.index(int(m.group(1)))}", msg) == named


def test_unnamed_block_tensor_refusal_names_its_blocks():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 16 * 1024), dtype=nl.float32, buffer=nl.shared_hbm)
        blk = _tile((128, 4, 16 * 1024), block=16 * 1024, block_shape=(4,))
        nisa.memset(blk[:, 0, :], 0.0)
        for i in range(1, 4):             # (block_tensor's "all" mode in test_capacity.py: every block live to the end)
            nisa.memset(blk[:, i, :], float(i))
            nisa.tensor_tensor(blk[:, i, :], blk[:, i, :], blk[:, i - 1, :], op=nl.add)
        for i in range(3):
            nisa.tensor_tensor(blk[:, 3, :], blk[:, 3, :], blk[:, i, :], op=nl.add)
        nisa.dma_copy(out, blk[:, 3, :])
        return out
    with pytest.raises(CapacityError, match=r"tensor `tile#\d+` \(block 3\) does not fit.*`tile#\d+` block 0 "):
        k(np.zeros(1, np.float32))
