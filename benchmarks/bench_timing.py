"""Timing-model benchmarks: shape-only against full simulation, and the scheduler's cost per instruction.

Usage: python benchmarks/bench_timing.py [--quick] [--repeats N] [--million] [--profile]

1. shape-only vs full: the same kernel simulated with numerics (execute=True) and without (execute=False); the
   two timelines must be identical.  Workloads: 2048^3 bf16 tiled matmul, 64 MiB fp32 add.
2. scheduling cost per instruction: ``trnsim.machine.schedule(cores)`` time divided by the instruction count,
   against a baseline measured in the same run: a bare Python loop that reads each record's engine, cost and
   operand lists (the floor of any per-instruction Python scheduler).
3. the 1 million instruction goal (``--million``; default 200,000, extrapolated): a streaming kernel (load,
   three engine instructions, store per 128x64 tile) run shape-only (with the cycle collector paused, as
   ``trnsim.profile`` does), then scheduled.  Aim: under 10 s in all.

BLAS is pinned to one thread (threadpoolctl) as in bench_sim.py.  Figures are medians of ``--repeats`` runs.
"""

import argparse
import time

import ml_dtypes
import numpy as np

import trnsim

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

from trnsim.kernels.jit import run_kernel  # noqa: E402
from trnsim.kernels.library.matmul import tensor_add, tiled_matmul  # noqa: E402
from trnsim.machine import schedule  # noqa: E402
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
            t_sched, tl = timed(lambda: schedule(r_shape.cores), repeats)
            same = schedule(r_full.cores) == tl
            rows.append((name, len(tl), t_full, t_shape, t_sched, same, tl.total_ns))
        print("1. shape-only against full simulation (simulation only; scheduling shown apart)")
        hdr = (f"{'workload':<24} {'instrs':>7} {'full s':>8} {'shape s':>8} {'full/shape':>10} "
               f"{'sched s':>8} {'same timeline':>13} {'simulated':>12}")
        print(hdr)
        print("-" * len(hdr))
        for name, n, tf, ts, tsc, same, tot in rows:
            print(f"{name:<24} {n:>7} {tf:>8.3f} {ts:>8.3f} {tf / ts:>9.1f}x {tsc:>8.3f} {str(same):>13} "
                  f"{tot / 1e3:>9.1f} us")

        # 2./3. scheduling cost and the 1M goal ------------------------------------------------------
        x = np.zeros((128, 64), np.float32)
        n_tiles = n_goal // 5
        t0 = time.perf_counter()
        with gc_paused():          # as trnsim.profile runs it
            res = run_kernel(stream, (x,), {"n": n_tiles}, (1,), "trn2", execute=False)
        t_issue = time.perf_counter() - t0
        n = len(res.instructions)
        t_sched, tl = timed(lambda: schedule(res.cores), 1 if n > 300_000 else repeats)
        t_base, _ = timed(lambda: baseline_loop(res.cores), repeats)
        print(f"\n2. scheduling cost per instruction (streaming kernel, {n:,} instructions, shape-only)")
        print(f"   schedule(): {t_sched:.2f} s = {t_sched / n * 1e6:.2f} us/instruction; bare record loop "
              f"{t_base / n * 1e6:.3f} us/instruction; ratio {t_sched / t_base:.0f}x")
        print(f"   simulated time {tl.total_ns / 1e6:.3f} ms, DMA utilisation {100 * tl.dma_utilisation:.0f}%")
        per = (t_issue + t_sched) / n
        print(f"\n3. shape-only issue {t_issue / n * 1e6:.2f} us/instruction + scheduling "
              f"{t_sched / n * 1e6:.2f} us/instruction = {per * 1e6:.2f} us/instruction")
        tag = "measured" if n >= 1_000_000 else "extrapolated"
        print(f"   1,000,000 instructions: {per * 1e6:.1f} s ({tag}); aim: under 10 s")

        if args.profile:
            import cProfile
            import pstats
            pr = cProfile.Profile()
            pr.enable()
            schedule(res.cores)
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
