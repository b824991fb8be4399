"""Programs that run at the same time: the programs of an SPMD grid and the physical cores of an LNC launch.

On hardware the programs of one launch run concurrently, so what one program sees of another's writes to shared
memory depends on when each access happens.  trnsim runs each program as a thread-backed coroutine and lets
exactly one run at a time: after every instruction a program records, the launch hands the turn to the program
that is earliest in simulated time (ties go to the lower program index).  So the programs' accesses to shared HBM
interleave in simulated-time order, not one program to completion before the next.

The simulated time of a program here is an issue-time estimate, computed as each instruction is recorded: an
instruction starts when its engine is free and the buffers it touches are ready (read after write, write after
read and write after write, by buffer), and lasts its cost at its engine's clock (DMA transfers: their cost in
ns, waiting for the DMA engines taken as one pool of booked time).  It is monotone per program.  The timeline itself is still computed
afterwards by the scheduler from each core's record; this estimate only orders the programs' effects.

A program keeps the turn while its clock is at most ``TURN_NS`` ahead of every other program's, and a switch
happens after an instruction has taken effect; so accesses that are more than ``TURN_NS`` (plus one instruction)
apart in simulated time take effect in time order.  Only racy programs can tell the difference: for programs
whose shared accesses are separated by barriers every interleaving gives the same result.

Barriers (``NeuronCore.barrier``, used by ``core_barrier``): a program that reaches one waits until every program
it names has reached it; then their clocks join (the latest of them) and their vector clocks join, so the race
detector (``races.py``) knows what each program has seen.
"""

from __future__ import annotations

import threading

from ..isa.errors import NkiValidationError

__all__ = ["Programs", "Program", "BarrierError", "ProgramAborted"]

_NEW, _READY, _BARRIER, _DONE = "new", "ready", "barrier", "done"


# A program keeps the turn until its clock is more than this ahead of the earliest other program.  trnsim's
# choice, not a hardware figure: well below a DMA's fixed cost (targets.py dma_fixed_ns), so shared-memory accesses
# further apart in time keep their time order, while lockstep programs switch every few instructions rather than
# at every one.  Accesses closer in time than this with no barrier between them are races: their order is not
# fixed on hardware either.
TURN_NS = 500.0


class BarrierError(NkiValidationError):
    """A barrier that can never complete: a named program finished, or is not part of the launch."""


class ProgramAborted(BaseException):
    """Raised inside a program to unwind it when another program of its launch failed."""


class _Clock:
    """A program's issue-time estimate (ns from the launch); see the module docstring."""

    __slots__ = ("target", "eng", "wdone", "rdone", "now", "rate", "dma_work")

    def __init__(self, target):
        self.target = target
        self.eng = {}
        self.wdone = {}
        self.rdone = {}
        self.now = 0.0
        self.rate = {}
        self.dma_work = 0.0          # DMA engine-ns booked so far (all engines together)

    def issue(self, rec) -> float:
        e = rec.engine
        wdone = self.wdone
        rdone = self.rdone
        if e == "dma":                # the DMA engines as one pool: a transfer waits for the pool's booked time
            tg = self.target
            nq = tg.dma_engines_per_core
            t = self.dma_work / nq
            nuse = min(nq, -(-max(1, rec.rows or 1) // tg.dma_partitions_per_engine))
            self.dma_work += max(0.0, (rec.ns or 0.0) - tg.dma_fixed_ns) * nuse
        else:
            t = self.eng.get(e, 0.0)
        for op in rec.reads:
            w = wdone.get(op[0])
            if w is not None and w > t:
                t = w
        for op in rec.writes:
            w = wdone.get(op[0])
            if w is not None and w > t:
                t = w
            r = rdone.get(op[0])
            if r is not None and r > t:
                t = r
        if rec.cycles is None:
            dur = rec.ns or 0.0
        else:
            per = self.rate.get(e)
            if per is None:
                try:
                    per = self.target.cycles_to_ns(e, 1.0)
                except (KeyError, ValueError, TypeError, AttributeError):
                    per = self.target.cycles_to_ns("scalar", 1.0)
                self.rate[e] = per
            dur = rec.cycles * per
        end = t + dur
        if e != "dma":
            self.eng[e] = end
        for op in rec.writes:
            wdone[op[0]] = end
        for op in rec.reads:
            r = rdone.get(op[0])
            if r is None or end > r:
                rdone[op[0]] = end
        if t > self.now:
            self.now = t
        return t


class Program:
    """One program of a launch: its core, its body, its clock and its place in the turn order."""

    __slots__ = ("index", "core", "body", "state", "clock", "lock", "thread", "result", "error", "waiting_at")

    def __init__(self, index, core, body):
        self.index = index
        self.core = core
        self.body = body
        self.state = _NEW
        self.clock = _Clock(core.target)
        self.lock = threading.Lock()
        self.lock.acquire()          # a program runs only when the launch releases its lock
        self.thread = None
        self.result = None
        self.error = None
        self.waiting_at = None       # (participants, loc) of the barrier it waits at


class Programs:
    """The programs of one launch, run interleaved in simulated-time order.

    ``bodies[i]`` is called (with no arguments) as program ``i`` on ``cores[i]``.  ``races`` is a
    :class:`~trnsim.machine.races.RaceDetector` (or ``None``) told of every instruction and barrier."""

    def __init__(self, cores, races=None):
        self.cores = list(cores)
        self.races = races
        self.programs = []
        self.error = None
        self.aborting = False
        self.finished = threading.Event()

    # -- running ------------------------------------------------------------------------------------
    def run(self, bodies):
        """Run every body as its program; returns their results (raises the first failure)."""
        if len(bodies) != len(self.cores):
            raise ValueError(f"{len(bodies)} program bodies for {len(self.cores)} cores")
        self.programs = [Program(i, c, b) for i, (c, b) in enumerate(zip(self.cores, bodies))]
        if len(self.programs) > 1:
            for p in self.programs:
                p.core.programs = self
                p.core.program = p
        try:
            if len(self.programs) == 1:          # nothing to interleave: run it here, unhooked
                p = self.programs[0]
                p.state = _READY
                try:
                    p.result = p.body()
                finally:
                    p.state = _DONE
            else:
                for p in self.programs:
                    p.thread = threading.Thread(target=self._thread, args=(p,), daemon=True,
                                                name=f"trnsim-program-{p.index}")
                    p.thread.start()
                self.programs[0].lock.release()
                try:
                    self.finished.wait()
                except BaseException:             # interrupted while the programs run: unwind them
                    self.aborting = True
                    for p in self.programs:
                        if p.state != _DONE and p.lock.locked():
                            p.lock.release()
                    raise
                for p in self.programs:
                    p.thread.join()
            if self.error is not None:
                raise self.error
            return [p.result for p in self.programs]
        finally:
            for p in self.programs:
                p.core.programs = None
                p.core.program = None
                p.thread = None
                p.body = None
            self.programs = []

    def _thread(self, p):
        p.lock.acquire()                         # wait for the first turn
        try:
            if not self.aborting:
                p.state = _READY
                p.result = p.body()
        except ProgramAborted:
            pass
        except BaseException as e:              # noqa: BLE001 - re-raised on the launching thread
            p.error = e
            if self.error is None:
                self.error = e
            self.aborting = True
        finally:
            p.state = _DONE
            p.waiting_at = None
            self._pass_on(p)

    def _pass_on(self, p):
        """``p`` has finished: give the turn to the next program, or end the launch."""
        rest = [q for q in self.programs if q.state != _DONE]
        if not rest:
            self.finished.set()
            return
        if not self.aborting:
            nxt = self._pick()
            if nxt is None:                      # only programs waiting at barriers are left: they never pass
                q = rest[0]
                parts, loc = q.waiting_at
                self.error = BarrierError(
                    f"core_barrier: program {q.index} waits for programs {list(parts)}, but program(s) "
                    f"{[r.index for r in self.programs if r.index in parts and r.state == _DONE]} finished without "
                    "reaching a barrier: the launch would hang", "core_barrier", "cores", list(parts), None, loc)
                self.aborting = True
            else:
                nxt.lock.release()
                return
        for q in rest:                           # unwinding: each remaining program raises ProgramAborted
            q.lock.release()
            return

    def _pick(self):
        best = None
        for q in self.programs:
            if q.state == _READY or q.state == _NEW:
                if best is None or q.clock.now < best.clock.now:
                    best = q
        return best

    def _switch(self, me, nxt):
        nxt.lock.release()
        me.lock.acquire()
        if self.aborting:
            raise ProgramAborted()

    # -- hooks called by NeuronCore ----------------------------------------------------------------
    def issued(self, core, rec, write_tensors=(), read_tensors=()):
        """``core``'s program recorded ``rec`` (it has taken effect): check it for races, advance the program's
        clock, and hand the turn to the earliest program."""
        me = core.program
        if self.races is not None:
            self.races.access(me.index, core, rec, write_tensors, read_tensors)
        me.clock.issue(rec)
        t = me.clock.now - TURN_NS
        for q in self.programs:
            if q.clock.now < t and q is not me and (q.state == _READY or q.state == _NEW):
                self._switch(me, self._pick())
                return

    def barrier(self, core, participants, loc=None):
        """``core``'s program waits until every program in ``participants`` (program indices) has reached a
        barrier; their clocks and (for the race detector) vector clocks join."""
        me = core.program
        parts = tuple(sorted({int(x) for x in participants}))
        n = len(self.programs)
        bad = [x for x in parts if not 0 <= x < n]
        if bad or me.index not in parts:
            why = (f"names program(s) {bad} outside this launch of {n} program(s)" if bad else
                   f"does not name program {me.index}, which executes it")
            raise BarrierError(f"core_barrier: cores={list(parts)} {why}; a barrier only completes when every "
                               "named core reaches it", "core_barrier", "cores", list(parts), list(range(n)), loc)
        me.state = _BARRIER
        me.waiting_at = (parts, loc)
        group = [self.programs[x] for x in parts]
        if all(q.state == _BARRIER and q.waiting_at[0] == parts for q in group):
            t = max(q.clock.now for q in group)
            for q in group:
                q.clock.now = t
                for e in q.clock.eng:
                    if q.clock.eng[e] < t:
                        q.clock.eng[e] = t
                q.state = _READY
                q.waiting_at = None
            if self.races is not None:
                self.races.barrier(parts)
            nxt = self._pick()
            if nxt is not me:
                self._switch(me, nxt)
            return
        nxt = self._pick()
        if nxt is None:
            done = [q.index for q in group if q.state == _DONE]
            me.state = _READY
            me.waiting_at = None
            raise BarrierError(f"core_barrier: program {me.index} waits for programs {list(parts)}, but "
                               f"program(s) {done} finished without reaching a barrier: the launch would hang",
                               "core_barrier", "cores", list(parts), None, loc)
        self._switch(me, nxt)
