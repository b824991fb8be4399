"""A core's instruction record, kept column-wise: one list per field, appended as each instruction is recorded.
The columns are the record: the compiled scheduler (``sched_fast``) reads them directly, and ``core.instructions``
(:class:`Records`) makes an :class:`InstrRecord` object of a row only when something reads it (the reference
scheduler, the profiler, tests), so issuing an instruction makes no object of its own.

One entry per instruction: ``eng``, ``cost`` (engine cycles, or ns for DMA), ``pre``, ``opcode``, ``flops``,
``loc``, ``nw`` (how many of its operands it writes) and ``nops``; DMA transfers also append their row index to
``dma`` and their ``rows``/``part0``/``nbytes``/``dge`` (``InstrRecord.dge``); a ``core_barrier`` sets ``barrier`` and
puts its participants in ``bar`` (row -> tuple of core ids).  One entry per operand, writes first then reads, as
``InstrRecord.writes``/``reads`` hold them: ``b`` (buffer id), ``lo``, ``hi``, ``v`` (the interned access pattern).

A writer records an instruction's per-instruction fields as one row tuple appended to ``pend``
(:data:`ROW_FIELDS`: ``(eng, cost, pre, opcode, flops, nw, nops, dma)``, ``dma`` None or ``(nbytes, rows, part0,
dge)``), its line to ``loc`` and its operands to the operand columns.  A cached layout appends the same row object
at every replay, so an instruction costs one append for those fields instead of eight (thirteen for a DMA).  The
rows become the per-instruction columns (:meth:`RecordColumns.flush`, a pass of C loops) the first time any of
those columns is read, whoever reads it (the scheduler, ``Records``, a writer that appends to a column itself):
the columns read are always those of every instruction recorded so far, in program order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_not, itemgetter

__all__ = ["RecordColumns", "InstrRecord", "Records", "ROW_FIELDS"]

# a row of ``RecordColumns.pend``: the per-instruction fields, in this order
ROW_FIELDS = ("eng", "cost", "pre", "opcode", "flops", "nw", "nops", "dma")
# the columns made from the rows (``dma``'s are the DMA rows' index and their four fields)
_ROW_COLS = ("eng", "cost", "pre", "opcode", "flops", "nw", "nops", "dma", "rows", "part0", "nbytes", "dge")


def _column(f):
    slot = "_" + f

    def get(self):
        if self.pend:
            self.flush()
        return getattr(self, slot)
    get.__name__ = f
    return property(get, doc=f"The ``{f}`` column of every instruction recorded so far (pending rows flushed).")


class RecordColumns:
    __slots__ = tuple("_" + f for f in _ROW_COLS) + ("pend", "loc", "b", "lo", "hi", "v", "barrier", "bar")

    def __init__(self):
        for f in self.__slots__:
            setattr(self, f, [])
        self.barrier = False
        self.bar = {}

    def __len__(self):
        return len(self.loc)        # (every writer appends one line per instruction, pending or not)

    def flush(self):
        """Turn the pending rows (``pend``) into the per-instruction columns, in order."""
        p = self.pend
        if not p:
            return
        self.pend = []
        n0 = len(self._eng)
        if len(p) <= 256:           # a few rows (a loop being watched by the loop replay reads them): transposed
            eng, cost, pre, opcode, flops, nw, nops, dma = zip(*p)
            self._eng += eng
            self._cost += cost
            self._pre += pre
            self._opcode += opcode
            self._flops += flops
            self._nw += nw
            self._nops += nops
        else:                       # one C pass per field (``zip(*p)`` of a million rows makes a million iterators)
            for k, col in enumerate((self._eng, self._cost, self._pre, self._opcode, self._flops, self._nw,
                                     self._nops)):
                col += map(itemgetter(k), p)
            dma = list(map(itemgetter(7), p))
        if dma.count(None) != len(dma):
            sel = list(map(is_not, dma, repeat(None)))
            self._dma += compress(range(n0, n0 + len(dma)), sel)
            dd = list(compress(dma, sel))
            self._nbytes += map(itemgetter(0), dd)
            self._rows += map(itemgetter(1), dd)
            self._part0 += map(itemgetter(2), dd)
            self._dge += map(itemgetter(3), dd)


for _f in _ROW_COLS:
    setattr(RecordColumns, _f, _column(_f))
del _f


class InstrRecord:
    """One executed instruction or DMA transfer.

    ``writes`` / ``reads`` are tuples of ``(buf_id, lo, hi, (offset, shape, strides))``: the buffer, the element
    range ``[lo, hi)`` the operand's view can touch, and the view's access pattern (element units), from which
    the scheduler tells apart two strided tiles whose extents overlap but whose elements do not."""

    __slots__ = ("id", "opcode", "engine", "writes", "reads", "cycles", "ns", "loc", "flops", "nbytes", "rows",
                 "part0", "pre", "parts", "dge")

    def __init__(self, id, opcode, engine, writes, reads, cycles, ns, loc, flops, nbytes, rows=0, part0=0,
                 pre=0.0, parts=None, dge=None):
        self.id = id
        self.opcode = opcode
        self.engine = engine
        self.writes = writes
        self.reads = reads
        self.cycles = cycles
        self.ns = ns
        self.loc = loc
        self.flops = flops
        self.nbytes = nbytes
        self.rows = rows        # DMA: partitions (rows) of the transfer, which set the DMA engines it uses
        self.part0 = part0      # DMA: first on-chip partition of the transfer
        self.pre = pre          # Tensor Engine: stationary-load cycles (0 for other instructions)
        self.parts = parts      # core_barrier: the core ids it waits for (None for other instructions)
        self.dge = dge          # DMA: (DGE mode, queue number, DGE cost) from isa/dma_dge.py, or None (none, no queue)

    def __repr__(self):
        where = f" @{os.path.basename(self.loc[0])}:{self.loc[1]}" if self.loc else ""
        cost = f"{self.cycles:.0f} cyc" if self.cycles is not None else f"{self.ns:.0f} ns"
        return f"<{self.id} {self.engine}.{self.opcode} {cost}{where}>"


class Records(Sequence):
    """``core.instructions``: the rows of a :class:`RecordColumns` as :class:`InstrRecord` objects, in program
    order.  A row's object is made the first time any row at or after it is read and kept from then on (the same
    object at every later read); rows recorded later are made when next read.  The length is the columns'."""

    __slots__ = ("_c", "_m", "_op", "_di")

    def __init__(self, cols: RecordColumns):
        self._c = cols
        self._m: list[InstrRecord] = []     # the rows made so far
        self._op = 0                        # operand index of the first row not made yet
        self._di = 0                        # its position in the ``dma`` column

    def __len__(self):
        return len(self._c)

    def _sync(self) -> list:
        """The records of every row, making the rows recorded since the last read (from the columns, and from the
        rows still pending without making them columns: a multi-program launch reads each record as it is made)."""
        c = self._c
        m = self._m
        i = len(m)
        n = len(c)
        if i == n:
            return m
        nc = len(c._eng)                    # rows already made columns; the rest are in ``pend``
        loc = c.loc
        bar = c.bar
        p = self._op
        # the operands as one tuple, so that a row's writes and reads are slices of it (one object each)
        ops = tuple(zip(c.b, c.lo, c.hi, c.v)) if p == 0 else \
            tuple(zip(c.b[p:], c.lo[p:], c.hi[p:], c.v[p:]))
        o = 0
        di = self._di                       # DMA rows among the rows made: the next one's place in ``dma``
        rec = InstrRecord
        add = m.append
        if i < nc:
            eng, cost, pre, opcode, flops, nw, nops = c._eng, c._cost, c._pre, c._opcode, c._flops, c._nw, c._nops
            dma, rows, part0, nbytes, dge = c._dma, c._rows, c._part0, c._nbytes, c._dge
            nd = len(dma)
            nxt = dma[di] if di < nd else nc
            for k in range(i, nc):
                a = o + nw[k]
                e = o + nops[k]
                if k == nxt:
                    add(rec(k, opcode[k], eng[k], ops[o:a], ops[a:e], None, cost[k], loc[k], flops[k], nbytes[di],
                            rows[di], part0[di], pre[k], None, dge[di]))
                    di += 1
                    nxt = dma[di] if di < nd else nc
                else:
                    add(rec(k, opcode[k], eng[k], ops[o:a], ops[a:e], cost[k], None, loc[k], flops[k], 0, 0, 0,
                            pre[k], bar.get(k) if bar else None))
                o = e
        pend = c.pend
        for k in range(max(i, nc), n):
            eng, cost, pre, opcode, flops, nw, nops, dma = pend[k - nc]
            a = o + nw
            e = o + nops
            if dma is not None:
                add(rec(k, opcode, eng, ops[o:a], ops[a:e], None, cost, loc[k], flops, dma[0], dma[1], dma[2], pre,
                        None, dma[3]))
                di += 1
            else:
                add(rec(k, opcode, eng, ops[o:a], ops[a:e], cost, None, loc[k], flops, 0, 0, 0, pre,
                        bar.get(k) if bar else None))
            o = e
        self._op += o
        self._di = di
        return m

    def __getitem__(self, k):
        return self._sync()[k]

    def __iter__(self):
        return iter(self._sync())

    # as the list ``core.instructions`` used to be: equal to a list (or Records) of the same records, and
    # concatenated into a list
    def __eq__(self, other):
        if isinstance(other, (list, Records)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None

    def __add__(self, other):
        return list(self) + list(other)

    def __radd__(self, other):
        return list(other) + list(self)

    def __repr__(self):
        return f"<Records: {len(self)} instructions>"
