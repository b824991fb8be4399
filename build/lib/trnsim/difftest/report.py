"""Views of a :class:`~trnsim.difftest.compare.Comparison`: a text summary, Markdown and HTML reports."""

from __future__ import annotations

import html

from .bundle import atomic_write
from .comparison import DIVERGED, DTYPE, EQUAL, ONLY_A, ONLY_B, SHAPE, WITHIN

_STATUSES = (EQUAL, WITHIN, DIVERGED, SHAPE, DTYPE, ONLY_A, ONLY_B)


def _g(x):
    return "-" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))


def verdict(cmp) -> str:
    if cmp.ok:
        n = sum(1 for r in cmp.results if r.status in (EQUAL, WITHIN))
        return f"EQUAL within tolerance ({n} tensors compared in {len(cmp.pairs)} recording(s))"
    f = cmp.first
    if f is None:
        miss = ", ".join(f"{p.test} rank {p.rank} ({'only in A' if p.b is None else 'only in B'})"
                         for p in cmp.missing)
        return f"DIVERGED: recordings present on one side only: {miss}"
    return f"DIVERGED: first divergence in {f.test}, rank {f.rank}: {f.where()} [{f.key}]"


def describe_first(r) -> list:
    lines = [f"rank {r.rank}, {r.where()}", f"  key {r.key} (execution step {r.seq})"]
    if r.status in (ONLY_A, ONLY_B):
        lines.append(f"  recorded {r.status.lower()}")
    elif r.status in (SHAPE, DTYPE):
        lines.append(f"  {r.status}: {r.note}")
    else:
        lines.append(f"  {r.n_bad:,} of {r.numel:,} elements beyond tolerance ({r.dtype}: {r.tol.describe()}); "
                     f"max |diff| {r.max_abs:.3g}, max rel {r.max_rel:.3g}, max {r.max_ulps:.3g} ulp")
    return lines


def _counts(pair):
    c = dict.fromkeys(_STATUSES, 0)
    for r in pair.results:
        c[r.status] += 1
    return c


def _summary_rows(cmp):
    rows = []
    for p in cmp.pairs:
        if p.a is None or p.b is None:
            rows.append([p.test, str(p.rank), "only in " + ("B" if p.a is None else "A")] + [""] * 6)
            continue
        c = _counts(p)
        f = p.first
        rows.append([p.test, str(p.rank), "ok" if f is None else "DIVERGED", str(c[EQUAL]), str(c[WITHIN]),
                     str(c[DIVERGED] + c[SHAPE] + c[DTYPE]), str(c[ONLY_A] + c[ONLY_B]),
                     "" if f is None else f.where(), "" if f is None else str(f.seq)])
    return rows


_SUMMARY_HEAD = ["test", "rank", "result", "equal", "within tol.", "diverged", "unmatched", "first divergence",
                 "step"]


def _worst_rows(r):
    return [[str(w["index"]), f"{w['a']:.6g}", f"{w['b']:.6g}", f"{w['abs']:.3g}", f"{w['rel']:.3g}",
             f"{w['ulps']:.3g}"] for w in r.worst]


_WORST_HEAD = ["index", "A", "B", "|diff|", "rel", "ulp"]


def _diverged(cmp, limit):
    out = [r for p in cmp.pairs for r in p.results if r.failing or (r.status in (ONLY_A, ONLY_B)
                                                                      and r.note == "divergence")]
    return out[:limit], len(out)


def _worst_entry(cmp):
    cands = [r for r in cmp.results if r.status in (DIVERGED, WITHIN) and r.worst]
    return max(cands, key=lambda r: r.worst[0]["abs"] / max(r.worst[0].get("allowed", 0.0), 1e-300),
               default=None)


def _bundle_line(b):
    m = b.manifest
    tg = m.get("target") or {}
    tgs = tg.get("name") or tg.get("instance_type") or "-"
    v = m.get("versions", {})
    return (f"{m.get('device_kind')} (target {tgs}), torch {v.get('torch')}, trnsim {v.get('trnsim', '-')}, "
            f"{len(b.entries)} tensors")


def text_summary(cmp, limit=20) -> str:
    lines = [f"trnsim compare: A={cmp.a_root}  B={cmp.b_root}"]
    p0 = next((p for p in cmp.pairs if p.a is not None and p.b is not None), None)
    if p0 is not None:
        lines += [f"  A: {_bundle_line(p0.a)}", f"  B: {_bundle_line(p0.b)}"]
    rows = _summary_rows(cmp)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(_SUMMARY_HEAD)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    lines.append(fmt.format(*_SUMMARY_HEAD))
    lines += [fmt.format(*r) for r in rows]
    f = cmp.first
    if f is not None:
        lines.append("first divergence:")
        lines += ["  " + x for x in describe_first(f)]
        for w in f.worst[:5]:
            lines.append(f"    at {w['index']}: A {w['a']:.6g}  B {w['b']:.6g}  |diff| {w['abs']:.3g}  "
                         f"{w['ulps']:.3g} ulp")
        others = [r for p, r in cmp.firsts if r is not f]
        for r in others:
            lines.append(f"  also: {r.test} rank {r.rank} first diverges at {r.where()} (step {r.seq})")
    unmatched = sum(1 for r in cmp.results if r.note == "unmatched op")
    if unmatched:
        lines.append(f"note: {unmatched} op outputs recorded on one side only (not counted as divergences; "
                     "--strict counts them)")
    lines.append(verdict(cmp))
    return "\n".join(lines)


def _md_table(head, rows):
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    head = [c.replace("|", "\\|") for c in head]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def markdown(cmp, limit=50) -> str:
    out = ["# trnsim compare", "", f"- A (reference): `{cmp.a_root}`", f"- B: `{cmp.b_root}`"]
    p0 = next((p for p in cmp.pairs if p.a is not None and p.b is not None), None)
    if p0 is not None:
        out += [f"- A: {_bundle_line(p0.a)}", f"- B: {_bundle_line(p0.b)}"]
    out += ["", f"**{verdict(cmp)}**", "", "## Summary", "", _md_table(_SUMMARY_HEAD, _summary_rows(cmp))]
    f = cmp.first
    if f is not None:
        out += ["", "## First divergence", ""] + ["    " + x for x in describe_first(f)]
        if f.worst:
            out += ["", "Worst elements:", "", _md_table(_WORST_HEAD, _worst_rows(f))]
    rows, n = _diverged(cmp, limit)
    if rows:
        out += ["", f"## Diverged entries ({n}{', first ' + str(limit) if n > limit else ''})", "",
                _md_table(["rank", "step", "where", "key", "status", "bad/total", "max abs", "max ulp"],
                          [[str(r.rank), str(r.seq), r.where(), f"`{r.key}`", r.status, f"{r.n_bad}/{r.numel}",
                            _g(r.max_abs), _g(r.max_ulps)] for r in rows])]
    w = _worst_entry(cmp)
    if w is not None:
        out += ["", f"## Worst elements overall: `{w.key}` (rank {w.rank})", "",
                _md_table(_WORST_HEAD, _worst_rows(w))]
    out += ["", "## Tolerances", ""] + [f"- {x}" for x in cmp.tolerances.describe()]
    return "\n".join(out) + "\n"


def _html_table(head, rows):
    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def html_report(cmp, limit=50) -> str:
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>trnsim compare</title><style>",
             "body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;margin:1em 0}",
             "td,th{border:1px solid #bbb;padding:2px 6px;font-size:13px} th{background:#eee}",
             ".bad{color:#b00} .ok{color:#070} pre{background:#f6f6f6;padding:6px}</style></head><body>",
             "<h1>trnsim compare</h1>", f"<p>A (reference): <code>{e(cmp.a_root)}</code><br>B: "
             f"<code>{e(cmp.b_root)}</code></p>"]
    cls = "ok" if cmp.ok else "bad"
    parts.append(f"<p class='{cls}'><b>{e(verdict(cmp))}</b></p><h2>Summary</h2>")
    parts.append(_html_table(_SUMMARY_HEAD, _summary_rows(cmp)))
    f = cmp.first
    if f is not None:
        parts.append("<h2>First divergence</h2><pre>" + e("\n".join(describe_first(f))) + "</pre>")
        if f.worst:
            parts.append(_html_table(_WORST_HEAD, _worst_rows(f)))
    rows, n = _diverged(cmp, limit)
    if rows:
        parts.append(f"<h2>Diverged entries ({n})</h2>")
        parts.append(_html_table(["rank", "step", "where", "key", "status", "bad/total", "max abs", "max ulp"],
                                 [[str(r.rank), str(r.seq), r.where(), r.key, r.status, f"{r.n_bad}/{r.numel}",
                                   _g(r.max_abs), _g(r.max_ulps)] for r in rows]))
    w = _worst_entry(cmp)
    if w is not None:
        parts.append(f"<h2>Worst elements overall: <code>{e(w.key)}</code> (rank {w.rank})</h2>")
        parts.append(_html_table(_WORST_HEAD, _worst_rows(w)))
    parts.append("<h2>Tolerances</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in cmp.tolerances.describe())
                 + "</ul></body></html>")
    return "".join(parts)


def write_reports(cmp, md_path=None, html_path=None):
    if md_path:
        atomic_write(md_path, markdown(cmp).encode())
    if html_path:
        atomic_write(html_path, html_report(cmp).encode())
