"""A PNG timeline (matplotlib): one row per engine, DMA queues folded into one row, utilisation beside each
row, and the SBUF/PSUM occupancy below."""

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


def plot_timeline(tl: Timeline, path, title=None, width_px=1600):
    """Draw ``tl`` to ``path`` (PNG, written atomically); returns the path."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    total = tl.total_ns or 1.0
    unit, scale = ("us", 1e-3) if total < 5e6 else ("ms", 1e-6)
    cores = list(tl.core_ids) or [0]
    rows = [(c, e) for c in cores for e in _ROWS]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(width_px / 100, 1.2 + 0.45 * len(rows) + 1.8),
                                  gridspec_kw={"height_ratios": [max(2, len(rows)), 2]}, sharex=True)
    gap = total / width_px
    act = tl.busy_ns()
    for k, (c, e) in enumerate(rows):
        iv = [[ds, en] for cc, ee, ds, en in zip(tl.core, tl.engine, tl.data_start, tl.end) if cc == c and ee == e]
        bars = [(s * scale, w * scale) for s, w in _merge(iv, gap)]
        y = len(rows) - 1 - k
        if bars:
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=_COLORS[e], linewidth=0)
        util = act.get((c, e), 0.0) / total
        ax.text(1.005, (y + 0.5) / len(rows), f"{100 * util:.0f}%", transform=ax.transAxes, va="center",
                fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"core {c} {e}" for c, e in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    s = tl.summary()
    ax.set_title(title or f"trnsim timeline ({tl.target.name}): total {total * scale:.2f} {unit}, "
                 f"MFU {100 * s['mfu']:.1f}%, MBU {100 * s['mbu']:.1f}%", fontsize=10)
    for (c, name), pts in sorted(tl.counters.items()):
        if name in ("sbuf_bytes", "psum_bytes") and pts:
            cap = tl.capacity[name[:4]]
            xs = [t * scale for t, _ in pts] + [total * scale]
            ys = [100.0 * v / cap for _, v in pts]
            ys.append(ys[-1])
            ax2.step(xs, ys, where="post", label=f"core {c} {name[:4].upper()} % of capacity")
    ax2.set_ylabel("% of capacity")
    ax2.set_xlabel(f"time ({unit})")
    ax2.set_ylim(0, 105)
    ax2.legend(loc="upper right", fontsize=8)
    ax2.set_xlim(0, total * scale)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path
