"""Conformance reports: JSON records, a Markdown coverage table in TorchNeuron's style, a comparison against a
previous report, and the one-line summary.

A record is one ``name x dtype x mode`` group: ``{"suite", "name", "dtype", "mode", "status", "counts",
"samples", "detail", "seconds"}`` (see ``ops_sweep`` and ``nki_suite``).  Files are written atomically.
"""

from __future__ import annotations

import datetime
import json
import os

from trnsim.fileio import atomic_write as _atomic_write

__all__ = ["OPS_STATUSES", "NKI_STATUSES", "summary_line", "write_json", "load_json", "write_markdown",
           "compare", "namespace_of", "atomic_write", "provenance", "with_provenance"]

OPS_STATUSES = ("native", "fallback", "mismatch", "error", "skip")
NKI_STATUSES = ("pass", "mismatch", "error", "skip")
# how good a status is, for regressions: a move to a higher rank is a regression
_RANK = {"native": 0, "pass": 0, "fallback": 1, "skip": 2, "error": 3, "mismatch": 4}


def atomic_write(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically (``trnsim.fileio.atomic_write``)."""
    with _atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text)


def provenance(root=None):
    """Where and when a report is made: ``{"commit": ..., "made": ISO date}``.  ``commit`` is ``git rev-parse HEAD``
    of the checkout holding this package (with ``+dirty`` when tracked files differ from it, so a report from
    uncommitted code says so), or ``"unknown (not a git checkout)"`` for an installed wheel."""
    import subprocess
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    made = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            raise OSError(head.stderr.strip())
        commit = head.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=30)
        if dirty.returncode == 0 and dirty.stdout.strip():
            commit += "+dirty"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown (not a git checkout)"
    return {"commit": commit, "made": made}


def with_provenance(meta):
    """``meta`` with the commit and date the report is made at first (kept when the caller already set them)."""
    meta = dict(meta or {})
    prov = provenance() if "commit" not in meta or "made" not in meta else {}
    return {**prov, **meta}


def namespace_of(name):
    """The public namespace of an OpInfo name: ``nn.functional.gelu`` -> ``torch.nn.functional``."""
    for ns in ("nn.functional", "linalg", "special", "fft", "masked", "sparse", "signal.windows", "_refs"):
        if name.startswith(ns + "."):
            return "torch." + ns
    if name.startswith("_"):
        return "torch (private)"
    return "torch"


def _totals(records, statuses):
    tot = {s: 0 for s in statuses}
    for r in records:
        for s, n in r.get("counts", {}).items():
            tot[s] = tot.get(s, 0) + n
    return tot


KNOWN_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_mismatches.json")


def load_known(path=KNOWN_PATH):
    """The list of understood mismatches (plain JSON).  The file is part of the repository: a missing one is an
    error (an empty list would report every known mismatch as unexplained, or hide that the file was lost)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"known-mismatches file {path} is missing (the repository's copy is "
                                f"conformance/known_mismatches.json; write an empty one with "
                                f'{{"format": "trnsim-known-mismatches/1", "entries": []}} to start afresh)')
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != "trnsim-known-mismatches/1":
        raise ValueError(f"{path}: not a trnsim known-mismatches file")
    return doc["entries"]


def annotate_known(records, known):
    """Attach ``cause`` (and ``cause_status``) to each mismatch record a known entry covers; returns the mismatch
    records left without a cause."""
    import fnmatch
    unexplained = []
    for r in records:
        if r["status"] != "mismatch":
            continue
        for k in known:
            if fnmatch.fnmatchcase(r["name"], k["name"]) and r["dtype"] in k["dtypes"] and \
                    fnmatch.fnmatchcase(r["mode"], k["mode"]):
                r["cause"] = k["cause"]
                r["cause_status"] = k["status"]
                break
        else:
            unexplained.append(r)
    return unexplained


def summary_line(records):
    """``ops 702 x 5 dtypes, 61,234 samples: native 58.2%, ...`` (and the NKI suite's line when present)."""
    parts = []
    ops = [r for r in records if r["suite"] == "ops"]
    nki = [r for r in records if r["suite"] == "nki"]
    for suite, recs, statuses, what in (("ops", ops, OPS_STATUSES, "ops"), ("nki", nki, NKI_STATUSES, "nki")):
        if not recs:
            continue
        names = {r["name"] for r in recs}
        dtypes = {r["dtype"] for r in recs}
        tot = _totals(recs, statuses)
        n = sum(tot.values())
        pct = ", ".join(f"{s} {100.0 * tot.get(s, 0) / n:.1f}%" if n else f"{s} 0" for s in statuses)
        modes = sorted({r["mode"] for r in recs})
        skipped = sum(1 for r in recs if r["status"] == "skip" and not r.get("samples"))
        extra = f" (+{skipped} groups skipped whole)" if skipped else ""
        parts.append(f"{what} {len(names)} x {len(dtypes)} dtypes ({'/'.join(modes)}), {n:,} samples: {pct}{extra}")
    return "; ".join(parts) if parts else "no records"


def write_json(records, path, meta=None):
    meta = with_provenance(meta)
    doc = {"format": "trnsim-conformance/1", "generated": meta["made"], "meta": meta,
           "summary": summary_line(records), "records": records}
    atomic_write(path, json.dumps(doc, sort_keys=True, separators=(",", ":")).replace('},{', '},\n{') + "\n")


def load_json(path):
    """Records of a report written by :func:`write_json` (plain JSON; nothing is executed)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("format") != "trnsim-conformance/1" or \
            not isinstance(doc.get("records"), list):
        raise ValueError(f"{path} is not a trnsim conformance report (format trnsim-conformance/1)")
    return doc["records"]


def compare(records, baseline):
    """``(regressions, fixes, changed)``: lists of ``(key, old_status, new_status)`` by (suite, name, dtype,
    mode); groups absent from one side are listed in ``changed`` as ``added``/``removed``."""
    def key(r):
        return (r["suite"], r["name"], r["dtype"], r["mode"])
    old = {key(r): r["status"] for r in baseline}
    new = {key(r): r["status"] for r in records}
    regressions, fixes, changed = [], [], []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if a is None:
            changed.append((k, "added", b))
        elif b is None:
            changed.append((k, a, "removed"))
        elif _RANK[b] > _RANK[a]:
            regressions.append((k, a, b))
        elif _RANK[b] < _RANK[a]:
            fixes.append((k, a, b))
        else:
            changed.append((k, a, b))
    return regressions, fixes, changed


def _md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def _ops_coverage(ops):
    """Per op: TorchNeuron-style status and the dtypes of each class (forward pass)."""
    by = {}
    for r in ops:
        if r["mode"] != "forward":
            continue
        by.setdefault(r["name"], []).append(r)
    rows = []
    for name in sorted(by):
        rs = by[name]
        nat = sorted(r["dtype"] for r in rs if r["status"] == "native")
        fb = sorted(r["dtype"] for r in rs if r["status"] == "fallback")
        bad = sorted(f"{r['dtype']} ({r['status']})" for r in rs if r["status"] in ("mismatch", "error"))
        skip = sorted(r["dtype"] for r in rs if r["status"] == "skip")
        if bad:
            status = "N"
        elif nat and not fb:
            status = "Y"
        elif fb:
            status = "CPU_FALLBACK" if not nat else "Y (some dtypes CPU_FALLBACK)"
        else:
            status = "skipped"
        rows.append((name, status, nat, fb, bad, skip))
    return rows


def write_markdown(records, path, baseline=None, meta=None):
    ops = [r for r in records if r["suite"] == "ops"]
    nki = [r for r in records if r["suite"] == "nki"]
    meta = with_provenance(meta)
    out = ["# trnsim conformance report", "", f"Made at commit {meta['commit']} on {meta['made']}.", ""]
    rest = {k: v for k, v in meta.items() if k not in ("commit", "made")}
    if rest:
        out += [", ".join(f"{k}: {v}" for k, v in rest.items()), ""]
    out += ["**Summary:** " + summary_line(records), ""]
    bad = [r for r in records if r["status"] in ("mismatch", "error")]
    out += ["## Mismatches and errors", ""]
    if not bad:
        out += ["None.", ""]
    else:
        out += ["Mismatches first. A cause marked verified was traced by hand; inferred follows from a verified sibling "
                "(see conformance/known_mismatches.json). A mismatch without a cause fails `trnsim conformance`.", "",
                "| suite | name | dtype | mode | status | samples failing | detail | cause |",
                "|---|---|---|---|---|---|---|---|"]
        for r in sorted(bad, key=lambda r: (r["status"] != "mismatch", r["suite"], r["name"], r["dtype"])):
            c = r.get("counts", {})
            cause = f"({r['cause_status']}) {r['cause']}" if r.get("cause") else \
                ("**not yet explained**" if r["status"] == "mismatch" else "")
            out.append(f"| {r['suite']} | {_md_escape(r['name'])} | {r['dtype']} | {r['mode']} | {r['status']} | "
                       f"{c.get(r['status'], 0)}/{r.get('samples', 0)} | {_md_escape(r.get('detail', ''))[:300]} | "
                       f"{_md_escape(cause)} |")
        out.append("")
    if baseline is not None:
        reg, fix, ch = compare(records, baseline)
        out += ["## Changes against the baseline", "", f"{len(reg)} regressions, {len(fix)} fixes, {len(ch)} other "
                "changes.", ""]
        for title, items in (("Regressions", reg), ("Fixes", fix), ("Other changes", ch)):
            if items:
                out += [f"### {title}", "", "| suite | name | dtype | mode | was | now |", "|---|---|---|---|---|---|"]
                out += [f"| {k[0]} | {_md_escape(k[1])} | {k[2]} | {k[3]} | {a} | {b} |" for k, a, b in items]
                out.append("")
    if ops:
        out += ["## PyTorch ops: totals per namespace (forward)", "",
                "| namespace | ops | Y (native) | CPU_FALLBACK | N (mismatch/error) | skipped |", "|---|---|---|---|---|---|"]
        cov = _ops_coverage(ops)
        ns = {}
        for name, status, *_ in cov:
            d = ns.setdefault(namespace_of(name), {"ops": 0, "Y": 0, "F": 0, "N": 0, "S": 0})
            d["ops"] += 1
            d["Y" if status == "Y" else "N" if status == "N" else "S" if status == "skipped" else "F"] += 1
        for k in sorted(ns):
            d = ns[k]
            out.append(f"| {k} | {d['ops']} | {d['Y']} | {d['F']} | {d['N']} | {d['S']} |")
        out += ["", "## PyTorch ops: coverage (forward)", "",
                "Y: runs natively on the simulated device for every dtype tried; CPU_FALLBACK: correct, through the "
                "CPU fallback; N: a mismatch or error in some dtype.", "",
                "| op | status | native dtypes | CPU_FALLBACK dtypes | wrong / failing | skipped dtypes |",
                "|---|---|---|---|---|---|"]
        for name, status, nat, fb, badd, skip in cov:
            out.append(f"| {_md_escape(name)} | {status} | {', '.join(nat)} | {', '.join(fb)} | {', '.join(badd)} | "
                       f"{', '.join(skip)} |")
        out.append("")
        bw = [r for r in ops if r["mode"] == "backward"]
        if bw:
            tot = _totals(bw, OPS_STATUSES)
            out += ["## PyTorch ops: backward", "", "| status | samples |", "|---|---|"]
            out += [f"| {s} | {tot.get(s, 0)} |" for s in OPS_STATUSES]
            out.append("")
    if nki:
        out += ["## NKI instructions and language ops", "", "| name | dtype | mode | status | samples | detail |",
                "|---|---|---|---|---|---|"]
        for r in sorted(nki, key=lambda r: (r["name"], r["mode"], r["dtype"])):
            out.append(f"| {_md_escape(r['name'])} | {r['dtype']} | {r['mode']} | {r['status']} | {r.get('samples', 0)} | "
                       f"{_md_escape(r.get('detail', ''))[:200]} |")
        out.append("")
    skips = [r for r in ops if r["status"] == "skip" and r.get("detail")]
    if skips:
        reasons = {}
        for r in skips:
            reasons.setdefault(r["detail"][:120], []).append(r["name"])
        out += ["## Skip reasons", "", "| reason | ops |", "|---|---|"]
        for reason, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            u = sorted(set(names))
            out.append(f"| {_md_escape(reason)} | {len(u)}: {', '.join(u[:12])}{' ...' if len(u) > 12 else ''} |")
        out.append("")
    atomic_write(path, "\n".join(out))
