"""The instruction record of a core kept column-wise as well, appended as each instruction is recorded, so that
the compiled scheduler (``sched_fast``) reads lists instead of the fields of a million ``InstrRecord`` objects.

One entry per instruction in ``head``: the tuple ``(eng, cost, pre, opcode, flops, loc, nw, nops)`` (``cost``:
engine cycles, or ns for DMA; ``nw``: how many of its operands it writes); DMA transfers also append their row
index to ``dma`` and their ``rows``/``part0``/``nbytes``; a ``core_barrier`` sets ``barrier``.  One entry per
operand in ``ops``, writes first then reads, as ``InstrRecord.writes``/``reads`` hold them: the tuple ``(b, lo,
hi, v)`` (buffer id, element range, the interned access pattern).  One append of a tuple per instruction (and one
extend per operand list) instead of a dozen appends: the record path is the hot path of every instruction.  The
properties give each field as one column.  The records stay the API; these columns are only a faster way to read
them.
"""

from __future__ import annotations

__all__ = ["RecordColumns", "HEAD_FIELDS", "OP_FIELDS"]

HEAD_FIELDS = ("eng", "cost", "pre", "opcode", "flops", "loc", "nw", "nops")
OP_FIELDS = ("b", "lo", "hi", "v")


def _unzip(rows, width):
    return tuple(zip(*rows)) if rows else ((),) * width


def _field(name, src, k, width):
    def get(self):
        return _unzip(getattr(self, src), width)[k]
    get.__name__ = name
    return property(get, doc=f"the ``{name}`` column")


class RecordColumns:
    __slots__ = ("head", "ops", "dma", "rows", "part0", "nbytes", "barrier")

    def __init__(self):
        self.head = []
        self.ops = []
        self.dma = []
        self.rows = []
        self.part0 = []
        self.nbytes = []
        self.barrier = False

    def __len__(self):
        return len(self.head)

    def heads(self):
        """The per-instruction columns, ``HEAD_FIELDS`` in order (tuples)."""
        return _unzip(self.head, len(HEAD_FIELDS))

    def operands(self):
        """The per-operand columns, ``OP_FIELDS`` in order (tuples)."""
        return _unzip(self.ops, len(OP_FIELDS))


for _k, _f in enumerate(HEAD_FIELDS):
    setattr(RecordColumns, _f, _field(_f, "head", _k, len(HEAD_FIELDS)))
for _k, _f in enumerate(OP_FIELDS):
    setattr(RecordColumns, _f, _field(_f, "ops", _k, len(OP_FIELDS)))
