"""Compile-time reporting: what each graph compile cost on the host, and an estimate of what the Neuron compiler
(neuronx-cc) would take for it on a real machine.

The estimate is a model, not a measurement, and its constants are ASSUMPTIONS (no per-op compile-time figure is
published): ``HW_COMPILE_FIXED_S`` per graph (process start, HLO passes, NEFF packaging) plus
``HW_COMPILE_PER_OP_S`` per aten op.  As a sanity check of the order of magnitude only: Hugging Face's optimum-neuron
guide says "Neuron compilation takes 30-60 minutes for large models"
(https://huggingface.co/docs/optimum-neuron/en/guides/cache_system); a large model's training graph has tens of
thousands of aten ops, which at 0.05 s per op gives that range.
"""

from __future__ import annotations

import dataclasses

from ..device_state import STATE

HW_COMPILE_FIXED_S = 20.0     # ASSUMPTION: fixed cost of one neuronx-cc invocation
HW_COMPILE_PER_OP_S = 0.05    # ASSUMPTION: per aten op of the graph


def estimated_hw_compile_s(n_ops):
    """Estimated neuronx-cc time (s) for a graph of ``n_ops`` aten ops (see the module docstring)."""
    return HW_COMPILE_FIXED_S + HW_COMPILE_PER_OP_S * n_ops


@dataclasses.dataclass
class CompileRecord:
    graph: str
    key: str
    n_ops: int = 0
    n_kernels: int = 0
    cache: str = ""            # "miss" (compiled), "hit" (plan from the cache), "failed"
    host_s: float = 0.0        # host time spent compiling (lowering, kernel simulation, cache I/O)
    sim_ns: float = 0.0        # simulated time of one run of the graph's kernels
    error: str = ""

    @property
    def est_hw_compile_s(self):
        """Estimated Neuron compiler time on a cold cache; a cache hit costs none of it."""
        return 0.0 if self.cache == "hit" else estimated_hw_compile_s(self.n_ops)


RECORDS = []


def record(rec):
    RECORDS.append(rec)
    for p in STATE.profilers:
        lst = getattr(p, "compiles", None)
        if lst is not None:
            lst.append(rec)


def summary(records=None):
    """One line per compiled graph and a total: host time and estimated neuronx-cc time."""
    recs = RECORDS if records is None else records
    lines = [f"{'graph':<16} {'cache':<7} {'ops':>6} {'kernels':>8} {'host s':>8} {'est. neuronx-cc s':>18}"]
    for r in recs:
        lines.append(f"{r.graph:<16} {r.cache:<7} {r.n_ops:>6} {r.n_kernels:>8} {r.host_s:>8.3f} "
                     f"{r.est_hw_compile_s:>18.1f}")
    lines.append(f"compile: {len(recs)} graphs, host {sum(r.host_s for r in recs):.3f} s, estimated Neuron "
                 f"compiler {sum(r.est_hw_compile_s for r in recs):.1f} s (model: {HW_COMPILE_FIXED_S:g} s + "
                 f"{HW_COMPILE_PER_OP_S:g} s/op, an assumption)")
    return "\n".join(lines)


def reset():
    del RECORDS[:]
