"""The printable summary table of a Timeline."""

from __future__ import annotations

import os

from ..machine.timeline import Timeline

__all__ = ["format_summary"]

_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


def _t(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.0f} ns"


def _b(n):
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n:.0f} B"


def format_summary(tl: Timeline, title="", top_lines=5) -> str:
    s = tl.summary()
    tg = tl.target
    lines = []
    if title:
        lines.append(title)
    lines.append(f"  target {tg.name} ({tg.marketing_name}), {s['cores']} core(s), {s['instructions']} instructions")
    lines.append(f"  total time          {_t(s['total_ns'])}")
    peak = tl.peak_flops_per_s / 1e12
    lines.append(f"  MFU                 {100 * s['mfu']:6.2f} %  ({s['flops'] / 1e9:.3f} GFLOP against "
                 f"{peak:.1f} TFLOPS)")
    from .findings import findings, hfu
    lines.append(f"  HFU                 {100 * hfu(tl):6.2f} %  (Tensor Engine array occupied by matmuls)")
    lines.append(f"  MBU                 {100 * s['mbu']:6.2f} %  ({_b(s['hbm_bytes'])} HBM traffic against "
                 f"{tl.hbm_peak_bytes_per_s / 1e9:.0f} GB/s)")
    lines.append(f"  DMA utilisation     {100 * s['dma_utilisation']:6.2f} %  (mean over "
                 f"{tl.queues_per_core} queues per core)")
    lines.append(f"  peak SBUF           {_b(s['peak_sbuf_bytes'])} of {_b(s['sbuf_capacity_bytes'])}; "
                 f"peak PSUM {_b(s['peak_psum_bytes'])} of {_b(s['psum_capacity_bytes'])}")
    crit = s["critical_path_share"]
    lines.append(f"  {'engine':<10} {'active %':>9} {'critical path %':>16}")
    for e in _ENGINES:
        lines.append(f"  {e:<10} {100 * s['engine_active'][e]:9.2f} {100 * crit.get(e, 0.0):16.2f}")
    lines.append(f"  {'wait':<10} {'':>9} {100 * crit.get('wait', 0.0):16.2f}   (semaphores, descriptor generation)")
    found = findings(tl)
    if found:
        lines.append("  findings:")
        lines += [f"    - {f}" for f in found]
    top = tl.by_source_line(top_lines)
    if top:
        lines.append("  busiest source lines:")
        for loc, eng, cnt, busy in top:
            where = f"{os.path.basename(str(loc[0]))}:{loc[1]}" if loc else "(no source line)"
            lines.append(f"    {where:<32} {eng:<7} x{cnt:<7} {_t(busy)}")
    return "\n".join(lines)
