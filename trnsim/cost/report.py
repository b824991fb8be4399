"""Views of an :class:`~trnsim.cost.estimate.Estimate`: a text table, JSON for tools, a stacked-bar PNG of the
step breakdown, and the Pareto front of a search (table and plot).  Files are written atomically."""

from __future__ import annotations



from ..fileio import atomic_write, atomic_write_json
from .models import human

__all__ = ["format_estimate", "write_json", "plot_breakdown", "format_front", "plot_front"]

GiB = 2 ** 30


def _usd(v):
    return "n/a" if v is None else (f"${v:,.2f}" if v >= 0.01 else f"${v:.4f}")


def _dur(s):
    if s >= 86400:
        return f"{s / 86400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 1:
        return f"{s:.3f} s"
    return f"{s * 1e3:.2f} ms"


def format_estimate(e, tokens=None) -> str:
    p = e.parallelism
    lines = [f"trnsim estimate: {e.model} on {e.count} x {e.instance} ({e.target}, {e.ranks} ranks), "
             f"{p.label()}",
             f"  sequence {e.seq}, global batch {e.global_batch} sequences ({e.global_batch * e.seq:,} tokens), "
             f"{'compiled' if e.compiled else 'eager'}",
             f"  step time           {_dur(e.step_time_s)}",
             f"  tokens/s            {e.tokens_per_s:,.0f}",
             f"  MFU / HFU           {100 * e.mfu:.1f}% / {100 * e.hfu:.1f}%",
             f"  HBM per rank        {e.hbm_per_rank_bytes / GiB:.1f} GiB of {e.hbm_capacity_bytes / GiB:.1f} GiB "
             f"({'fits' if e.fits else 'DOES NOT FIT'}); per chip {e.hbm_per_chip_bytes / GiB:.1f} GiB",
             "  step breakdown:"]
    for k, v in sorted(e.breakdown.items(), key=lambda kv: -kv[1]):
        lines.append(f"    {k:<40} {_dur(v):>12} {100 * v / e.step_time_s:6.1f}%")
    lines.append("  memory per rank:")
    for k, v in e.memory.items():
        lines.append(f"    {k:<40} {v / GiB:9.2f} GiB")
    if e.compiled:
        lines.append(f"  compile (estimated neuronx-cc, before the first step): {_dur(e.compile_s)}"
                     + (f", {_usd(e.usd_for_compile)}" if e.usd_per_hour is not None else ""))
    lines.append(f"  price: {e.price_note}")
    if e.usd_per_hour is not None:
        lines.append(f"    per step {_usd(e.usd_per_step)}, per billion tokens {_usd(e.usd_per_billion_tokens)}")
        if tokens:
            t = tokens / e.tokens_per_s
            lines.append(f"    {human(tokens)} tokens: {_dur(t)}, {_usd(e.usd_for_tokens(tokens))}")
    elif tokens:
        lines.append(f"    {human(tokens)} tokens: {_dur(tokens / e.tokens_per_s)}")
    if e.fallbacks:
        lines.append(f"  CPU fallbacks in the step: {', '.join(e.fallbacks)}")
    for n in e.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)


def write_json(e, path, tokens=None):
    d = e.to_json()
    if tokens:
        d["tokens"] = tokens
        d["time_for_tokens_s"] = tokens / e.tokens_per_s
        d["usd_for_tokens"] = e.usd_for_tokens(tokens)
    return atomic_write_json(path, d, indent=1)


def plot_breakdown(estimates, path, title=None):
    """A stacked bar per estimate: the step's components in seconds."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    keys = []
    for e in estimates:
        for k in e.breakdown:
            if k not in keys:
                keys.append(k)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(estimates) + 4), 5))
    labels = [f"{e.model}\n{e.count}x{e.instance}\n{e.parallelism.label()}" for e in estimates]
    bottom = [0.0] * len(estimates)
    cmap = plt.get_cmap("tab20")
    for i, k in enumerate(keys):
        vals = [e.breakdown.get(k, 0.0) for e in estimates]
        ax.bar(range(len(estimates)), vals, bottom=bottom, label=k, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(estimates)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("seconds per step")
    ax.set_title(title or "trnsim estimate: step time breakdown", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path


def format_front(results, front) -> str:
    lines = [f"{'config':<52} {'step':>10} {'tokens/s':>12} {'MFU':>6} {'$/1B tok':>10} {'HBM GiB':>8}  front"]
    on = {id(e) for e in front}
    for e in sorted(results, key=lambda e: e.step_time_s):
        cost = e.usd_per_billion_tokens
        lines.append(f"{e.count}x{e.instance} {e.parallelism.label():<36} {_dur(e.step_time_s):>10} "
                     f"{e.tokens_per_s:>12,.0f} {100 * e.mfu:5.1f}% {_usd(cost):>10} "
                     f"{e.hbm_per_rank_bytes / GiB:8.1f}  {'*' if id(e) in on else ''}")
    return "\n".join(lines)


def plot_front(results, front, path):
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 5))
    priced = [e for e in results if e.usd_per_hour is not None]
    y = (lambda e: e.usd_per_billion_tokens) if priced else (lambda e: e.count)
    ax.scatter([e.step_time_s for e in results], [y(e) for e in results], s=12, color="#999999", label="feasible")
    fr = sorted(front, key=lambda e: e.step_time_s)
    ax.plot([e.step_time_s for e in fr], [y(e) for e in fr], "o-", color="#d62728", label="Pareto front")
    for e in fr:
        ax.annotate(f"{e.count}x {e.parallelism.label()}", (e.step_time_s, y(e)), fontsize=6)
    ax.set_xlabel("step time (s)")
    ax.set_ylabel("$ per billion tokens" if priced else "instances")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path


