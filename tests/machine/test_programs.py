"""Programs of one launch run interleaved in simulated-time order; races on shared memory are reported."""

import threading
import warnings

import numpy as np
import pytest

import trnsim.kernels.nki as nki
import trnsim.kernels.nki.isa as nisa
import trnsim.kernels.nki.language as nl
from trnsim.isa.errors import NkiValidationError, caller_location
from trnsim.kernels import context
from trnsim.machine.programs import BarrierError
from trnsim.machine.races import RaceError, RaceWarning


def barrier(cores=(0, 1), data=None):
    """What ``nisa.core_barrier`` does on the machine (the front end's instruction calls this)."""
    context.current().core.barrier(cores, caller_location(), data=data)


def _program_threads():
    return [t for t in threading.enumerate() if t.name.startswith("trnsim-program-")]


def _races(fn, *args, **kw):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*args, **kw)
    return out, [x for x in w if issubclass(x.category, RaceWarning)]


def _lines(fn):
    """Source line numbers of ``fn``'s body that contain ``#`` markers: {marker: line}."""
    import inspect
    src, first = inspect.getsourcelines(fn)
    out = {}
    for i, line in enumerate(src):
        if "# <" in line:
            out[line.split("# <")[1].split(">")[0]] = first + i
    return out


@nki.jit
def zero_fill_then_rows(x):
    """Each program zero-fills the whole shared output, then writes 2*x into its own half of the rows (the pattern
    of the two nki-library mismatches): run one program after the other, program 1's zero-fill wipes program 0's
    rows; run concurrently, both zero-fills come first."""
    R, C = x.shape
    pid = nl.program_id(0)
    half = R // 2
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    z = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(z, 0.0)
    nisa.dma_copy(out, z)                                            # <zero>
    t = nl.ndarray((half, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[pid * half:(pid + 1) * half, :])
    for _ in range(4):
        nisa.tensor_scalar(t, t, nl.multiply, 1.0)
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)
    nisa.dma_copy(out[pid * half:(pid + 1) * half, :], t)            # <rows>
    return out


def test_lnc2_zero_fill_does_not_wipe_the_other_programs_rows():
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 7.0
    out, races = _races(zero_fill_then_rows[2], x)
    np.testing.assert_array_equal(out, 2.0 * x.astype(np.float64))
    # the two zero-fills race with each other (write/write, both programs, no barrier), and each program's row
    # store races with the other's zero-fill: reported, naming both lines
    ln = _lines(zero_fill_then_rows.fn)
    msgs = [str(r.message) for r in races]
    assert any(f":{ln['zero']} " in m and f":{ln['rows']} " in m for m in msgs), msgs
    assert all("program 0" in m and "program 1" in m for m in msgs)


@nki.jit
def late_writer(x):
    """Program 0 computes for a long time before writing row block 0 of the output; program 1 writes the same
    block at once.  On hardware program 0's write lands last."""
    pid = nl.program_id(0)
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    if pid == 0:
        for _ in range(40):                         # 40 dependent vector instructions: microseconds
            nisa.tensor_scalar(t, t, nl.add, 1.0)
        nisa.dma_copy(out, t)                        # <late>
    else:
        nisa.memset(t, -5.0)
        nisa.dma_copy(out, t)                        # <early>
    return out


def test_effects_follow_simulated_time_not_program_order():
    x = np.zeros((128, 64), np.float32)
    out, races = _races(late_writer[2], x)
    # in program order (0 then 1) the last write would be program 1's -5; in simulated time it is program 0's
    np.testing.assert_array_equal(out, np.full((128, 64), 40.0))
    ln = _lines(late_writer.fn)
    assert len(races) == 1
    m = str(races[0].message)
    assert f":{ln['late']} " in m and f":{ln['early']} " in m


@nki.jit
def disjoint_rows(x):
    pid = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[pid * 64:(pid + 1) * 64, :])
    nisa.tensor_scalar(t, t, nl.add, 3.0)
    nisa.dma_copy(out[pid * 64:(pid + 1) * 64, :], t)
    return out


def test_disjoint_rows_are_not_a_race():
    x = np.random.default_rng(0).standard_normal((128, 32)).astype(np.float32)
    out, races = _races(disjoint_rows[2], x)
    np.testing.assert_array_equal(out, (x.astype(np.float64) + 3.0).astype(np.float32))  # one fp32 rounding
    assert races == []
    assert _program_threads() == []                 # the launch's threads are gone when it returns


@nki.jit
def exchange(x, use_barrier):
    """Program p writes its half, then reads the *other* program's half and writes it, doubled, to a second
    output: correct only when a barrier separates the two phases."""
    pid = nl.program_id(0)
    other = 1 - pid
    mid = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="mid")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[pid * 64:(pid + 1) * 64, :])
    if pid == 1:
        for _ in range(20):                          # program 1 is slower to produce its half
            nisa.tensor_scalar(t, t, nl.multiply, 1.0)
    nisa.dma_copy(mid[pid * 64:(pid + 1) * 64, :], t)              # <produce>
    if use_barrier:
        barrier()
    u = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(u, mid[other * 64:(other + 1) * 64, :])          # <consume>
    nisa.tensor_scalar(u, u, nl.multiply, 2.0)
    nisa.dma_copy(out[other * 64:(other + 1) * 64, :], u)
    return out


def test_barrier_orders_the_exchange_and_is_not_a_race():
    x = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    out, races = _races(exchange[2], x, True)
    np.testing.assert_array_equal(out, 2.0 * x.astype(np.float64))
    assert races == []


def test_missing_barrier_is_a_race_naming_both_lines():
    x = np.random.default_rng(1).standard_normal((128, 16)).astype(np.float32)
    _, races = _races(exchange[2], x, False)
    ln = _lines(exchange.fn)
    assert races, "reading the other program's half with no barrier must be reported"
    m = str(races[0].message)
    assert f":{ln['produce']} " in m and f":{ln['consume']} " in m
    assert "tensor `mid`" in m


def test_strict_mode_keyword_raises_at_the_second_access():
    x = np.zeros((128, 16), np.float32)
    k = nki.jit(exchange.fn, strict_races=True)
    with pytest.raises(RaceError) as ei:
        k[2](x, False)
    ln = _lines(exchange.fn)
    assert ei.value.location[1] == ln["consume"] or ei.value.location[1] == ln["produce"]
    assert f":{ln['produce']} " in str(ei.value) and f":{ln['consume']} " in str(ei.value)
    assert isinstance(ei.value, NkiValidationError)


def test_strict_mode_environment_variable(monkeypatch):
    monkeypatch.setenv("TRNSIM_STRICT_RACES", "1")
    with pytest.raises(RaceError):
        exchange[2](np.zeros((128, 16), np.float32), False)
    monkeypatch.setenv("TRNSIM_STRICT_RACES", "0")
    _, races = _races(exchange[2], np.zeros((128, 16), np.float32), False)
    assert races


def test_single_program_launch_reports_nothing_and_starts_no_thread():
    x = np.ones((128, 16), np.float32)
    started = []
    orig = threading.Thread.start

    def spy(self):
        started.append(self.name)
        return orig(self)
    threading.Thread.start = spy
    try:
        out, races = _races(disjoint_rows, x)
    finally:
        threading.Thread.start = orig
    assert races == [] and not [n for n in started if n.startswith("trnsim-program-")]


@nki.jit
def fails_in_program_1(x):
    pid = nl.program_id(0)
    t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    for _ in range(5):
        nisa.tensor_scalar(t, t, nl.add, 1.0)
        if pid == 1:
            raise ValueError("program 1 gives up")
    return x


def test_a_failing_program_raises_and_the_others_unwind():
    with pytest.raises(ValueError, match="program 1 gives up"):
        fails_in_program_1[2](np.zeros((128, 16), np.float32))
    assert _program_threads() == []


@nki.jit
def barrier_only_in_program_0(x):
    t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    if nl.program_id(0) == 0:
        barrier()
    return x


def test_a_barrier_that_cannot_complete_is_an_error_not_a_hang():
    with pytest.raises(BarrierError, match="would hang"):
        barrier_only_in_program_0[2](np.zeros((128, 16), np.float32))
    with pytest.raises(BarrierError, match="one program"):
        barrier_only_in_program_0(np.zeros((128, 16), np.float32))
    assert _program_threads() == []


@nki.jit
def inner_add_pid(x):
    # private: a shared_hbm tensor made by the inner kernel would be one tensor shared by both programs
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_scalar(t, t, nl.add, float(nl.program_id(0)))
    nisa.dma_copy(out, t)
    return out


@nki.jit
def outer_calls_inner(x):
    pid = nl.program_id(0)
    out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    y = inner_add_pid(x[pid * 64:(pid + 1) * 64, :])            # a kernel called from a kernel: a subroutine
    t = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, y)
    nisa.dma_copy(out[pid * 64:(pid + 1) * 64, :], t)
    return out


def test_kernel_called_from_a_kernel_runs_in_the_calling_program():
    x = np.zeros((128, 8), np.float32)
    out, races = _races(outer_calls_inner[2], x)
    np.testing.assert_array_equal(out[:64], 0.0)
    np.testing.assert_array_equal(out[64:], 1.0)
    assert races == []


def test_v1_spmd_grid_runs_concurrently_and_disjoint_tiles_do_not_race():
    import trnsim.kernels.neuronxcc.nki as nki1
    import trnsim.kernels.neuronxcc.nki.language as nl1

    @nki1.jit
    def grid_copy(a):
        out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
        i = nl1.program_id(0)
        j = nl1.program_id(1)
        t = nl1.load(a[i * 32:(i + 1) * 32, j * 16:(j + 1) * 16])
        nl1.store(out[i * 32:(i + 1) * 32, j * 16:(j + 1) * 16], value=t * 2.0)
        return out

    a = np.random.default_rng(2).standard_normal((128, 32)).astype(np.float32)
    out, races = _races(grid_copy[4, 2], a)
    np.testing.assert_allclose(out, 2.0 * a.astype(np.float64), rtol=0, atol=0)
    assert races == []


@nki.jit
def barrier_timing(x):
    """Program 0 is slow to write its half of ``mid``; program 1 reads it after the barrier."""
    pid = nl.program_id(0)
    mid = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="mid")
    t = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[pid * 64:(pid + 1) * 64, :])
    if pid == 0:
        for _ in range(50):
            nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.dma_copy(mid[pid * 64:(pid + 1) * 64, :], t)
    barrier(data=mid)
    u = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(u, mid[(1 - pid) * 64:(2 - pid) * 64, :])
    return mid


def test_barrier_synchronises_the_timeline():
    from trnsim.machine import schedule
    x = np.zeros((128, 64), np.float32)
    res = barrier_timing[2].run(x)
    tl = schedule(res.cores)
    rows = list(tl.rows())
    bar = {r.core: r for r in rows if r.opcode == "core_barrier"}
    stores = {r.core: r for r in rows if r.opcode == "dma_copy" and r.dst == "hbm"}
    loads_after = {r.core: r for r in rows if r.opcode == "dma_copy" and r.src == "hbm" and r.id > bar[r.core].id}
    assert set(bar) == {0, 1}
    sema = res.cores[0].target.semaphore_ns
    # both pass the barrier together: the later arrival (program 0's store of mid, plus the semaphore of that
    # cross-engine dependency) plus the semaphore update reaching the other core
    assert bar[0].start == bar[1].start == pytest.approx(max(stores[0].done, stores[1].done) + 2 * sema)
    assert stores[0].done > stores[1].done + 1000            # program 0 really was the late one
    for c in (0, 1):                                         # reads of mid wait for the barrier
        assert loads_after[c].start >= bar[c].done
