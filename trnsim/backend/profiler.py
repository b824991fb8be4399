"""``trnsim.profile_torch()``: one row per device op on the simulated clock.

Rows are recorded as :class:`TorchOpRow`; :meth:`TorchProfile.timeline` gives the same rows as the machine's
``Timeline`` type, for the kernel profiler's trace export, PNG and summary.
"""

from __future__ import annotations

import contextlib
import dataclasses

from ..fileio import atomic_write_json
from .device_state import STATE


@dataclasses.dataclass(frozen=True)
class TorchOpRow:
    op: str
    shapes: tuple
    dtypes: tuple
    start_ns: float
    end_ns: float
    kind: str          # "native" | "estimated" | "fallback"
    bytes: int
    flops: float
    source: str        # file:line of the user's call

    @property
    def duration_ns(self):
        return self.end_ns - self.start_ns


class TorchProfile:
    def __init__(self):
        self.rows: list[TorchOpRow] = []
        self.compiles = []     # torch.compile(backend="neuron") graph compiles inside the block (compile/stats.py)
        self.kernels = []      # NKI kernel calls on the device (nki_bridge.KernelLaunchRecord), one per nki:: row

    def add_kernel(self, rec):
        self.kernels.append(rec)

    def add(self, op, shapes, dtypes, start, end, kind, nbytes, flops, source):
        self.rows.append(TorchOpRow(op, shapes, dtypes, start, end, kind, int(nbytes), float(flops), source))

    @property
    def total_ns(self):
        if not self.rows:
            return 0.0
        return self.rows[-1].end_ns - self.rows[0].start_ns

    def by_op(self):
        """``{op: (calls, total ns, kind)}``, slowest first."""
        agg = {}
        for r in self.rows:
            c, t, _ = agg.get(r.op, (0, 0.0, r.kind))
            agg[r.op] = (c + 1, t + r.duration_ns, r.kind)
        return dict(sorted(agg.items(), key=lambda kv: -kv[1][1]))

    def summary(self, top=20):
        lines = [f"{'op':<48} {'calls':>6} {'sim time (us)':>14} {'%':>6}  kind"]
        tot = sum(r.duration_ns for r in self.rows) or 1.0
        for op, (c, t, kind) in list(self.by_op().items())[:top]:
            lines.append(f"{op:<48} {c:>6} {t / 1e3:>14.2f} {100 * t / tot:>6.1f}  {kind}")
        lines.append(f"total simulated device time: {tot / 1e3:.2f} us over {len(self.rows)} ops")
        if self.kernels:
            hits = sum(1 for k in self.kernels if k.hit)
            lines.append(f"NKI kernels: {len(self.kernels)} calls, per-specialisation cache {hits} hits, "
                         f"{len(self.kernels) - hits} misses")
        if self.compiles:
            from .compile.stats import summary as compile_summary
            lines.append(compile_summary(self.compiles))
        return "\n".join(lines)

    def to_chrome_trace(self, path=None):
        """Chrome/Perfetto trace events (one process row "neuron:0 (simulated)")."""
        ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "neuron:0 (simulated)"}}]
        for r in self.rows:
            ev.append({"name": r.op, "ph": "X", "pid": 0, "tid": 0, "ts": r.start_ns / 1e3,
                       "dur": r.duration_ns / 1e3, "cat": r.kind,
                       "args": {"shapes": [list(s) for s in r.shapes], "dtypes": list(r.dtypes),
                                "bytes": r.bytes, "flops": r.flops, "source": r.source}})
        for k in self.kernels:         # each NKI kernel's instructions, one thread row per engine / DMA queue
            for r in k.timeline.rows():
                lane = f"{k.name} {r.engine}" + (f" q{r.queue}" if r.engine == "dma" else "")
                ev.append({"name": r.opcode, "ph": "X", "pid": 1, "tid": lane, "ts": (k.start_ns + r.start) / 1e3,
                           "dur": max(r.end - r.start, 0.0) / 1e3, "cat": "nki",
                           "args": {"source": f"{r.loc[0]}:{r.loc[1]}" if r.loc else "", "core": r.core}})
        if self.kernels:
            ev.append({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "neuron:0 NKI kernels"}})
        doc = {"traceEvents": ev}
        if path is not None:       # atomic: pytest-xdist workers may write the same path
            atomic_write_json(path, doc)
        return doc

    def timeline(self):
        """The rows as a ``trnsim.machine.Timeline`` (one row per op on core 0), so the kernel profiler's trace
        export, PNG and summary work on it.  Matmul-family ops sit on the "tensor" row, CPU fallbacks on "dma"
        (their cost is the host transfer), everything else on "vector"; the opcode carries the kind when it is
        not native."""
        from ..machine import Timeline
        tl = Timeline(STATE.target, (0,), queues_per_core=STATE.target.dma_engines_per_core)
        cols = {f: [] for f in ("core", "id", "engine", "queue", "nqueues", "opcode", "start", "data_start", "end",
                                "done", "flops", "nbytes", "hbm_bytes", "src", "dst", "loc", "deps", "bind")}
        t0 = self.rows[0].start_ns if self.rows else 0.0
        kern = {k.row: k for k in self.kernels}
        for i, r in enumerate(self.rows):
            k = kern.get(i)
            if k is not None:       # an NKI kernel call: its own instructions, on their engines and DMA queues
                _add_kernel_rows(cols, k, k.start_ns - t0, len(cols["start"]))
                continue
            mm = r.op.rpartition("::")[2] in _TENSOR_OPS       # rows name their op with its namespace
            eng = "dma" if r.kind == "fallback" else ("tensor" if mm else "vector")
            file, _, line = r.source.rpartition(":")
            n = len(cols["start"])
            vals = dict(core=0, id=i, engine=eng, queue=0 if eng == "dma" else -1, nqueues=1 if eng == "dma" else 0,
                        opcode=r.op if r.kind == "native" else f"{r.op} [{r.kind}]", start=r.start_ns - t0,
                        data_start=r.start_ns - t0, end=r.end_ns - t0, done=r.end_ns - t0, flops=r.flops,
                        nbytes=r.bytes, hbm_bytes=r.bytes, src="hbm" if eng == "dma" else None,
                        dst="host" if eng == "dma" else None, loc=(file, int(line)) if line.isdigit() else None,
                        deps=(n - 1,) if n else (), bind=n - 1)
            for k, v in vals.items():
                cols[k].append(v)
        tl.extend(cols)
        return tl


def _add_kernel_rows(cols, k, offset, base):
    """Append kernel ``k``'s timeline rows (shifted to ``offset`` ns, indices rebased to ``base``) to ``cols``;
    the profile's timeline is on core 0, so every program's rows land there."""
    for r in k.timeline.rows():
        vals = dict(core=0, id=r.id, engine=r.engine, queue=r.queue, nqueues=r.nqueues, opcode=r.opcode,
                    start=r.start + offset, data_start=r.data_start + offset, end=r.end + offset,
                    done=r.done + offset, flops=r.flops, nbytes=r.nbytes, hbm_bytes=r.hbm_bytes, src=r.src,
                    dst=r.dst, loc=r.loc, deps=tuple(d + base for d in r.deps),
                    bind=r.bind + base if r.bind >= 0 else -1)
        for f, v in vals.items():
            cols[f].append(v)


_TENSOR_OPS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention_for_cpu",
               "_scaled_dot_product_flash_attention_for_cpu_backward", "sliding_window_attention",
               "sliding_window_attention_backward"}


@contextlib.contextmanager
def profile_torch():
    """``with trnsim.profile_torch() as p:`` records every device op run inside the block."""
    p = TorchProfile()
    STATE.profilers.append(p)
    try:
        yield p
    finally:
        STATE.profilers.remove(p)
