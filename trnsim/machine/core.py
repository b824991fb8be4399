"""A NeuronCore: its SBUF and PSUM, the chip HBM it shares, and the in-order record of what it executed.

Instructions execute eagerly in program order (so results are those of sequential semantics).  Each is recorded
with the engine it ran on, its cost in engine cycles (or ns for DMA), the buffer ranges it read and wrote and the
user's source line: the input of the timing scheduler.
"""

from __future__ import annotations

import weakref

import numpy as np

from .. import config
from ..isa.tensor_engine import matmul_f32 as _matmul_f32
from ..memory import HBM, ON_CHIP, PSUM, SBUF, Buffer, MemorySpace
from ..targets import Target, get_target
from .capacity import Occupancy
from .record_cols import InstrRecord, RecordColumns, Records
from .replay_gen import touch_plain

__all__ = ["NeuronCore", "Chip", "InstrRecord"]


def _ranges(tensors, views, cols=None):
    """The recorded operands; equal access patterns are one tuple object (``views`` interns them per core), so
    the scheduler tells distinct patterns apart by identity (``sched_fast.encode``).  With ``cols`` (a
    :class:`RecordColumns`) each operand is also appended to its operand columns."""
    out = []
    for t in tensors:
        v = (t.offset, t.shape, t.strides) if t._rv is None else t._rv.sched(t)
        v = views.setdefault(v, v)
        bid = t.buf.id
        e = t._ext
        if e is None:
            e = t.extent()
        lo, hi = e
        out.append((bid, lo, hi, v))
        if cols is not None:
            cols.b.append(bid)
            cols.lo.append(lo)
            cols.hi.append(hi)
            cols.v.append(v)
    return tuple(out)


def _cols_add(c, engine, cost, pre, opcode, flops, loc, nw, nr, dma=None):
    """An instruction's row (``record_cols.ROW_FIELDS``; ``dma`` None or ``(nbytes, rows, part0, dge)``) and line."""
    c.pend.append((engine, cost, pre, opcode, flops, nw, nw + nr, dma))
    c.loc.append(loc)


_LIVE: "weakref.WeakSet[NeuronCore]" = weakref.WeakSet()   # cores alive, for progress reporting


def live_cores():
    """The NeuronCores currently alive (a progress bar sums their instruction counts)."""
    return list(_LIVE)


class Chip:
    """A Trainium chip: its cores share the HBM."""

    def __init__(self, target: Target | str | None = None):
        self.target = get_target(target)
        self.hbm = MemorySpace(HBM, self.target.hbm_bytes_per_chip, name="hbm")


class NeuronCore:
    """One logical NeuronCore executing NKI instructions."""

    def __init__(self, target: Target | str | None = None, *, execute: bool = True, precise: bool | None = None,
                 strict: bool | None = None, chip: Chip | None = None, core_id: int = 0, record: bool = True):
        self.target = get_target(target)
        self.chip = chip or Chip(self.target)
        self.core_id = core_id
        self.execute = execute
        if precise is None:
            precise = config.precise_fp
        self.precise = precise
        if strict is None:
            strict = config.strict_uninit
        self.strict = strict
        tg = self.target
        self.sbuf = MemorySpace(SBUF, tg.sbuf_partition_bytes, tg.sbuf_partitions, align=4, name="sbuf",
                                overcommit=True)
        self.psum = MemorySpace(PSUM, tg.psum_partition_bytes, tg.psum_partitions, align=4,
                                bank_bytes=tg.psum_bank_bytes, name="psum", overcommit=True)
        self.occupancy = Occupancy(log=not record)   # live ranges of on-chip tiles (capacity.py)
        # buf_id -> (memory kind, bytes per partition (total bytes for HBM), partitions, itemsize): what the
        # scheduler needs about each buffer without keeping the buffer (and its memory) alive
        self.buffers: dict[int, tuple] = {}
        _LIVE.add(self)
        self._record = record
        self._views: dict = {}    # access pattern -> its one tuple object (_ranges)
        self.issue_cache: dict = {}   # operand layout -> records to replay (trnsim/kernels/issue_cache.py)
        # whether instructions issued on this core go through that cache (TRNSIM_ISSUE_CACHE), read once per core:
        # the check is on every instruction's path, and a configuration read costs ~0.5 us
        self.issue_cache_on = config.issue_cache
        self.columns = RecordColumns()   # the record, column-wise (record_cols.py)
        # the record as InstrRecord objects, made from the columns when read (record_cols.Records)
        self.instructions: Records = Records(self.columns)
        self.act_reduce_regs = None
        self.programs = None     # the launch's Programs while a multi-program launch runs (programs.py)
        self.program = None      # this core's Program in it

    # -- memory -------------------------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        """Whether this core records its instructions into record columns (the scheduler's input)."""
        return self._record

    @property
    def interned_patterns(self) -> int:
        """How many distinct access patterns the core has interned (:meth:`intern_pattern`)."""
        return len(self._views)

    def intern_pattern(self, v):
        """The core's one object equal to access pattern ``v`` (``v`` itself the first time): records hold
        each distinct pattern once."""
        return self._views.setdefault(v, v)

    def space(self, kind):
        if kind == SBUF:
            return self.sbuf
        if kind == PSUM:
            return self.psum
        return self.chip.hbm

    def allocate(self, shape, dtype, kind, name="", address=None, block=0, block_shape=None,
                 native=False) -> Buffer:
        """A new buffer.  On chip, ``address`` places it explicitly: ``(partition, byte address)``, or a callable
        ``(block index, partitions, bytes per partition) -> (partition, byte address)`` for block tensors.  A block
        tensor (``[B, par_dim(P), F]``, laid out ``[P, B, F]``) passes ``block`` (elements per partition of one
        block, prod(F)) and ``block_shape`` (B): each block is a tile with its own live range.  ``native``: an HBM
        buffer held in its dtype's own encoding (``Buffer``)."""
        track = kind == PSUM or self.strict
        if address is None and not block and (kind == SBUF or kind == PSUM) and type(shape) is tuple:
            # a plain tile (the common case, every iteration of a loop body): Buffer.tile makes the same buffer and
            # its entry below
            return Buffer.tile(self.sbuf if kind == SBUF else self.psum, dtype, shape, name, self.execute, track,
                               self.buffers)
        else:
            buf = Buffer(self.space(kind), dtype, shape, name=name, execute=self.execute, track_written=track,
                         address=address, block=block, block_shape=block_shape, native=native)
        self.buffers[buf.id] = (buf.kind, buf.bytes_pp, buf.partitions, dtype.itemsize)
        return buf

    def wrap_input(self, array: np.ndarray | None, shape, dtype, name="", native=False) -> Buffer:
        """An HBM buffer holding a kernel input (``array`` already in the dtype's storage type, or in its real
        encoding when ``native``: see ``Buffer``)."""
        data = None
        if self.execute:
            data = np.ascontiguousarray(array, dtype=dtype.np if native else dtype.storage).reshape(-1)
        buf = Buffer(self.chip.hbm, dtype, shape, name=name, data=data, execute=self.execute, native=native)
        self.buffers[buf.id] = (buf.kind, buf.bytes_pp, buf.partitions, dtype.itemsize)
        return buf

    # -- computing and recording ----------------------------------------------------------------------
    def compute(self, values_fn, *args):
        """Run an instruction's numerics ``values_fn(*args)`` (nothing in a shape-only run)."""
        if self.execute:
            values_fn(*args)

    def record(self, opcode, engine, writes, reads, cycles, loc, flops=0, pre=0.0):
        """Record an engine instruction of ``cycles`` engine cycles (``pre``: Tensor Engine stationary-load
        cycles, which the scheduler overlaps with the previous multiply)."""
        self._occupy(writes, reads, loc)
        if self._record:
            # the columns appended inline (no record object: record_cols.Records makes it when read); this is
            # the hot path of every instruction the issue cache does not replay
            cols = self.columns
            views = self._views
            cb, clo, chi, cv = cols.b, cols.lo, cols.hi, cols.v
            n0 = len(cb)
            for t in writes:
                v = (t.offset, t.shape, t.strides) if t._rv is None else t._rv.sched(t)
                v = views.setdefault(v, v)
                lo, hi = t._ext or t.extent()
                cb.append(t.buf.id)
                clo.append(lo)
                chi.append(hi)
                cv.append(v)
            nw = len(cb) - n0
            for t in reads:
                v = (t.offset, t.shape, t.strides) if t._rv is None else t._rv.sched(t)
                v = views.setdefault(v, v)
                lo, hi = t._ext or t.extent()
                cb.append(t.buf.id)
                clo.append(lo)
                chi.append(hi)
                cv.append(v)
            cols.pend.append((engine, cycles, pre, opcode, flops, nw, len(cb) - n0, None))   # (its row)
            cols.loc.append(loc)
            if self.programs is not None:
                self.programs.issued(self, self.instructions[-1], writes, reads)
        elif self.programs is not None:
            views = self._views
            rec = InstrRecord(len(self.instructions), opcode, engine, _ranges(writes, views),
                              _ranges(reads, views), cycles, None, loc, flops, 0, 0, 0, pre)
            self.programs.issued(self, rec, writes, reads)

    def record_dma(self, opcode, writes, reads, nbytes, rows, ns, loc, part0=0, dge=None):
        """Record a DMA transfer of ``nbytes`` over ``rows`` partitions starting at partition ``part0``, costing
        ``ns`` in isolation (``trnsim.isa.dma.dma_cost_ns``); ``dge``: its descriptor generation and queue
        ``(mode, queue, cost)`` (``trnsim.isa.dma_dge.dge_of``), None for none and no queue."""
        self._occupy(writes, reads, loc)
        if self._record:
            cols = self.columns
            views = self._views
            nw = len(_ranges(writes, views, cols))
            nr = len(_ranges(reads, views, cols))
            if dge is not None and dge[0] == 0 and dge[1] < 0:
                dge = None
            _cols_add(cols, "dma", ns, 0.0, opcode, 0, loc, nw, nr, (nbytes, rows, part0, dge))
            if self.programs is not None:
                self.programs.issued(self, self.instructions[-1], writes, reads)
        elif self.programs is not None:
            views = self._views
            if dge is not None and dge[0] == 0 and dge[1] < 0:
                dge = None
            rec = InstrRecord(len(self.instructions), opcode, "dma", _ranges(writes, views), _ranges(reads, views),
                              None, ns, loc, 0, nbytes, rows, part0, dge=dge)
            self.programs.issued(self, rec, writes, reads)

    # -- replaying a recorded layout (the kernel front end's issue cache) -------------------------------
    def operand_template(self, t, fixed):
        """``(occupancy code, (lo, hi, view) or None)`` of operand ``t`` for :meth:`replay`: the code says how
        the operand touches the on-chip live ranges (0: not on chip, 1: a plain tile, 2: a block tensor; the
        layout fixes the buffer's memory and blocks), the triple is its extent and interned access pattern when
        the cached layout fixes its offset, shape and strides (so they are the same at every replay)."""
        buf = t.buf
        oc = (2 if buf.block else 1) if buf.kind in ON_CHIP else 0
        if not fixed:
            return (oc, None)
        v = (t.offset, t.shape, t.strides) if t._rv is None else t._rv.sched(t)
        v = self._views.setdefault(v, v)
        lo, hi = t._ext or t.extent()
        return (oc, (lo, hi, v))

    def replay(self, opcode, engine, wl, rl, cost, loc, flops, pre, leaves, dma):
        """:meth:`record` (``dma`` None) or :meth:`record_dma` (``dma = (nbytes, rows, part0, dge)``, ``cost`` in ns)
        of an instruction whose operands are ``leaves[i]`` for the ``(i, occupancy code, template)`` triples of
        ``wl`` (writes) and ``rl`` (reads), from :meth:`operand_template`: the same occupancy, record and columns
        as the call it stands for."""
        if not self._record or self.programs is not None:
            writes = tuple([leaves[x[0]] for x in wl])
            reads = tuple([leaves[x[0]] for x in rl])
            if dma is None:
                self.record(opcode, engine, writes, reads, cost, loc, flops, pre)
            else:
                self.record_dma(opcode, writes, reads, dma[0], dma[1], cost, loc, dma[2], dma[3])
            return
        occ = self.occupancy
        s = occ.seq
        cols = self.columns
        cb, clo, chi, cv = cols.b, cols.lo, cols.hi, cols.v
        sb, ps = self.sbuf, self.psum
        for lst in (wl, rl):
            for i, oc, tm in lst:
                t = leaves[i]
                buf = t.buf
                bid = buf.id
                if oc == 1:
                    rg = buf.live           # (the tile's entry kept on it: replay_gen.touch_plain)
                    if rg is None or (buf.space is not sb and buf.space is not ps):
                        touch_plain(occ, buf, loc, sb, ps)
                    else:
                        rg[1] = s
                        rg[3] = loc
                elif oc:
                    occ.touch(t, loc)
                if tm is None:
                    v = (t.offset, t.shape, t.strides) if t._rv is None else t._rv.sched(t)
                    v = self._views.setdefault(v, v)
                    lo, hi = t._ext or t.extent()
                else:
                    lo, hi, v = tm
                cb.append(bid)
                clo.append(lo)
                chi.append(hi)
                cv.append(v)
        occ.seq = s + 1
        if dma is not None:
            dge = dma[3]
            if dge is not None and dge[0] == 0 and dge[1] < 0:
                dma = (dma[0], dma[1], dma[2], None)
        nw = len(wl)
        cols.pend.append((engine, cost, pre, opcode, flops, nw, nw + len(rl), dma))   # (its row)
        cols.loc.append(loc)

    def _occupy(self, writes, reads, loc):
        """The instruction touches its on-chip operands (their live ranges, ``capacity.Occupancy``); a plain
        (non-block) tile's range is updated here inline, the rest by ``Occupancy.touch``."""
        occ = self.occupancy
        ranges = occ.ranges
        s = occ.seq
        for ts in (writes, reads):
            for t in ts:
                buf = t.buf
                if buf.kind in ON_CHIP:
                    if buf.block:
                        if buf.space is self.sbuf or buf.space is self.psum:
                            occ.touch(t, loc)
                        continue
                    k = (buf.id, -1)
                    r = ranges.get(k)
                    if r is None:
                        # only this core's tiles: a sendrecv reads the peer program's tile, which lives (and may be
                        # placed at the same address as one of ours) in the peer core's SBUF
                        if buf.space is self.sbuf or buf.space is self.psum:
                            occ.first(k, buf, loc)
                    else:
                        r[1] = s
                        r[3] = loc
        occ.seq = s + 1
        if occ.log is not None:          # no record: the operands the reordered capacity check needs
            occ.log.append((_ranges(writes, self._views), _ranges(reads, self._views), loc))

    def check_capacity(self):
        """Refuse the kernel (:class:`~trnsim.machine.capacity.CapacityError`) if its on-chip tiles, live from
        first to last access, exceed SBUF or PSUM somewhere both in program order and in the order the compiler's
        scheduler may choose (capacity.py), or explicitly placed tiles overlap while live."""
        self.occupancy.check(self.target, self.instructions if self._record else None)

    # -- synchronisation ----------------------------------------------------------------------------
    def barrier(self, participants, loc=None, data=None, engine="gpsimd"):
        """``core_barrier``: wait until every core (program of the launch) in ``participants`` reaches a barrier,
        then record a ``core_barrier`` instruction on ``engine``.  ``data`` (the shared tensor the barrier
        synchronises on) is recorded as written by it, so this core's later accesses to it wait for the barrier.
        The scheduler starts the barrier on every participant when the last one arrives, plus the semaphore
        latency; its engine time is the minimum instruction interval (trnsim's assumption: the remote semaphore
        update and local wait are not measured separately).  In a launch of one program only ``(0,)`` completes."""
        parts = sorted({int(x) for x in participants})
        if self.programs is not None:
            self.programs.barrier(self, parts, loc)
        elif parts != [self.core_id]:
            from .programs import BarrierError
            raise BarrierError(f"core_barrier: cores={parts} in a launch of one program: no other program runs "
                               "this kernel, so the barrier would wait forever (launch it on more cores, e.g. "
                               "kernel[2](...))", "core_barrier", "cores", parts, [self.core_id], loc)
        writes = (data,) if data is not None else ()
        self.occupancy.fence(loc, "core_barrier")       # the compiler moves nothing across a barrier
        self._occupy(writes, (), loc)
        self.occupancy.fence(loc, "core_barrier")
        if self._record:
            cols = self.columns
            cols.bar[len(cols)] = tuple(parts)
            w = _ranges(writes, self._views, cols)
            _cols_add(cols, engine, float(self.target.min_ii_cycles), 0.0, "core_barrier", 0, loc, len(w), 0)
            cols.barrier = True

    # -- arithmetic helpers -------------------------------------------------------------------------
    # both operands are float32 arrays: fp32 products and sums (nc_matmul writes the product straight into its
    # PSUM tile when this is the default)
    matmul_f32 = staticmethod(_matmul_f32)

    # -- summary ------------------------------------------------------------------------------------
    def instruction_counts(self):
        out = {}
        for r in self.instructions:
            k = f"{r.engine}.{r.opcode}"
            out[k] = out.get(k, 0) + 1
        return out
