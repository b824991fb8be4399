"""The Timeline: when each instruction and transfer ran, on which engine or DMA queue, and the figures people
read off it (total time, engine utilisation, MFU, MBU, DMA utilisation, peak SBUF/PSUM, critical path).

Rows are stored column-wise: each field reads as one list (``tl.start``, ``tl.deps``, ...), and
:meth:`Timeline.rows` yields :class:`Row` tuples for readers.  Times are ns from the launch.  A column's list is
made on its first read from the blocks of rows appended since (:meth:`Timeline.extend`): the scheduler appends
each core's results as NumPy arrays (``sched_fast.CoreColumns``), and a reader that needs only the total time or a
few columns never pays for turning a million rows of every column into Python objects.  The counters are likewise
computed on their first read.
"""

from __future__ import annotations

from collections import namedtuple

__all__ = ["Timeline", "Row", "ENGINES"]

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")

Row = namedtuple("Row", "index core id engine queue nqueues opcode start data_start end done work flops nbytes "
                        "hbm_bytes src dst loc deps bind")
Row.__doc__ = """One instruction or DMA transfer of a :class:`Timeline`.

``index`` is the row's position in the timeline; ``id`` the instruction's id on its core; ``queue`` the first DMA
queue of a transfer and ``nqueues`` how many it is spread over (-1 / 0 for engine instructions); ``start`` is when
the instruction was issued (for DMA, when its semaphore fired), ``data_start`` when data started moving (engines:
equal to ``start``), ``end`` when its engine or queues became free, ``done`` when its result was usable (``end``
plus the static overhead for a tiny instruction); ``work`` the engine time it used (a transfer's time on each of
its DMA queues, which may be spread over gaps between other transfers); ``src``/``dst`` the memories a transfer moves between;
``loc`` ``(file, line)`` of the kernel source or ``None``; ``deps`` the row indices it waited for; ``bind`` the row
(or -1) whose completion set its start: the critical-path link."""

_FIELDS = Row._fields[1:]
_COLUMNS = _FIELDS + ("dge",)


class _Column:
    """A column of :class:`Timeline` read as a list: made on the first read from the blocks appended so far, then
    kept in the instance (later appends extend it)."""

    def __init__(self, name):
        self.name = name

    def __get__(self, tl, owner=None):
        if tl is None:
            return self
        return tl._column(self.name)


class _DictBlock:
    """Rows given as ``{field: list}`` (:meth:`Timeline.extend`), their indices made into the timeline's.  The
    lists are copied when appended (the caller may reuse its own)."""

    def __init__(self, cols):
        self.cols = {f: list(v) if isinstance(v, (list, tuple)) else v for f, v in cols.items()}

    def __len__(self):
        return len(self.cols["start"])

    def column(self, f, base):
        cols = self.cols
        if f == "work" and "work" not in cols:      # optional: the engine time, by default end - data_start
            return [e - s for s, e in zip(cols["data_start"], cols["end"])]
        if f == "dge":
            dge = cols.get("dge") or ()
            return [(r + base,) + tuple(x) for r, *x in dge] if base else [tuple(x) for x in dge]
        v = cols[f]
        if base and f == "deps":
            return [tuple(d + base for d in ds) for ds in v]
        if base and f == "bind":
            return [b + base if b >= 0 else -1 for b in v]
        return list(v)


class Timeline:
    """Start/end times of every instruction of one launch, with counters and summary figures."""

    def __init__(self, target, core_ids=(0,), queues_per_core=16):
        self.target = target
        self.core_ids = tuple(core_ids)
        self.queues_per_core = queues_per_core
        self._n = 0
        # per column, the blocks appended since its list was made: (block, index of its first row)
        self._pending = {f: [] for f in _COLUMNS}
        # the columns are read as lists (``_Column``); ``dge``: descriptor generation of DMA transfers
        # (isa/dma_dge.py): (row, mode, unit, start, end), mode 1 swdge (on the GpSimd Engine, unit -1) or 2 hwdge
        # (hardware DGE block ``unit``, 0 or 1 per core)
        # counters: {(core, name): [(t_ns, value), ...]}; names "sbuf_bytes", "psum_bytes" (live bytes, all
        # partitions), "hbm_bytes_per_s" (HBM traffic binned over time); ``add_counters`` may append them as a
        # function that makes them, called on the first read
        self._counters: dict = {}
        self._counters_pending = []
        self.capacity = {"sbuf": target.sbuf_bytes, "psum": target.psum_bytes}
        self._cache = {}

    # -- building ---------------------------------------------------------------------------------
    def extend(self, cols):
        """Append rows given as ``{field: list}`` with every field of :class:`Row` but ``index`` (``work`` may be
        left out; ``dge``, the descriptor generations as ``(row, mode, unit, start, end)``, is optional);
        ``deps``, ``bind`` and the rows of ``dge`` are indices into these rows.  ``cols`` may also be a block
        object with ``len()`` and ``column(field, base)`` (the field's list for these rows, indices made into the
        timeline's by adding ``base``; ``field`` is also "dge"), as ``sched_fast.CoreColumns``: each column's
        list is then made when it is first read."""
        block = cols if hasattr(cols, "column") else _DictBlock(cols)
        base = self._n
        made = self.__dict__
        for f in _COLUMNS:
            if f in made:               # a column already read: extended now
                made[f].extend(block.column(f, base))
            else:
                self._pending[f].append((block, base))
        self._n = base + len(block)
        self._cache.clear()

    def _column(self, f):
        pend = self._pending[f]
        out = pend[0][0].column(f, pend[0][1]) if pend else []
        for block, base in pend[1:]:
            out.extend(block.column(f, base))
        self._pending[f] = []
        self.__dict__[f] = out
        return out

    @property
    def counters(self) -> dict:
        if self._counters_pending:
            pend, self._counters_pending = self._counters_pending, []
            for c in pend:
                self._counters.update(c() if callable(c) else c)
        return self._counters

    @counters.setter
    def counters(self, value):
        self._counters = value
        self._counters_pending = []

    def add_counters(self, counters):
        """Add counters: a dict ``{(core, name): points}``, or a function returning one (called when the counters
        are first read)."""
        self._counters_pending.append(counters)
        self._cache.clear()

    # -- reading ----------------------------------------------------------------------------------
    def __len__(self):
        return self._n

    def row(self, i) -> Row:
        return Row(i, *(getattr(self, f)[i] for f in _FIELDS))

    def rows(self):
        cols = [getattr(self, f) for f in _FIELDS]
        for i, vals in enumerate(zip(*cols)):
            yield Row(i, *vals)

    def __eq__(self, other):
        if not isinstance(other, Timeline):
            return NotImplemented
        return (self.target.name == other.target.name and self.core_ids == other.core_ids
                and all(getattr(self, f) == getattr(other, f) for f in _FIELDS) and self.dge == other.dge
                and self.counters == other.counters)

    __hash__ = None

    # -- figures ----------------------------------------------------------------------------------
    @property
    def total_ns(self) -> float:
        if "total" not in self._cache:
            self._cache["total"] = max(max(self.done, default=0.0), max(self.end, default=0.0))
        return self._cache["total"]

    @property
    def ncores(self) -> int:
        return max(1, len(self.core_ids))

    def busy_ns(self):
        """``{(core, engine): ns}`` the engine was occupied; for "dma", the time any DMA queue was moving data."""
        if "busy" in self._cache:
            return self._cache["busy"]
        out = {}
        dma_iv = {}
        for c, e, s, ds, en in zip(self.core, self.engine, self.start, self.data_start, self.end):
            if e == "dma":
                dma_iv.setdefault(c, []).append((ds, en))
            else:
                out[(c, e)] = out.get((c, e), 0.0) + (en - s)
        for c, iv in dma_iv.items():
            out[(c, "dma")] = union_length(iv)
        for r, mode, _, s, en in self.dge:          # software DGE occupies the GpSimd Engine
            if mode == 1:
                k = (self.core[r], "gpsimd")
                out[k] = out.get(k, 0.0) + (en - s)
        self._cache["busy"] = out
        return out

    @property
    def engine_active(self) -> dict:
        """Fraction of the total time each engine was busy (mean over cores)."""
        tot = self.total_ns
        busy = self.busy_ns()
        res = {}
        for e in ENGINES:
            s = sum(v for (c, en), v in busy.items() if en == e)
            res[e] = s / (tot * self.ncores) if tot > 0 else 0.0
        return res

    def flops_col(self):
        return self.flops

    @property
    def tensor_flops(self) -> float:
        """Flops done on the Tensor Engine (what MFU counts; other engines' element operations are not)."""
        return float(sum(f for f, e in zip(self.flops_col(), self.engine) if e == "tensor"))

    @property
    def peak_flops_per_s(self) -> float:
        """Tensor Engine peak of the launched cores: 79 TFLOPS per core on trn2/trn3 (docs/hardware.md), the
        target's BF16 rate on trn1."""
        return self.target.tensor_bf16_flops_per_core * self.ncores

    @property
    def mfu(self) -> float:
        """Model flops utilisation: Tensor Engine flops over peak x total time."""
        tot = self.total_ns
        return self.tensor_flops / (self.peak_flops_per_s * tot * 1e-9) if tot > 0 else 0.0

    @property
    def hbm_bytes_total(self) -> float:
        return float(sum(self.hbm_bytes))

    @property
    def hbm_peak_bytes_per_s(self) -> float:
        """HBM bandwidth available to the launched cores: the chip peak (docs/hardware.md, chip pages) divided
        evenly among the chip's physical cores."""
        tg = self.target
        return tg.hbm_peak_bytes_per_s / tg.physical_cores_per_chip * self.ncores

    @property
    def mbu(self) -> float:
        """Memory bandwidth utilisation: HBM bytes moved over the available HBM bandwidth x total time."""
        tot = self.total_ns
        return self.hbm_bytes_total / (self.hbm_peak_bytes_per_s * tot * 1e-9) if tot > 0 else 0.0

    @property
    def dma_utilisation(self) -> float:
        """Mean fraction of the total time the DMA queues were moving data."""
        tot = self.total_ns
        if tot <= 0:
            return 0.0
        s = sum(w * nq for e, w, nq in zip(self.engine, self.work, self.nqueues) if e == "dma")
        return s / (tot * self.queues_per_core * self.ncores)

    def peak_bytes(self, memory: str) -> int:
        """Peak live bytes of ``memory`` ("sbuf" or "psum", all partitions), over cores."""
        best = 0
        for (c, name), pts in self.counters.items():
            if name == f"{memory}_bytes" and pts:
                best = max(best, max(v for _, v in pts))
        return best

    def critical_path(self):
        """Row indices of the critical path, last first: from the row that finishes last, each row's
        binding predecessor."""
        if not len(self):
            return []
        last = max(range(len(self)), key=lambda i: (self.done[i], -i))
        path = []
        i = last
        seen = set()
        while i >= 0 and i not in seen:
            seen.add(i)
            path.append(i)
            i = self.bind[i]
        return path

    def critical_path_spans(self):
        """``[(row, s, t)]`` along the critical path, last first: the part ``[s, t)`` of the time each row holds,
        from its start (a DMA's: its data start less the fixed cost, not the time it queued behind earlier
        transfers) to the ``s`` of the row after it."""
        if "spans" in self._cache:
            return self._cache["spans"]
        path = self.critical_path()
        out = []
        t_after = self.done[path[0]] if path else 0.0
        fixed = self.target.dma_fixed_ns
        for i in path:
            s = self.start[i]
            if self.engine[i] == "dma":
                s = max(s, self.data_start[i] - fixed)
            s = min(s, t_after)
            out.append((i, s, t_after))
            t_after = s
        self._cache["spans"] = out
        return out

    def critical_path_share(self) -> dict:
        """Fraction of the total time the critical path spends on each engine, each instruction from its start to
        its result (its fixed latency after the cost included: static overhead and access requests); "wait": the
        gaps between its instructions (semaphores, descriptor generation before a transfer); a DMA's fixed cost
        counts as "dma"."""
        if "crit" in self._cache:
            return self._cache["crit"]
        tot = self.total_ns
        share = {e: 0.0 for e in ENGINES}
        share["wait"] = 0.0
        for i, s, t_after in self.critical_path_spans():
            e = self.engine[i]
            share[e] = share.get(e, 0.0) + max(0.0, min(self.done[i], t_after) - s)
            p = self.bind[i]
            share["wait"] += max(0.0, s - (self.done[p] if p >= 0 else 0.0))
        if tot > 0:
            share = {k: v / tot for k, v in share.items()}
        self._cache["crit"] = share
        return share

    def by_source_line(self, top=None):
        """``[(loc, engine, count, busy_ns)]`` sorted by busy time: where the time went, per kernel line."""
        agg = {}
        for e, w, loc in zip(self.engine, self.work, self.loc):
            k = (loc, e)
            c, b = agg.get(k, (0, 0.0))
            agg[k] = (c + 1, b + w)
        out = sorted(((k[0], k[1], c, b) for k, (c, b) in agg.items()), key=lambda r: -r[3])
        return out[:top] if top else out

    def summary(self) -> dict:
        """The summary figures as a dict."""
        return {
            "target": self.target.name,
            "cores": self.ncores,
            "instructions": len(self),
            "total_ns": self.total_ns,
            "engine_active": self.engine_active,
            "flops": self.tensor_flops,
            "mfu": self.mfu,
            "hbm_bytes": self.hbm_bytes_total,
            "mbu": self.mbu,
            "dma_utilisation": self.dma_utilisation,
            "peak_sbuf_bytes": self.peak_bytes("sbuf"),
            "sbuf_capacity_bytes": self.capacity["sbuf"],
            "peak_psum_bytes": self.peak_bytes("psum"),
            "psum_capacity_bytes": self.capacity["psum"],
            "critical_path_share": self.critical_path_share(),
        }


def union_length(iv):
    """The length of the union of the intervals ``iv`` (``[(start, end)]``, sorted in place)."""
    iv.sort()
    tot = 0.0
    cs = ce = None
    for s, e in iv:
        if cs is None:
            cs, ce = s, e
        elif s > ce:
            tot += ce - cs
            cs, ce = s, e
        elif e > ce:
            ce = e
    if cs is not None:
        tot += ce - cs
    return tot


for _f in _COLUMNS:
    setattr(Timeline, _f, _Column(_f))
del _f
