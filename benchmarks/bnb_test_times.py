"""Per-test host CPU time of a third-party pytest suite (issue 28: bitsandbytes' test_functional on ``neuron`` against
the CPU), as a pytest plugin loaded with ``-p benchmarks.bnb_test_times`` (``PYTHONPATH`` holding this repository), so
the suite's own files stay unedited.

Plugin switches (environment, read only by this benchmark tool):
  ``BNB_TIMES_OUT``     JSON-lines file: one record per test (nodeid, family, outcome, CPU seconds of setup + call +
                        teardown measured with ``time.process_time``, and their wall seconds with
                        ``time.perf_counter``).
  ``BNB_TIMES_STRIDE``  keep every N-th test of each family (test function), from the first: a bounded slice that
                        still covers every family and, within one, the parameter grid's spread.
  ``BNB_TIMES_FAMILY_STRIDE``  per-family strides overriding it, ``family=N,...`` with a family named by its test
                        function (``test_gemv_4bit``) or by file and function (``test_functional.py::test_gemv_4bit``):
                        a wider stride for the slowest families so a whole slice fits a time budget.
  ``BNB_TIMES_CPU_AS_DEVICE``  ``1``: each test's ``device`` parameter ``"cpu"`` is handed to the test as
                        ``torch.device("cpu")``, which is not equal to the string ``"cpu"``: the suite's own
                        ``device == "cpu"`` branches (bitsandbytes narrows shapes and iterations on the CPU) take the
                        path of any other device, so the CPU runs the same bodies a ``neuron`` run does.  Test ids are
                        unchanged.  For a like-for-like suite time; a test that fails so is left out of the ratio.
  ``BNB_TIMES_FIRST``   a JSON-lines file of an earlier run (``BNB_TIMES_OUT`` of the CPU run): the kept tests that
                        passed there run first, in their order, then the rest (cases only the device runs), so a run
                        cut short still covers every test the two devices share.

Table: ``python -m benchmarks.bnb_test_times [--wall] CPU.jsonl NEURON.jsonl [cpu neuron]`` prints, per file and family, the
tests that passed in both runs (A, B), their CPU seconds (wall seconds with ``--wall``) in each, B/A, and B/A per iteration where the suite runs a family a
different number of times per device (``ITERS``); ``A.jsonl B.jsonl neuron neuron`` compares two neuron runs."""

import json
import os
import sys
import time

import pytest

# Iterations a family's test body runs per device, where the suite makes them differ: bitsandbytes@95f9af3
# tests/test_functional.py, test_gemv_4bit: ``iters = 10 if device == "cpu" else 100``.
ITERS = {"test_functional.py::test_gemv_4bit": {"cpu": 10, "neuron": 100}}


def _family(nodeid):
    """``file::function`` of a test id (the class left out): test_ops and test_functional both have a
    ``test_gemv_4bit``, with different bodies."""
    head = nodeid.split("[", 1)[0]
    parts = head.split("::")
    return f"{parts[0].rsplit('/', 1)[-1]}::{parts[-1]}"


def _positive(text, what):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise pytest.UsageError(f"{what}={text!r}: must be a positive integer")
    return n


def _family_strides(spec):
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, n = part.partition("=")
        if not sep or not name.strip():
            raise pytest.UsageError(f"BNB_TIMES_FAMILY_STRIDE: {part!r} is not family=N")
        out[name.strip()] = _positive(n.strip(), f"BNB_TIMES_FAMILY_STRIDE {name.strip()}")
    return out


def _stride_of(family, default, per_family):
    return per_family.get(family, per_family.get(family.rsplit("::", 1)[-1], default))


def _cpu_as_device(items):
    import torch
    for it in items:
        params = getattr(getattr(it, "callspec", None), "params", None)
        if params is not None and params.get("device") == "cpu":
            params["device"] = torch.device("cpu")


def pytest_collection_modifyitems(config, items):
    flag = os.environ.get("BNB_TIMES_CPU_AS_DEVICE", "0")
    if flag not in ("0", "1"):
        raise pytest.UsageError(f"BNB_TIMES_CPU_AS_DEVICE={flag!r}: must be 0 or 1")
    if flag == "1":
        _cpu_as_device(items)
    stride = _positive(os.environ.get("BNB_TIMES_STRIDE", "1") or "1", "BNB_TIMES_STRIDE")
    per_family = _family_strides(os.environ.get("BNB_TIMES_FAMILY_STRIDE", ""))
    first = os.environ.get("BNB_TIMES_FIRST")
    if stride == 1 and not per_family and not first:
        return
    seen, keep, drop = {}, [], []
    for it in items:
        f = _family(it.nodeid)
        n = seen.get(f, 0)
        seen[f] = n + 1
        (keep if n % _stride_of(f, stride, per_family) == 0 else drop).append(it)
    if first:
        passed = {k for k, r in _load(first, "cpu").items() if r["outcome"] == "passed"}
        dev = os.environ.get("BNB_TEST_DEVICE", "cpu")
        keep.sort(key=lambda it: _key(it.nodeid, dev) not in passed)    # stable: shared tests first, in order
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


_outcome = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, w0 = time.process_time(), time.perf_counter()
    _outcome[item.nodeid] = "passed"
    yield
    dt, wall = time.process_time() - t0, time.perf_counter() - w0
    out = os.environ.get("BNB_TIMES_OUT")
    if out:
        rec = {"nodeid": item.nodeid, "family": _family(item.nodeid), "outcome": _outcome.pop(item.nodeid),
               "cpu_s": round(dt, 4), "wall_s": round(wall, 4)}
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
    """Records of one or more runs (paths joined by commas: a slice run in parts), keyed by ``_key``."""
    out = {}
    for one in path.split(","):
        with open(one, encoding="utf-8") as f:
            out.update((_key(r["nodeid"], device), r) for r in map(json.loads, f) if r)
    return out


def _file(family):
    return family.split("::", 1)[0]


def _counts(recs):
    counts = {}
    for r in recs:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _ratio(b, a):
    return b / a if a else float("nan")


def table(cpu_path, dev_path, device="neuron", base="cpu", measure="cpu_s"):
    """Per file and family: the tests that passed in both runs, their CPU seconds in each (A, B), B/A, and B/A per
    iteration where the suite runs a family a different number of times per device (``ITERS``); per file the
    outcomes of each run, and the tests only B passed (cases A skips) apart.  ``base`` and ``device`` name the two
    runs' devices (two runs on one device compare before and after a change); ``measure`` is the record's field
    summed: ``cpu_s`` or ``wall_s`` (records of runs before stop 45 have no ``wall_s``)."""
    cpu, dev = _load(cpu_path, base), _load(dev_path, device)
    fams, only, lost = {}, {}, []
    for n, r in dev.items():
        f = _family(r["nodeid"])
        a = cpu.get(n)
        if a is not None and a["outcome"] == r["outcome"] == "passed":
            row = fams.setdefault(f, [0, 0.0, 0.0, 0.0])
            it = ITERS.get(f)
            row[0] += 1
            row[1] += a[measure]
            row[2] += r[measure]
            row[3] += r[measure] * (it[base] / it[device] if it else 1.0)   # B's time at A's iteration count
        elif r["outcome"] == "passed":
            row = only.setdefault(_file(f), [0, 0.0])
            row[0] += 1
            row[1] += r[measure]
        elif a is not None and a["outcome"] == "passed":
            lost.append(f"{r['nodeid']}: {r['outcome']} on {device}, passed on {base}")
    head = f"{'file / family':58s} {'tests':>5s} {'A s':>8s} {'B s':>9s} {'B/A':>6s} {'per iter':>8s}"
    lines = [head]
    tot = [0, 0.0, 0.0, 0.0]
    for fname in sorted({_file(f) for f in fams} | {_file(_family(r["nodeid"])) for r in dev.values()}):
        sub = [0, 0.0, 0.0, 0.0]
        lines.append(f"{fname}   [{base}: {_counts(r for r in cpu.values() if _file(_family(r['nodeid'])) == fname)}]"
                     f"   [{device}: {_counts(r for r in dev.values() if _file(_family(r['nodeid'])) == fname)}]")
        for f, row in sorted(((f, v) for f, v in fams.items() if _file(f) == fname), key=lambda kv: -kv[1][2]):
            lines.append(f"  {f.split('::', 1)[1]:56s} {row[0]:5d} {row[1]:8.2f} {row[2]:9.2f} "
                         f"{_ratio(row[2], row[1]):6.2f} {_ratio(row[3], row[1]):8.2f}")
            sub = [x + y for x, y in zip(sub, row)]
        lines.append(f"  {'file total (passed on both)':56s} {sub[0]:5d} {sub[1]:8.2f} {sub[2]:9.2f} "
                     f"{_ratio(sub[2], sub[1]):6.2f} {_ratio(sub[3], sub[1]):8.2f}")
        if fname in only:
            lines.append(f"  {'passed only on ' + device + ' (not in the ratio)':56s} {only[fname][0]:5d} "
                         f"{'':8s} {only[fname][1]:9.2f}")
        tot = [x + y for x, y in zip(tot, sub)]
    lines.append(f"{'total (passed on both)':58s} {tot[0]:5d} {tot[1]:8.2f} {tot[2]:9.2f} "
                 f"{_ratio(tot[2], tot[1]):6.2f} {_ratio(tot[3], tot[1]):8.2f}")
    lines.append(f"passed only on {device}: {sum(v[0] for v in only.values())} tests, "
                 f"{sum(v[1] for v in only.values()):.2f} s")
    for name, d in ((base, cpu), (device, dev)):
        what = "CPU" if measure == "cpu_s" else "wall"
        lines.append(f"{name}: {_counts(d.values())}; {sum(r[measure] for r in d.values()):.1f} s {what} over all "
                     f"recorded tests")
    lines += lost
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    measure = "wall_s" if args[:1] == ["--wall"] else "cpu_s"
    args = args[1:] if measure == "wall_s" else args
    if len(args) not in (2, 4):
        sys.exit("usage: python -m benchmarks.bnb_test_times [--wall] A.jsonl[,A2.jsonl] B.jsonl[,B2.jsonl] "
                 "[A_DEVICE B_DEVICE]  (default cpu neuron)")
    a_dev, b_dev = args[2:4] if len(args) == 4 else ("cpu", "neuron")
    try:
        print(table(args[0], args[1], device=b_dev, base=a_dev, measure=measure))
    except KeyError as e:
        sys.exit(f"a record has no {e} field: --wall needs runs recorded with wall times (stop 45 on)")
