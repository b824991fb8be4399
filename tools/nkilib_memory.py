"""The nki-library runner's memory accounting (split from run_nki_library.py): each test's peak resident size per
family and against the per-test limit, the report's memory section, and, for tests the memory cap or the
out-of-memory killer ended, where they were (the harness's set-up, trnsim's simulate call, or the harness's golden
after it, from the plugin's ``<results>.simcalls``) and which to run again with more memory."""

from __future__ import annotations

import collections
import json
import os


def family(nodeid):
    parts = nodeid.split("::")[0].split("/")
    try:
        i = parts.index("nkilib")
    except ValueError:
        return parts[0] if parts else "?"
    rest = parts[i + 1:-1]
    return "/".join(rest[:2]) if rest else parts[-1]


GIB = 2 ** 30
PHASE_ROWS = 40        # tests shown in the report's per-phase table (the largest peaks)
RSS_LIMIT_GIB = 6.0   # issue 31: one test under 6 GB resident, so two workers fit in a 24 GB machine


def rss_summary(recs, limit_gib=RSS_LIMIT_GIB):
    """Per-test peak resident memory (the plugin's ``peak_rss_bytes``) -> the tests above ``limit_gib`` and the
    peak per family.  ``how`` names what was measured: ``VmHWM`` (each test's own peak) or ``ru_maxrss`` (a
    worker's lifetime peak, an upper bound)."""
    peaks, hows, rec_of = {}, collections.Counter(), {}
    for r in recs:
        b = r.get("peak_rss_bytes")
        if b is None or r.get("when") == "collect":
            continue
        hows[r.get("peak_rss_how") or "?"] += 1
        if b >= peaks.get(r["nodeid"], -1):
            peaks[r["nodeid"]] = int(b)
            rec_of[r["nodeid"]] = r

    def added(r):           # what the simulate call added on top of the process (None: not bracketed)
        if r.get("sim_peak_bytes") is None or r.get("sim_rss_before_bytes") is None:
            return None
        return max(0, int(r["sim_peak_bytes"]) - int(r["sim_rss_before_bytes"]))
    fam = {}
    for nid, b in peaks.items():
        f = fam.setdefault(family(nid), {"tests": 0, "max_bytes": 0, "max_test": None, "over_limit": 0,
                                         "max_sim_added_bytes": None})
        f["tests"] += 1
        if b > f["max_bytes"]:
            f["max_bytes"], f["max_test"] = b, nid
        if b > limit_gib * GIB:
            f["over_limit"] += 1
        a = added(rec_of[nid])
        if a is not None and (f["max_sim_added_bytes"] is None or a > f["max_sim_added_bytes"]):
            f["max_sim_added_bytes"] = a
    def where(r, b):        # where the test's peak was: in the simulate call, or in the harness around it
        if r.get("killed_in"):      # ended by the cap or a kill: where the plugin's last event put it
            return {"simulate call": "simulate call"}.get(r["killed_in"], f"harness ({r['killed_in']})")
        sp = r.get("sim_peak_bytes")
        if sp is None:
            return "harness (no simulate call reached)" if r.get("outcome") != "passed" else "unknown"
        return "simulate call" if sp >= b else "harness (before or after the call)"
    over = sorted(((b, nid) for nid, b in peaks.items() if b > limit_gib * GIB), reverse=True)
    vals = sorted(peaks.values())
    by_phase = sorted(((peaks[n], n) for n, r in rec_of.items() if r.get("peak_rss_phase_bytes")), reverse=True)
    return {"measured": len(peaks), "how": dict(hows), "limit_gib": limit_gib,
            "phase_peaks": [{"nodeid": n, "peak_bytes": b, "phases": rec_of[n]["peak_rss_phase_bytes"]}
                            for b, n in by_phase[:PHASE_ROWS]],
            "max_bytes": vals[-1] if vals else None, "median_bytes": vals[len(vals) // 2] if vals else None,
            "over_limit": [{"nodeid": n, "peak_bytes": b, "outcome": rec_of[n].get("outcome"),
                            "sim_rss_before_bytes": rec_of[n].get("sim_rss_before_bytes"),
                            "sim_peak_bytes": rec_of[n].get("sim_peak_bytes"), "sim_added_bytes": added(rec_of[n]),
                            "peak_in": where(rec_of[n], b)}
                           for b, n in over],
            "families": dict(sorted(fam.items()))}


def _gib(b):
    return f"{b / GIB:.2f} GiB" if b is not None else "n/a"


def render_rss(m):
    """The report's memory section: tests above the limit, and the peak per family."""
    if not m or not m.get("measured"):
        return ["", "## Peak resident memory per test", "", "Not recorded (a report from before the runner "
                "measured it, or no test ran)."]
    how = m["how"]
    what = ("each test's own peak resident set size (VmHWM of the process that ran it, reset before the test's "
            "setup via /proc/self/clear_refs; the test's inputs, goldens and trnsim's state all count)")
    if how.get("ru_maxrss"):
        what += (f"; for {how['ru_maxrss']} record(s) only the worker's lifetime peak (ru_maxrss) could be read, an "
                 "upper bound of the test's own")
    killed = sum(n for k, n in how.items() if k.startswith("VmRSS"))
    if killed:
        what += f"; for {killed} test(s) ended by the cap, the resident size when it ended them"
    out = ["", "## Peak resident memory per test", "",
           f"Measured for {m['measured']} tests: {what}. Largest {_gib(m['max_bytes'])}, median "
           f"{_gib(m['median_bytes'])}; {len(m['over_limit'])} above {m['limit_gib']:g} GiB.", ""]
    out += ["The simulate call is bracketed too: *resident at the call* is what the process held when the harness "
            "called `nki.cpu_simulate` (the test's inputs, any golden computed before, the interpreter and "
            "libraries); *added by the simulate call* is the call's own peak less that (trnsim's simulated "
            "memories, copies and records, and the outputs it returns). The rest of a peak is the harness's "
            "(its golden, its output conversion and comparison).", ""]
    if m["over_limit"]:
        ins = collections.Counter(t.get("peak_in", "unknown") for t in m["over_limit"])
        out += [f"Tests above {m['limit_gib']:g} GiB (the peak was in: "
                + ", ".join(f"{k} {n}" for k, n in ins.most_common()) + "):", "",
                "| peak | resident at the call | added by the simulate call | peak in | test | outcome |",
                "|---|---|---|---|---|---|"]
        out += [f"| {_gib(t['peak_bytes'])} | {_gib(t.get('sim_rss_before_bytes'))} | "
                f"{_gib(t.get('sim_added_bytes'))} | {t.get('peak_in', 'unknown')} | `{t['nodeid']}` | {t['outcome']} |"
                for t in m["over_limit"]]
        out.append("")
    out += render_phase_peaks(m.get("phase_peaks"))
    out += ["| family | tests measured | peak | test at the peak | above the limit | most added by a simulate call |",
            "|---|---|---|---|---|---|"]
    for f, c in m["families"].items():
        out.append(f"| {f} | {c['tests']} | {_gib(c['max_bytes'])} | `{c['max_test']}` | {c['over_limit']} | "
                   f"{_gib(c.get('max_sim_added_bytes'))} |")
    return out


PHASE_ORDER = ("setup", "inputs", "golden", "input_dump", "simulate", "outputs", "validate", "metrics", "teardown")


def render_phase_peaks(rows):
    """The per-phase table (``--phases``): the highest resident size while each harness phase was open."""
    if not rows:
        return []
    cols = [p for p in PHASE_ORDER if any(p in r["phases"] for r in rows)]
    out = ["Resident size per phase (`--phases`: the highest resident size while each phase of the test was open, "
           "read from VmHWM at every phase boundary; *simulate* is trnsim's call, *golden* the harness's reference, "
           "*inputs* the test's own code around the harness, chiefly its input generation):", "",
           "| test | peak | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in rows:
        out.append(f"| `{r['nodeid']}` | {_gib(r['peak_bytes'])} | "
                   + " | ".join(_gib(r["phases"].get(p)) for p in cols) + " |")
    return out + [""]


def capped_tests(recs):
    """Node ids, sorted, of the tests whose last record says the memory cap (or a kill: most often the
    out-of-memory killer) stopped them: what ``--retry-memory`` runs again."""
    last = {}
    for r in recs:
        if r.get("when") == "call":
            last[r["nodeid"]] = r
    return sorted(nid for nid, r in last.items() if r.get("type") in ("Killed", "ResidentMemoryExceeded"))


def killed_where(results):
    """For each test with lines in the plugin's ``<results>.simcalls``, where it was when it stopped reporting:
    ``{"phase": "harness set-up" | "simulate call" | "harness after the call", "text": ...}`` (a test with no
    line never reached the simulate call).  Only tests that started are asked about."""
    last, first = {}, {}
    if os.path.exists(results + ".simcalls"):
        with open(results + ".simcalls") as f:
            for ln in f:
                try:
                    r = json.loads(ln)
                except ValueError:
                    continue                   # a line cut short by the kill
                if r.get("event") == "simulate":
                    first[r["nodeid"]] = r
                last[r["nodeid"]] = r
    out = {}
    started = []
    if os.path.exists(results + ".started"):
        with open(results + ".started") as f:
            started = [ln.strip() for ln in f if ln.strip()]
    for nid in started:
        call = first.get(nid)
        if call is None:
            out[nid] = {"phase": "harness set-up", "text": "stopped in the harness's set-up (its input generation), "
                        "before the simulate call"}
            continue
        held = (f"{call['rss_bytes'] / GIB:.2f} GiB resident at the call"
                if call.get("rss_bytes") is not None else "resident size at the call unknown")
        if call.get("input_bytes") is not None:
            held += f", the harness's inputs {call['input_bytes'] / GIB:.2f} GiB"
        fields = {"sim_rss_before_bytes": call.get("rss_bytes"), "harness_input_bytes": call.get("input_bytes")}
        if last[nid].get("event") == "simulated":
            pk = last[nid].get("sim_peak_bytes")
            fields["sim_peak_bytes"] = pk
            out[nid] = {"phase": "harness after the call",
                        "text": f"stopped after trnsim's simulate call returned, in the harness's golden or comparison "
                                f"({held}; the call's own peak "
                                f"{'unknown' if pk is None else f'{pk / GIB:.2f} GiB'})", "fields": fields}
        else:
            out[nid] = {"phase": "simulate call", "text": f"stopped inside trnsim's simulate call ({held})",
                        "fields": fields}
    return out


def record_killed(results, signum):
    """Append a record for each test that started and never reported (it was running when pytest was ended by
    ``signum``) to ``results``; the memory cap's ``<results>.killed`` names the ones it ended, with their resident
    size.  Returns the node ids recorded."""
    seen = set()
    if os.path.exists(results):
        with open(results) as f:
            seen = {json.loads(ln)["nodeid"] for ln in f if ln.strip()}
    capped = {}
    if os.path.exists(results + ".killed"):
        with open(results + ".killed") as f:
            for ln in f:
                nid, rss, cap = ln.rstrip("\n").split("\t")
                capped[nid] = (int(rss), int(cap))
    where = killed_where(results)
    new = []
    if os.path.exists(results + ".started"):
        with open(results + ".started") as f:
            for nid in dict.fromkeys(ln.strip() for ln in f if ln.strip()):
                if nid in seen:
                    continue
                if nid in capped:
                    rss, cap = capped[nid]
                    msg = (f"ended by the runner's resident-memory cap: {rss / GIB:.2f} GiB resident, above "
                           f"--max-memory {cap / GIB:g} GiB plus the 1 GiB margin within which a test is interrupted")
                    rec = {"peak_rss_bytes": rss, "peak_rss_how": "VmRSS at the kill"}
                else:
                    msg = (f"pytest was ended by signal {signum} while this test ran (9: most often the "
                           "out-of-memory killer)")
                    rec = {}
                if nid in where:
                    msg += "; " + where[nid]["text"]
                    rec["killed_in"] = where[nid]["phase"]
                    rec.update({k: v for k, v in where[nid].get("fields", {}).items() if v is not None})
                new.append({"nodeid": nid, "when": "call", "outcome": "failed", "negative": False,
                            "chain": ["Killed"], "type": "Killed", "message": msg, **rec})
    if new:
        with open(results, "a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in new))
    return [r["nodeid"] for r in new]
