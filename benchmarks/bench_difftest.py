"""Cost of recording with trnsim.difftest, against the same step unrecorded, in the same run.

Usage: python benchmarks/bench_difftest.py [--repeats N]

A small transformer-like model (tests/difftest/difftest_models.py: 2 blocks, dim 16) runs one forward and backward
step on CPU: unrecorded, recorded with inputs/outputs only, with every module's output, with every op's outputs,
and with module input gradients too.  Printed: median wall time per step and its ratio to the unrecorded step,
recorded tensors and bytes, then the time of `compare` of two such recordings.  Batches of the variants alternate,
so a change in machine load hits each alike.  Never part of the test pass/fail.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "difftest"))

import trnsim.difftest as dt  # noqa: E402
from difftest_models import tiny_lm  # noqa: E402

VARIANTS = [("unrecorded", None), ("io", {}), ("modules", dict(modules=True)),
            ("ops", dict(modules=True, ops=True)), ("all", dict(modules=True, ops=True, backward=True))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = tiny_lm()
    idx = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    root = tempfile.mkdtemp(prefix="bench-difftest-")
    info = {}

    def step(name, opts):
        if opts is None:
            model(idx).pow(2).mean().backward()
            return
        with dt.record(os.path.join(root, name), name="step", **opts) as rec:
            rec.input("idx", idx)
            out = model(idx)
            out.pow(2).mean().backward()
            rec.output("out", out)
        info[name] = (len(rec.entries), rec._bytes)

    for name, opts in VARIANTS:            # warm-up
        step(name, opts)
    times = {n: [] for n, _ in VARIANTS}
    for _ in range(args.repeats):
        for name, opts in VARIANTS:
            t0 = time.perf_counter()
            step(name, opts)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["unrecorded"])
    print(f"{'variant':<12}{'ms/step':>10}{'ratio':>8}{'tensors':>9}{'bytes':>10}")
    for name, _ in VARIANTS:
        m = statistics.median(times[name])
        n, b = info.get(name, (0, 0))
        print(f"{name:<12}{m * 1e3:>10.2f}{m / base:>8.1f}{n:>9}{b:>10}")
    ct = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        cmp = dt.compare(os.path.join(root, "all"), os.path.join(root, "all"))
        ct.append(time.perf_counter() - t0)
    print(f"compare of two 'all' recordings ({len(cmp.results)} tensors): {statistics.median(ct) * 1e3:.1f} ms "
          f"({statistics.median(ct) / base:.1f}x the unrecorded step)")


if __name__ == "__main__":
    main()
