"""``sched_state._order_pass`` (the dependency pass of the scheduler's loop, on borrowed arrays it never grows)
finds for every row the rows ``deps.AccessTracker`` finds, on records that make it hand back for more room in
each of its arrays (a tile read by hundreds of instructions on alternating engines, then written: long reader
segments, a row with hundreds of dependencies)."""

import numpy as np

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import sched_fast, schedule
from trnsim.machine.deps import AccessTracker

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def many_readers(x, n):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    s = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.dma_copy(s, x)
    u1 = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    u2 = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    for r in range(3):                       # few buffers (the trackers' pools start at 4 entries per buffer)
        for i in range(n):                   # readers on two engines in turn: none replaces the last
            u = u1 if i % 2 else u2
            if i % 2:
                nisa.tensor_tensor(u, t, s, op=nl.add)
            else:
                nisa.activation(u, nl.exp, t)
        nisa.dma_copy(t, x)                  # waits for every reader: one row with n dependencies
    nisa.dma_copy(out, t)
    return out


def _reference(core):
    """Each row's dependencies as ``deps.AccessTracker`` finds them: its reads' writers, then its writes' writers
    and readers."""
    trk = {}
    out = []
    for r in core.instructions:
        found = []
        for b, lo, hi, v in r.reads:
            t = trk.get(b)
            if t is not None:
                t.writers(lo, hi, v, found)
        for b, lo, hi, v in r.writes:
            t = trk.get(b)
            if t is not None:
                t.writers(lo, hi, v, found)
                t.readers(lo, hi, v, found)
        out.append(sorted(e[3] for e in found))
        for b, lo, hi, v in r.writes:
            trk.setdefault(b, AccessTracker()).add_write(lo, hi, v, r.id, r.engine)
        for b, lo, hi, v in r.reads:
            trk.setdefault(b, AccessTracker()).add_read(lo, hi, v, r.id, r.engine)
    return out


def test_the_pass_finds_what_the_reference_tracker_finds_when_its_arrays_must_grow():
    res = run_kernel(many_readers, (np.zeros((128, 64), np.float32), 300), {}, (1,), "trn2", execute=False)
    core = res.cores[0]
    enc = sched_fast.encode(core)
    state = sched_fast.CoreRun(core, enc, 1.0).state
    pr_ptr, pr_row = state[41], state[42]
    ref = _reference(core)
    got = [sorted(pr_row[pr_ptr[i]:pr_ptr[i + 1]].tolist()) for i in range(len(ref))]
    assert got == ref
    assert max(map(len, ref)) >= 300                  # past the pass's first scratch (64) and reader segments
    assert pr_ptr[-1] > 2 * len(ref)                  # past the dependency lists' first size (2 per row)
    tl = schedule(res.cores)
    loads = [k for k, op in enumerate(tl.opcode) if op == "dma_copy" and tl.deps[k]]
    assert tl == schedule(res.cores, impl="python") and tl.total_ns > 0 and loads
