"""Data races between the programs of one launch, found with vector clocks.

Every program ``p`` keeps a vector clock ``vc[p]``: ``vc[p][q]`` is the latest epoch of program ``q`` that ``p``
has synchronised with (through a barrier); ``vc[p][p]`` is ``p``'s own epoch, advanced at each barrier it passes.
Each access of a program to shared memory (HBM: kernel inputs, outputs and every ``shared_hbm`` tensor; and any
buffer not allocated on the accessing core) is remembered with its epoch, source line and opcode.  A later access
by program ``p`` to an overlapping part of the same buffer, where one of the two is a write, races with the
remembered access of program ``q`` unless that access happened before, i.e. its epoch is at most ``vc[p][q]``.

Per buffer and program, the accesses are held in a :class:`~trnsim.machine.deps.AccessTracker` (so a write that
covers earlier accesses of the same program replaces them: anything that would race with them races with it).  A
barrier that every program passes clears them all.

A race is reported once per pair of source lines: as a :class:`RaceWarning` when the launch returns, or, in strict
mode (``TRNSIM_STRICT_RACES=1`` or ``strict_races=True``), as a :class:`RaceError` raised at the second access.
"""

from __future__ import annotations

import os
import warnings

from .. import config
from ..isa.dma_rmw import ATOMIC_OPCODES
from ..isa.errors import NkiValidationError
from .deps import AccessTracker

__all__ = ["RaceDetector", "RaceWarning", "RaceError", "Race", "strict_from_env"]


class RaceWarning(RuntimeWarning):
    """Two programs access shared memory, at least one writing, with no barrier between them."""


class RaceError(NkiValidationError):
    """A race, in strict mode."""


def strict_from_env() -> bool:
    return config.strict_races


def _where(loc):
    return f"{loc[0]}:{loc[1]}" if loc else "<unknown line>"


class Race:
    """One race: the buffer, and for each of the two accesses its program, opcode, kind and source line."""

    __slots__ = ("tensor", "memory", "lo", "hi", "first", "second")

    def __init__(self, tensor, memory, lo, hi, first, second):
        self.tensor = tensor
        self.memory = memory
        self.lo = lo
        self.hi = hi
        self.first = first      # (program, opcode, "read"/"write", loc): the earlier access
        self.second = second    # the later access, which found the race

    @property
    def lines(self):
        return (self.first[3], self.second[3])

    def message(self):
        (p1, op1, k1, l1), (p2, op2, k2, l2) = self.first, self.second
        return (f"data race on {self.memory.upper()} tensor `{self.tensor}` (elements [{self.lo}, {self.hi})): "
                f"program {p1} {op1} {k1}s it at {_where(l1)} and program {p2} {op2} {k2}s it at {_where(l2)} "
                "with no barrier between them; the result depends on which program runs first (separate the "
                "accesses with nisa.core_barrier, or give each program its own part of the tensor)")

    def __repr__(self):
        return f"<Race {self.message()}>"


class RaceDetector:
    """The vector clocks and remembered shared accesses of the programs of one launch."""

    def __init__(self, nprograms: int, strict: bool | None = None):
        n = int(nprograms)
        self.n = n
        self.strict = strict_from_env() if strict is None else bool(strict)
        self.vc = [[0] * n for _ in range(n)]
        for p in range(n):
            self.vc[p][p] = 1
        self.trackers: dict = {}      # buf id -> [AccessTracker or None per program]
        self.names: dict = {}         # buf id -> (tensor name, memory)
        self.races: list[Race] = []
        self._seen = set()

    # -- events -------------------------------------------------------------------------------------
    def access(self, p, core, rec, write_tensors=(), read_tensors=()):
        """Program ``p`` executed ``rec`` on ``core`` (``*_tensors``: its operands, for names in reports)."""
        binfo = core.buffers
        vcp = self.vc[p]
        for is_write, ops, tens in ((False, rec.reads, read_tensors), (True, rec.writes, write_tensors)):
            for k, op in enumerate(ops):
                bid = op[0]
                info = binfo.get(bid)
                if info is not None and info[0] != "hbm":
                    continue                      # an on-chip buffer of this program's own core
                trs = self.trackers.get(bid)
                if trs is None:
                    trs = self.trackers[bid] = [None] * self.n
                    t = tens[k] if k < len(tens) else None
                    self.names[bid] = (getattr(t, "name", "") or f"buffer#{bid}",
                                       getattr(getattr(t, "buf", None), "kind", "hbm"))
                lo, hi, view = op[1], op[2], op[3]
                for q in range(self.n):
                    tr = trs[q]
                    if q == p or tr is None:
                        continue
                    found = []
                    tr.writers(lo, hi, view, found)
                    if is_write:
                        tr.readers(lo, hi, view, found)
                    for ent in found:
                        epoch, loc, opcode, kind = ent[3]
                        if opcode in ATOMIC_OPCODES and rec.opcode in ATOMIC_OPCODES:
                            continue              # two atomic read-modify-writes: both land, in either order
                        if epoch > vcp[q]:
                            self._report(bid, max(lo, ent[0]), min(hi, ent[1]), (q, opcode, kind, loc),
                                         (p, rec.opcode, "write" if is_write else "read", rec.loc))
                tr = trs[p]
                if tr is None:
                    tr = trs[p] = AccessTracker()
                stamp = (vcp[p], rec.loc, rec.opcode, "write" if is_write else "read")
                if is_write:
                    tr.add_write(lo, hi, view, stamp, None)
                else:
                    tr.add_read(lo, hi, view, stamp, None)

    def barrier(self, participants):
        """The programs in ``participants`` passed a barrier together."""
        parts = list(participants)
        joined = [max(self.vc[p][i] for p in parts) for i in range(self.n)]
        for p in parts:
            self.vc[p] = joined[:]
            self.vc[p][p] += 1
        if len(parts) == self.n:
            self.trackers.clear()                 # everything so far happened before every program

    # -- reports ------------------------------------------------------------------------------------
    def _report(self, bid, lo, hi, first, second):
        key = tuple(sorted([(first[3] or ("", 0), first[2]), (second[3] or ("", 0), second[2])]))
        if key in self._seen:
            return
        self._seen.add(key)
        name, mem = self.names.get(bid, (f"buffer#{bid}", "hbm"))
        race = Race(name, mem, lo, hi, first, second)
        self.races.append(race)
        if self.strict:
            raise RaceError(race.message(), second[1], None, None, None, second[3])

    def warn(self, stacklevel=2):
        """Issue a :class:`RaceWarning` per race found (called on the launching thread when the launch ends)."""
        for r in self.races:
            warnings.warn(r.message(), RaceWarning, stacklevel=stacklevel + 1)
