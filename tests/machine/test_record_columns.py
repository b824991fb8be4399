"""The record kept only as columns (``record_cols``): issuing makes no ``InstrRecord``; ``core.instructions``
makes each row's record from the columns when read, the same object at every later read, equal whether read
after every instruction or once at the end, with DMA fields, barrier participants and operands in their rows.
Also the deferred sentinel fill of new buffers (``Buffer.fresh``): a fresh tile reads as the sentinel, a write
of every element needs no fill, a partial write keeps the sentinel elsewhere, a failed whole write leaves it."""

import os

import numpy as np
import pytest

import trnsim
from trnsim.isa.common import write, write_same_dtype
from trnsim.kernels.jit import run_kernel
from trnsim.machine import NeuronCore
from trnsim.machine.record_cols import InstrRecord, Records
from trnsim.memory import Tensor
from trnsim.memory.dtypes import DTYPES
from trnsim.memory.space import Buffer, MemorySpace

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from suite_files import load_file

HERE = os.path.dirname(__file__)
_FIELDS = InstrRecord.__slots__        # every field of a record


def _fields(recs):
    """Every field of every record with its type; buffer ids numbered by first use (ids come from a counter)."""
    ids = {}
    out = []
    for r in recs:
        row = []
        for f in _FIELDS:
            v = getattr(r, f)
            if f in ("writes", "reads"):
                v = tuple((ids.setdefault(b, len(ids)), lo, hi, pat) for b, lo, hi, pat in v)
            row.append((f, type(v).__name__, v))
        out.append(tuple(row))
    return out


def mixed(x):
    """DMA in at a partition offset, engine instructions, a matmul (stationary-load cycles), DMA out."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.dma_copy(t[8:40, :], x[8:40, :])
    u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(u, t, nl.multiply, 2.0)
    acc = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, t[:, 0:P], u[:, 0:P])
    for _ in range(3):
        nisa.tensor_tensor(u, t, u, op=nl.add)
    nisa.dma_copy(out, u)
    return out


def test_issue_makes_no_record_objects_and_reads_make_them_once():
    x = np.zeros((128, 256), np.float32)
    res = run_kernel(mixed, (x,), {}, (1,), "trn2", execute=False)
    core = res.cores[0]
    recs = core.instructions
    assert isinstance(recs, Records)
    assert recs._m == [] and len(recs) == 8          # issued and counted, none made yet
    first = list(recs)
    assert len(recs._m) == 8 and all(type(r) is InstrRecord for r in first)
    assert all(a is b for a, b in zip(first, recs))  # the same objects at every read
    assert recs[-1] is first[-1] and recs[2:4] == first[2:4]
    assert [r.id for r in first] == list(range(8))
    dma = [r for r in first if r.engine == "dma"]
    assert [r.opcode for r in dma] == ["dma_copy"] * 3
    assert all(r.cycles is None and r.ns > 0 and r.nbytes > 0 for r in dma)
    assert [(r.rows, r.part0) for r in dma] == [(128, 0), (32, 8), (128, 0)]
    eng = [r for r in first if r.engine != "dma"]
    assert all(r.ns is None and r.cycles > 0 and (r.nbytes, r.rows, r.part0) == (0, 0, 0) for r in eng)
    mm = [r for r in first if r.opcode == "nc_matmul"]
    assert len(mm) == 1 and mm[0].pre > 0 and mm[0].flops == 2 * 128 * 128 * 128
    # operands: the columns' entries, writes then reads, in row order
    cols = core.columns
    ops = [op for r in first for op in r.writes + r.reads]
    assert ops == list(zip(cols.b, cols.lo, cols.hi, cols.v))
    assert [len(r.writes) for r in first] == cols.nw
    # list behaviour kept: equality with a list of the same records, concatenation
    assert recs == first and not (recs == first[:-1]) and recs + [] == first and [] + recs == first
    assert NeuronCore("trn2").instructions == []


def test_records_read_during_the_run_equal_records_read_at_the_end():
    """Rows made a few at a time (a read after each instruction, as a multi-program launch reads them) are the
    rows made all at once."""
    x = np.zeros((128, 256), np.float32)
    whole = _fields(run_kernel(mixed, (x,), {}, (1,), "trn2", execute=False).instructions)
    seen = []

    def spying(orig):
        def spy(self, *a, **k):
            orig(self, *a, **k)
            seen.append(self.instructions[-1])
        return spy

    from trnsim.kernels import issue_cache
    from trnsim.machine import replay_gen

    def spying_program(steps, slow):
        # the issue cache's generated replay (replay_gen): read the row after the one record it makes
        assert [s[0] for s in steps].count("rec") == 1
        run = replay_gen.compile_program(steps, slow)

        def spy(core, loc, leaves):
            run(core, loc, leaves)
            seen.append(core.instructions[-1])
        return spy

    mp = pytest.MonkeyPatch()
    for name in ("record", "record_dma", "replay"):
        mp.setattr(NeuronCore, name, spying(getattr(NeuronCore, name)))
    mp.setattr(issue_cache, "compile_program", spying_program)
    mp.setattr(issue_cache, "GEN_AFTER", 1)          # every replay through the generated code
    try:
        res = run_kernel(mixed, (x,), {}, (1,), "trn2", execute=False)
    finally:
        mp.undo()
    core = res.cores[0]
    assert _fields(core.instructions) == whole
    assert len(seen) == len(whole) and all(s is r for s, r in zip(seen, core.instructions))


def test_barrier_rows_keep_their_participants():
    prog = load_file("_tp_for_cols", os.path.join(HERE, "test_programs.py"))
    x = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    res = run_kernel(prog.exchange.fn, (x, True), {}, (2,), "trn2", execute=False)
    for c in res.cores:
        bars = [r for r in c.instructions if r.opcode == "core_barrier"]
        assert bars and all(r.parts == (0, 1) for r in bars)
        assert sorted(c.columns.bar) == [r.id for r in bars]
        assert all(r.parts is None for r in c.instructions if r.opcode != "core_barrier")


# ---------------------------------------------------------------------------------------- deferred fill

def _tile(shape=(4, 6), dtype="float32"):
    sp = MemorySpace("sbuf", 1 << 20, 128, align=4, name="sbuf")
    return Tensor.whole(Buffer(sp, DTYPES[dtype], shape))


class _Core:
    precise = True
    strict = False


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8"])
def test_a_new_buffer_reads_as_the_sentinel(dtype):
    t = _tile(dtype=dtype)
    assert t.buf.fresh
    a = t.np
    dt = DTYPES[dtype]
    assert np.array_equal(a, np.full(a.shape, dt.sentinel, dt.storage), equal_nan=True)
    assert not t.buf.fresh


def test_a_whole_write_needs_no_fill_and_a_partial_one_keeps_the_sentinel():
    v = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = _tile()
    t.buf._data[:] = 123.0          # the fill would overwrite this; a whole write overwrites it instead
    write_same_dtype(_Core(), t, v)
    assert not t.buf.fresh and np.array_equal(t.np, v)
    t = _tile()
    write(_Core(), t, v + 0.5)
    assert np.array_equal(t.np, v + 0.5)
    # a part: the rest reads as never written
    t = _tile()
    part = t[1:3, :]
    write_same_dtype(_Core(), part, v[1:3])
    a = t.np
    assert np.array_equal(a[1:3], v[1:3]) and np.isnan(a[[0, 3]]).all()
    # every element once, but not row-major (the transposed order of a [6, 4] tile): no claim, same result
    t = _tile((6, 4))
    tt = Tensor(t.buf, 0, (4, 6), (1, 4))
    t.buf._data[:] = 7.0
    write_same_dtype(_Core(), tt, v)
    assert np.array_equal(t.np, v.T)
    # as many elements as the buffer but repeating some (a stride-0 dimension): the rest stays the sentinel
    t = _tile((4, 6))
    rep = Tensor(t.buf, 0, (2, 12), (0, 1))
    write(_Core(), rep, np.ones((2, 12), np.float32))
    a = t.np.reshape(-1)
    assert (a[:12] == 1).all() and np.isnan(a[12:]).all()


def test_a_failed_whole_write_leaves_the_sentinel():
    t = _tile()
    with pytest.raises(ValueError):
        write(_Core(), t, np.ones(5, np.float32))     # cannot be broadcast to the tile
    assert np.isnan(t.np).all()


def test_which_writes_claim_a_new_buffer():
    from trnsim.isa.common import _whole
    t = _tile((4, 6))
    assert _whole(t) and _whole(Tensor(t.buf, 0, (4, 1, 6), (6, 99, 1)))     # a size-1 dim's stride is moot
    assert not _whole(t[0:2, :]) and not _whole(t[:, 0:3])
    assert not _whole(Tensor(t.buf, 0, (6, 4), (1, 6)))                        # transposed order
    assert not _whole(Tensor(t.buf, 0, (2, 12), (0, 1)))                       # repeats half the elements
    assert not _whole(Tensor(t.buf, 0, (24,), (1,), DTYPES["int32"]))          # a reinterpreting view
    t.buf._data[:] = 123.0
    assert t.buf.claim_whole() is True and (t.buf._data == 123.0).all()       # claimed: never filled
    assert t.buf.claim_whole() is False and not _whole(t)
    assert (t.np == 123.0).all()


def test_column_totals_equal_the_records_totals():
    """``backend.costs`` sums FLOPs and bytes from the columns: the same totals as over the records."""
    x = np.zeros((128, 256), np.float32)
    res = run_kernel(mixed, (x,), {}, (1,), "trn2", execute=False)
    cols = res.cores[0].columns
    assert sum(cols.flops) == sum(r.flops for r in res.instructions) > 0
    assert sum(cols.nbytes) == sum(r.nbytes for r in res.instructions) > 0
