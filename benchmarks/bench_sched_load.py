"""The scheduler's first use in a process: what a short run (a test, one fused kernel's costing) pays before its
first timeline, with numba's cache warm and (``--cold``) empty.

Usage: python benchmarks/bench_sched_load.py [--repeats N] [--rows N] [--cold]

Each measurement is a fresh Python process (``sys.executable``) that imports trnsim, records the shape-only stream
kernel (load, three engine instructions, store per 128x64 tile; ``--rows`` instructions, default 100) and then
times its first ``schedule()`` and a second one, in process CPU time and wall time; the first includes importing
numba and loading (or compiling) the compiled loop when the build chosen is the compiled one.  Rows: the default
build (``TRNSIM_SCHEDULER`` unset), ``TRNSIM_SCHEDULER=numba`` and ``=python``.  The warm rows run once untimed
first, so the cache holds every function they load.  ``--cold`` also times the default build and ``numba`` with an
empty ``NUMBA_CACHE_DIR`` (the compiled build compiles, as after an install: about a minute of CPU).  Figures: the best of ``--repeats``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
import numpy as np
import trnsim
nki = trnsim.install_nki()
import nki.isa as nisa
import nki.language as nl
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule


def stream(x, n):
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.activation(t, nl.exp, u)
        nisa.tensor_tensor(u, t, u, op=nl.add)
        nisa.dma_copy(out, u)
    return out


res = run_kernel(stream, (np.zeros((128, 64), np.float32),), {"n": int(sys.argv[1]) // 5}, (1,), "trn2",
                 execute=False)
numba_before = "numba" in sys.modules
c0, w0 = time.process_time(), time.perf_counter()
tl = schedule(res.cores)
tl.total_ns, tl.counters
c1, w1 = time.process_time(), time.perf_counter()
schedule(res.cores).counters
c2 = time.process_time()
print(json.dumps(dict(first_cpu=c1 - c0, first_wall=w1 - w0, second_cpu=c2 - c1, rows=len(res.instructions),
                      numba_before=numba_before, numba_after="numba" in sys.modules, total_ns=tl.total_ns)))
"""


def measure(rows, env_extra, repeats):
    env = dict(os.environ)
    env.pop("TRNSIM_SCHEDULER", None)
    env.update(env_extra)
    outs = []
    for _ in range(repeats):
        p = subprocess.run([sys.executable, "-c", _CHILD, str(rows)], capture_output=True, text=True, env=env,
                           timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-3000:])
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return min(outs, key=lambda o: o["first_cpu"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--cold", action="store_true", help="also the compiled build from an empty numba cache")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rows} instructions; best of {args.repeats} (process CPU)")
    cases = [("default (TRNSIM_SCHEDULER unset)", {}), ("TRNSIM_SCHEDULER=numba", {"TRNSIM_SCHEDULER": "numba"}),
             ("TRNSIM_SCHEDULER=python", {"TRNSIM_SCHEDULER": "python"})]
    for _, extra in cases:
        measure(args.rows, extra, 1)            # the cache holds what this build loads
    for name, extra in cases:
        o = measure(args.rows, extra, args.repeats)
        print(f"  {name:<34} first schedule {o['first_cpu']:6.3f} s CPU ({o['first_wall']:6.3f} s wall), "
              f"second {o['second_cpu'] * 1e3:6.1f} ms; numba imported: {o['numba_after']}")
    if args.cold:
        for name, extra in cases[:2]:
            with tempfile.TemporaryDirectory() as d:
                o = measure(args.rows, dict(extra, NUMBA_CACHE_DIR=d), 1)
            print(f"  {name + ', empty cache':<34} first schedule {o['first_cpu']:6.3f} s CPU ({o['first_wall']:6.3f} "
                  f"s wall); numba imported: {o['numba_after']}")


if __name__ == "__main__":
    main()
