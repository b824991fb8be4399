"""Timing-model benchmarks: shape-only against full simulation, and the scheduler's cost per instruction.

Usage: python benchmarks/bench_timing.py [--quick] [--repeats N] [--million] [--profile] [--cold-jit]

1. shape-only vs full: the same kernel simulated with numerics (execute=True) and without (execute=False); the
   two timelines must be identical.  Workloads: 2048^3 bf16 tiled matmul, 64 MiB fp32 add.
2. scheduling cost per instruction: ``trnsim.machine.schedule(cores)`` time divided by the instruction count,
   for the reference pure-Python loop (``impl="python"``) and the compiled loop over arrays (``impl="numba"``,
   ``trnsim/machine/sched_events.py``), against a baseline measured in the same run: a bare Python loop that
   reads each record's engine, cost and operand lists (the floor of any per-instruction Python scheduler).
   Also the compiled loop's first call in the process (numba import and loading its cache, or compiling) and,
   with ``--cold-jit``, its compile time with an empty cache (in a subprocess).
3. the 1 million instruction goal (``--million``; default 200,000, extrapolated): a streaming kernel (load,
   three engine instructions, store per 128x64 tile) run shape-only (with the cycle collector paused, as
   ``trnsim.profile`` does), then scheduled (compiled loop).  Aim: under 3 s in all.

BLAS is pinned to one thread (threadpoolctl) as in bench_sim.py.  Figures are medians of ``--repeats`` runs.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

import trnsim

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

from trnsim.kernels.jit import run_kernel  # noqa: E402
from trnsim.kernels.library.matmul import tensor_add, tiled_matmul  # noqa: E402
from trnsim.machine import sched_fast, schedule  # noqa: E402
from trnsim.profiling import gc_paused  # noqa: E402

from bench_common import blas_one_thread, threadpool_limits, timed  # noqa: E402


def stream(x, n):
    """n tiles: load, tensor_scalar, activation, tensor_tensor, store (5 instructions per tile)."""
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


def baseline_loop(cores):
    """The floor: touch each record's fields once."""
    acc = 0.0
    for c in cores:
        for r in c.instructions:
            acc += (r.cycles or r.ns or 0.0) + len(r.reads) + len(r.writes) + (r.engine == "dma")
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, one run each")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--million", action="store_true", help="run the full 1,000,000-instruction goal")
    ap.add_argument("--profile", action="store_true", help="cProfile the scheduler on the streaming kernel")
    ap.add_argument("--cold-jit", action="store_true", help="time the compiled loop's compile with an empty cache")
    args = ap.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    mm = 512 if args.quick else 2048
    add_rows = 2048 if args.quick else 32768
    n_goal = 1_000_000 if args.million else (20_000 if args.quick else 200_000)

    rng = np.random.default_rng(0)
    with blas_one_thread():
        print(f"threadpoolctl: {'BLAS pinned to 1 thread' if threadpool_limits else 'not installed'}; "
              f"median of {repeats} run(s)\n")
        # 1. shape-only vs full ------------------------------------------------------------------
        at = rng.standard_normal((mm, mm), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((mm, mm), dtype=np.float32).astype(ml_dtypes.bfloat16)
        a = rng.standard_normal((add_rows, 512), dtype=np.float32)
        c = rng.standard_normal((add_rows, 512), dtype=np.float32)
        rows = []
        for name, fn, fargs in ((f"matmul bf16 {mm}^3", tiled_matmul, (at, b)),
                                (f"add fp32 {a.nbytes / 2**20:.0f} MiB", tensor_add, (a, c))):
            t_full, r_full = timed(lambda: run_kernel(fn, fargs, {}, (1,), "trn2", execute=True), repeats)
            t_shape, r_shape = timed(lambda: run_kernel(fn, fargs, {}, (1,), "trn2", execute=False), repeats)
            t_sched, tl = timed(lambda: schedule(r_shape.cores, impl="python"), repeats)
            if sched_fast.fast_available():
                t0 = time.perf_counter()
                schedule(r_shape.cores, impl="numba")       # the first call loads (or compiles) the loop
                t_first = time.perf_counter() - t0
                t_fast, tl_fast = timed(lambda: schedule(r_shape.cores, impl="numba"), repeats)
            else:
                t_first = t_fast = float("nan")
                tl_fast = tl
            t_base, _ = timed(lambda: baseline_loop(r_shape.cores), repeats)
            same = schedule(r_full.cores) == tl == tl_fast
            rows.append((name, len(tl), t_full, t_shape, t_sched, t_fast, t_base, t_first, same, tl.total_ns))
        print("1. shape-only against full simulation (simulation only; scheduling shown apart: us/instruction of the "
              "reference (py) and compiled (nb) scheduler, and their ratio to the bare record loop)")
        hdr = (f"{'workload':<24} {'instrs':>7} {'full s':>8} {'shape s':>8} {'full/shape':>10} "
               f"{'py us/i':>8} {'nb us/i':>8} {'py/loop':>8} {'nb/loop':>8} {'same timeline':>13} {'simulated':>12}")
        print(hdr)
        print("-" * len(hdr))
        for name, n, tf, ts, tsc, tfa, tb, tfirst, same, tot in rows:
            print(f"{name:<24} {n:>7} {tf:>8.3f} {ts:>8.3f} {tf / ts:>9.1f}x {tsc / n * 1e6:>8.2f} "
                  f"{tfa / n * 1e6:>8.2f} {tsc / tb:>7.1f}x {tfa / tb:>7.1f}x {str(same):>13} {tot / 1e3:>9.1f} us")
        print(f"   first compiled call in this process (numba import + cache load or compile): {rows[0][7]:.2f} s")
        if args.cold_jit:
            with tempfile.TemporaryDirectory() as d:
                code = ("import sys, time, numpy as np; sys.path.insert(0, %r); import bench_timing as b; "
                        "r = b.run_kernel(b.stream, (np.zeros((128, 64), np.float32),), {'n': 4}, (1,), 'trn2', "
                        "execute=False); t = time.perf_counter(); b.schedule(r.cores, impl='numba'); "
                        "print(f'{time.perf_counter() - t:.2f} s')" % os.path.dirname(os.path.abspath(__file__)))
                env = dict(os.environ, NUMBA_CACHE_DIR=d)
                out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
                print(f"   cold compile (empty cache, subprocess): {out.stdout.strip()} {out.stderr[-300:]}")

        # 2./3. scheduling cost and the 1M goal ------------------------------------------------------
        x = np.zeros((128, 64), np.float32)
        n_tiles = n_goal // 5
        t0 = time.perf_counter()
        with gc_paused():          # as trnsim.profile runs it
            res = run_kernel(stream, (x,), {"n": n_tiles}, (1,), "trn2", execute=False)
        t_issue = time.perf_counter() - t0
        n = len(res.instructions)
        reps = 1 if n > 300_000 else repeats
        t_sched, tl = timed(lambda: schedule(res.cores, impl="python"), reps)
        t_fast, tl_fast = timed(lambda: schedule(res.cores, impl="numba"), reps)
        t_base, _ = timed(lambda: baseline_loop(res.cores), repeats)
        print(f"\n2. scheduling cost per instruction (streaming kernel, {n:,} instructions, shape-only)")
        print(f"   bare record loop {t_base / n * 1e6:.3f} us/instruction")
        print(f"   schedule(impl='python'): {t_sched:.2f} s = {t_sched / n * 1e6:.2f} us/instruction; "
              f"ratio to the loop {t_sched / t_base:.1f}x")
        print(f"   schedule(impl='numba'):  {t_fast:.2f} s = {t_fast / n * 1e6:.2f} us/instruction; "
              f"ratio to the loop {t_fast / t_base:.1f}x; speed-up {t_sched / t_fast:.1f}x; identical timeline: "
              f"{tl == tl_fast}")
        print(f"   simulated time {tl.total_ns / 1e6:.3f} ms, DMA utilisation {100 * tl.dma_utilisation:.0f}%")
        per = (t_issue + t_fast) / n
        print(f"\n3. shape-only issue {t_issue / n * 1e6:.2f} us/instruction + scheduling "
              f"{t_fast / n * 1e6:.2f} us/instruction = {per * 1e6:.2f} us/instruction "
              f"(issue {t_issue / t_base:.1f}x the loop, scheduling {t_fast / t_base:.1f}x)")
        tag = "measured" if n >= 1_000_000 else "extrapolated"
        print(f"   1,000,000 instructions: {per * 1e6:.1f} s ({tag}: issue {t_issue / n * 1e6:.1f} s + schedule "
              f"{t_fast / n * 1e6:.1f} s); aim: under 3 s")

        if args.profile:
            import cProfile
            import pstats
            pr = cProfile.Profile()
            pr.enable()
            schedule(res.cores, impl="numba")
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
