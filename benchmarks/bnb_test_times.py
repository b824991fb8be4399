"""Per-test host CPU time of a third-party pytest suite (issue 28: bitsandbytes' test_functional on ``neuron`` against
the CPU), as a pytest plugin loaded with ``-p benchmarks.bnb_test_times`` (``PYTHONPATH`` holding this repository), so
the suite's own files stay unedited.

Plugin switches (environment, read only by this benchmark tool):
  ``BNB_TIMES_OUT``     JSON-lines file: one record per test (nodeid, family, outcome, CPU seconds of setup + call +
                        teardown measured with ``time.process_time``).
  ``BNB_TIMES_STRIDE``  keep every N-th test of each family (test function), from the first: a bounded slice that
                        still covers every family and, within one, the parameter grid's spread.

Table: ``python -m benchmarks.bnb_test_times CPU.jsonl NEURON.jsonl [cpu neuron]`` prints, per family, the tests that
passed in both runs (A, B), their CPU seconds in each, B/A, and B/A per iteration where the suite runs a family a
different number of times per device (``ITERS``); ``A.jsonl B.jsonl neuron neuron`` compares two neuron runs."""

import json
import os
import sys
import time

import pytest

# Iterations a family's test body runs per device, where the suite makes them differ: bitsandbytes@95f9af3
# tests/test_functional.py, test_gemv_4bit: ``iters = 10 if device == "cpu" else 100``.
ITERS = {"test_gemv_4bit": {"cpu": 10, "neuron": 100}}


def _family(nodeid):
    return nodeid.split("[", 1)[0].rsplit("::", 1)[-1]


def pytest_collection_modifyitems(config, items):
    stride = int(os.environ.get("BNB_TIMES_STRIDE", "1") or 1)
    if stride < 1:
        raise pytest.UsageError(f"BNB_TIMES_STRIDE={stride}: must be a positive integer")
    if stride == 1:
        return
    seen, keep, drop = {}, [], []
    for it in items:
        f = _family(it.nodeid)
        n = seen.get(f, 0)
        seen[f] = n + 1
        (keep if n % stride == 0 else drop).append(it)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


_outcome = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0 = time.process_time()
    _outcome[item.nodeid] = "passed"
    yield
    dt = time.process_time() - t0
    out = os.environ.get("BNB_TIMES_OUT")
    if out:
        rec = {"nodeid": item.nodeid, "family": _family(item.nodeid), "outcome": _outcome.pop(item.nodeid),
               "cpu_s": round(dt, 4)}
        with open(out, "a", encoding="utf-8") as f:   # append-only log of a benchmark run, one line per test
            f.write(json.dumps(rec) + "\n")


def pytest_runtest_logreport(report):
    if report.skipped:
        _outcome[report.nodeid] = "skipped"
    elif report.failed:
        _outcome[report.nodeid] = "failed"


def _key(nodeid, device):
    """A test's id with its device parameter taken out, so the same case on two devices has one key."""
    head, sep, params = nodeid.partition("[")
    if not sep:
        return nodeid
    parts = [p for p in params.rstrip("]").split("-") if p != device]
    return f"{head}[{'-'.join(parts)}]"


def _load(path, device):
    with open(path, encoding="utf-8") as f:
        return {_key(r["nodeid"], device): r for r in map(json.loads, f) if r}


def table(cpu_path, dev_path, device="neuron", base="cpu"):
    """Per family: the tests that passed in both runs, their CPU seconds in each and the ratio.  ``base`` and
    ``device`` name the two runs' devices (two runs on one device compare before and after a change)."""
    cpu, dev = _load(cpu_path, base), _load(dev_path, device)
    both = [n for n in cpu if n in dev and cpu[n]["outcome"] == dev[n]["outcome"] == "passed"]
    fams = {}
    for n in both:
        row = fams.setdefault(cpu[n]["family"], [0, 0.0, 0.0])
        row[0] += 1
        row[1] += cpu[n]["cpu_s"]
        row[2] += dev[n]["cpu_s"]
    lines = [f"{'family':44s} {'tests':>5s} {'A s':>8s} {'B s':>9s} {'B/A':>6s} {'per iter':>8s}"]
    tot = [0, 0.0, 0.0]
    for f, (k, c, d) in sorted(fams.items(), key=lambda kv: -kv[1][2]):
        it = ITERS.get(f)
        per = (d / it[device]) / (c / it[base]) if it and c else None
        lines.append(f"{f:44s} {k:5d} {c:8.2f} {d:9.2f} {d / c if c else float('nan'):6.2f} "
                     f"{per if per is not None else d / c if c else float('nan'):8.2f}")
        tot = [tot[0] + k, tot[1] + c, tot[2] + d]
    lines.append(f"{'total':44s} {tot[0]:5d} {tot[1]:8.2f} {tot[2]:9.2f} "
                 f"{tot[2] / tot[1] if tot[1] else float('nan'):6.2f}")
    for name, d in (("A " + base, cpu), ("B " + device, dev)):
        counts = {}
        for r in d.values():
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        lines.append(f"{name}: {counts}, {sum(r['cpu_s'] for r in d.values()):.1f} s CPU over all recorded tests")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 5):
        sys.exit("usage: python -m benchmarks.bnb_test_times A.jsonl B.jsonl [A_DEVICE B_DEVICE]  (default cpu neuron)")
    a_dev, b_dev = sys.argv[3:5] if len(sys.argv) == 5 else ("cpu", "neuron")
    print(table(sys.argv[1], sys.argv[2], device=b_dev, base=a_dev))
