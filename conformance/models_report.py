"""The model sweep's report: ``models.json`` (records) and ``models.md`` ("N of M architectures run unchanged", a
table per model, the ranked fallback list, the diff against a baseline).  Files are written atomically."""

from __future__ import annotations

import json

from .report import _md_escape, atomic_write, with_provenance

__all__ = ["write_models_json", "load_models_json", "write_models_markdown", "models_summary", "compare_models"]

FORMAT = "trnsim-models/1"
_RANK = {"pass": 0, "fallback": 1, "build-error": 2, "error": 3, "mismatch": 4}


def models_summary(records):
    built = [r for r in records if r["status"] != "build-error"]
    unchanged = [r for r in built if r["status"] == "pass"]
    correct = [r for r in built if r["status"] in ("pass", "fallback")]
    no_fb = [r for r in built if r["status"] not in ("error",) and not r.get("fallbacks")]
    known = [r for r in built if r["status"] == "mismatch" and r.get("cause")]
    return (f"{len(unchanged)} of {len(built)} architectures run unchanged (matched, 0 fallbacks); "
            f"{len(correct)} of {len(built)} match the CPU; {len(no_fb)} of {len(built)} ran with 0 fallbacks; "
            f"{len(known)} mismatches have a known cause; {len(records) - len(built)} of {len(records)} "
            "could not be built from a tiny config (harness limit)")


def write_models_json(records, path, meta=None):
    meta = with_provenance(meta)
    doc = {"format": FORMAT, "generated": meta["made"], "meta": meta, "summary": models_summary(records),
           "records": records}
    atomic_write(path, json.dumps(doc, sort_keys=True, separators=(",", ":")).replace('},{', '},\n{') + "\n")


def load_models_json(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("records"), list):
        raise ValueError(f"{path} is not a trnsim model-sweep report (format {FORMAT})")
    return doc["records"]


def compare_models(records, baseline):
    """``(regressions, fixes, changed)`` by architecture: ``(name, old status, new status)``."""
    old = {r["name"]: r["status"] for r in baseline}
    new = {r["name"]: r["status"] for r in records}
    reg, fix, chg = [], [], []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if a is None or b is None:
            chg.append((k, a or "added", b or "removed"))
        elif _RANK.get(b, 9) > _RANK.get(a, 9):
            reg.append((k, a, b))
        elif _RANK.get(b, 9) < _RANK.get(a, 9):
            fix.append((k, a, b))
        else:
            chg.append((k, a, b))
    return reg, fix, chg


def _fmt_err(v):
    if isinstance(v, str):
        return v
    return f"{v:.2e}" if v else "0"


def ranked_fallbacks(records):
    """``[(aten op, architectures, calls)]``, by number of architectures."""
    agg = {}
    for r in records:
        for op, n in (r.get("fallbacks") or {}).items():
            a, c = agg.get(op, (0, 0))
            agg[op] = (a + 1, c + n)
    return sorted(((op, a, c) for op, (a, c) in agg.items()), key=lambda t: (-t[1], -t[2], t[0]))


def write_models_markdown(records, path, baseline=None, meta=None, known_causes=None):
    known_causes = known_causes or {}
    meta = with_provenance(meta)
    lines = ["# trnsim model sweep", "", f"Made at commit {meta['commit']} on {meta['made']}.", ""]
    rest = {k: v for k, v in meta.items() if k not in ("commit", "made")}
    if rest:
        lines += [", ".join(f"{k}: {v}" for k, v in rest.items()), ""]
    lines += [f"**{models_summary(records)}**", ""]
    counts = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines += ["Statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), "",
              "Each architecture: a tiny config of `transformers`' default config (every layer type of hybrid "
              "models kept), float32, batch 2 x 12 tokens, eval mode; forward and backward of a fixed random "
              "cotangent on the logits, on the CPU and on `neuron`; logits and every parameter gradient compared "
              "with float32 tolerances, re-judged against a float64 run where outside them (see "
              "`conformance/models_sweep.py`). *worst rel err*: the largest max|device - CPU| / max|CPU| over "
              "the logits and gradients. *sim time*: simulated device time of the forward and backward. *ops*: "
              "device ops by kind (native / estimated / fallback).", ""]
    fb = ranked_fallbacks(records)
    lines += ["## Fallbacks, ranked by architectures", ""]
    if fb:
        lines += ["| aten op | architectures | calls |", "|---|---|---|"]
        lines += [f"| {op} | {a} | {c} |" for op, a, c in fb]
    else:
        lines += ["No op fell back to the CPU in any architecture."]
    lines.append("")
    if baseline is not None:
        reg, fix, chg = compare_models(records, baseline)
        lines += ["## Against the baseline", "", f"{len(reg)} regressions, {len(fix)} fixes, {len(chg)} other "
                  "changes", ""]
        for title, rows in (("Regressions", reg), ("Fixes", fix), ("Other changes", chg)):
            if rows:
                lines += [f"### {title}", "", "| architecture | before | now |", "|---|---|---|"]
                lines += [f"| {k} | {a} | {b} |" for k, a, b in rows]
                lines.append("")
    lines += ["## Per architecture", "",
              "| architecture | status | layers | params | tied | fallbacks | worst rel err | sim time (us) | ops "
              "(native/estimated/fallback) | detail |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: r["name"]):
        ops = r.get("ops") or {}
        fbs = ", ".join(f"{k.replace('aten::', '')} x{v}" for k, v in sorted((r.get("fallbacks") or {}).items()))
        detail = r.get("detail", "")
        beyond = [n for n in r.get("differing", []) if n not in set(r.get("tied_names", []))]
        if r["status"] == "mismatch" and r.get("tied") and beyond:
            detail = f"{detail}; differing beyond the tied parameters: {', '.join(beyond[:4])}" + (
                f" and {len(beyond) - 4} more" if len(beyond) > 4 else "")
        cause = known_causes.get(r["name"])
        if cause:
            detail = f"{detail} -- known cause: {cause}"
        lines.append(f"| {r['name']} | {r['status']} | {r.get('layers', '')} | {r.get('params', 0):,} | "
                     f"{'yes' if r.get('tied') else ''} | {_md_escape(fbs)} | {_fmt_err(r.get('worst_rel_err', 0))} | "
                     f"{r.get('sim_us', 0):,.1f} | {ops.get('native', 0)}/{ops.get('estimated', 0)}/"
                     f"{ops.get('fallback', 0)} | {_md_escape(detail)[:300]} |")
    lines.append("")
    atomic_write(path, "\n".join(lines))
