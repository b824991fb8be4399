"""A PNG timeline (matplotlib): one row per engine and per DMA queue, utilisation beside each row, and the
SBUF and PSUM occupancy below, each on its own scale."""

from __future__ import annotations

from ..machine.timeline import Timeline
from ._io import atomic_write

__all__ = ["plot_timeline"]

_ROWS = ("tensor", "vector", "scalar", "gpsimd", "dma")
_COLORS = {"tensor": "#d62728", "vector": "#1f77b4", "scalar": "#2ca02c", "gpsimd": "#9467bd", "dma": "#ff7f0e"}


def _merge(iv, gap):
    """Merge intervals closer than ``gap`` (a pixel's width) so that large timelines draw fast."""
    iv.sort()
    out = []
    for s, e in iv:
        if out and s <= out[-1][1] + gap:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e - s) for s, e in out]


def _bytes_unit(v):
    for unit, k in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if v >= k:
            return unit, k
    return "B", 1


def _rows(tl, cores):
    """(core, engine, dma queue or None) per picture row: the four compute engines, then each DMA queue that
    moved data (all 16 when every queue did)."""
    used = {}
    for c, e, q, nq in zip(tl.core, tl.engine, tl.queue, tl.nqueues):
        if e == "dma" and q >= 0:
            used.setdefault(c, set()).update(range(q, q + max(1, nq)))
    rows = []
    for c in cores:
        rows += [(c, e, None) for e in _ROWS if e != "dma"]
        rows += [(c, "dma", q) for q in sorted(used.get(c, ()))]
    return rows


def plot_timeline(tl: Timeline, path, title=None, width_px=1600):
    """Draw ``tl`` to ``path`` (PNG, written atomically); returns the path.  One row per engine and per DMA
    queue (with its busy %), then SBUF and PSUM occupancy each on its own scale (peak and capacity in the
    legend)."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    total = tl.total_ns or 1.0
    unit, scale = ("us", 1e-3) if total < 5e6 else ("ms", 1e-6)
    cores = list(tl.core_ids) or [0]
    rows = _rows(tl, cores)
    heights = [0.45 if q is None else 0.2 for _, _, q in rows]
    fig, (ax, ax_sb, ax_ps) = plt.subplots(
        3, 1, figsize=(width_px / 100, 1.6 + sum(heights) + 2 * 1.3),
        gridspec_kw={"height_ratios": [max(2.0, sum(heights)), 1.3, 1.3]}, sharex=True)
    gap = total / width_px
    act = tl.busy_ns()
    ivs = {}
    for cc, ee, q, nq, ds, en in zip(tl.core, tl.engine, tl.queue, tl.nqueues, tl.data_start, tl.end):
        if ee == "dma":
            for qq in range(q, q + max(1, nq)):
                ivs.setdefault((cc, ee, qq), []).append([ds, en])
        else:
            ivs.setdefault((cc, ee, None), []).append([ds, en])
    for r, mode, _, ds, en in tl.dge:       # software descriptor generation occupies the GpSimd Engine
        if mode == 1:
            ivs.setdefault((tl.core[r], "gpsimd", None), []).append([ds, en])
    ys, y = [], 0.0
    for h in reversed(heights):
        ys.append(y + h / 2)
        y += h
    ys.reverse()
    for k, (c, e, q) in enumerate(rows):
        iv = ivs.get((c, e, q), [])
        bars = [(s * scale, w * scale) for s, w in _merge(iv, gap)]
        h = heights[k]
        if bars:
            ax.broken_barh(bars, (ys[k] - 0.4 * h, 0.8 * h), facecolors=_COLORS[e], linewidth=0)
        busy = act.get((c, e), 0.0) if q is None else sum(w for _, w in _merge(iv, 0.0))
        ax.text(1.003, ys[k], f"{100 * busy / total:.0f}%", transform=ax.get_yaxis_transform(), va="center",
                fontsize=7 if q is not None else 8)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"core {c} {e}" if q is None else f"core {c} DMA queue {q}" for c, e, q in rows],
                       fontsize=8)
    ax.set_ylim(0, y)
    s = tl.summary()
    ax.set_title(title or f"trnsim timeline ({tl.target.name}): total {total * scale:.2f} {unit}, "
                 f"MFU {100 * s['mfu']:.1f}%, MBU {100 * s['mbu']:.1f}%", fontsize=10)
    for axm, mem in ((ax_sb, "sbuf"), (ax_ps, "psum")):
        cap = tl.capacity[mem]
        peak = 0.0
        series = [(c, pts) for (c, name), pts in sorted(tl.counters.items()) if name == f"{mem}_bytes" and pts]
        for c, pts in series:
            peak = max(peak, max(v for _, v in pts))
        bu, bk = _bytes_unit(max(peak, 1.0))
        for c, pts in series:
            xs = [t * scale for t, _ in pts] + [total * scale]
            vs = [v / bk for _, v in pts]
            vs.append(vs[-1])
            axm.step(xs, vs, where="post", color=_COLORS["vector" if mem == "sbuf" else "tensor"],
                     label=f"core {c} {mem.upper()} live")
        cu, ck = _bytes_unit(cap)
        axm.set_ylabel(f"{mem.upper()} ({bu})", fontsize=8)
        axm.set_ylim(0, max(peak / bk, 1e-9) * 1.2 if peak else 1)
        axm.text(0.005, 0.92, f"peak {peak / bk:.1f} {bu} = {100 * peak / cap:.1f}% of {cap / ck:.0f} {cu}",
                 transform=axm.transAxes, va="top", fontsize=8)
    ax_ps.set_xlabel(f"time ({unit})")
    ax_ps.set_xlim(0, total * scale)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path
