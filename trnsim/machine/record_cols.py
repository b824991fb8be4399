"""The instruction record of a core kept column-wise as well, appended as each instruction is recorded, so that
the compiled scheduler (``sched_fast``) reads lists instead of the fields of a million ``InstrRecord`` objects.

One entry per instruction: ``eng``, ``cost`` (engine cycles, or ns for DMA), ``pre``, ``opcode``, ``flops``,
``loc``, ``nw`` (how many of its operands it writes) and ``nops``; DMA transfers also append their row index to
``dma`` and their ``rows``/``part0``/``nbytes``/``dge`` (``InstrRecord.dge``); a ``core_barrier`` sets ``barrier``.  One entry per operand,
writes first then reads, as ``InstrRecord.writes``/``reads`` hold them: ``b`` (buffer id), ``lo``, ``hi``, ``v``
(the interned access pattern).  The records stay the API; these columns are only a faster way to read them.
"""

from __future__ import annotations

__all__ = ["RecordColumns"]


class RecordColumns:
    __slots__ = ("eng", "cost", "pre", "opcode", "flops", "loc", "nw", "nops", "dma", "rows", "part0", "nbytes",
                 "dge", "b", "lo", "hi", "v", "barrier")

    def __init__(self):
        for f in self.__slots__:
            setattr(self, f, [])
        self.barrier = False

    def __len__(self):
        return len(self.eng)
