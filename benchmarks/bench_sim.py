"""Simulator speed against bare NumPy doing the same tile operations.

Usage: python benchmarks/bench_sim.py [--quick] [--repeats N] [--profile]

Workloads (full sizes; --quick shrinks them):
  1. bf16 tiled matmul 2048x2048x2048 (trnsim.kernels.library.matmul.tiled_matmul) against a NumPy loop over
     the same 128x128x512 tiles (float32 arrays holding bf16-exact values, one bf16 rounding per output tile).
  2. fp32 elementwise add, 64 MiB per operand, shape (32768, 512) (tensor_add) against a NumPy loop over
     128x512 tiles (copy in, add, copy out).
  3. small-tile throughput: N nisa.tensor_tensor instructions on 128x64 fp32 SBUF tiles; instructions/s is
     the count in SimulationResult.cores[0].instructions divided by the process CPU time.

BLAS is pinned to one thread for every run, simulator and NumPy alike (bench_common); times are process CPU time.
"""

import argparse

import bench_common  # noqa: F401  (first: pins BLAS threads before NumPy loads)

import ml_dtypes
import numpy as np

import trnsim

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

from trnsim.kernels.library.matmul import tensor_add, tiled_matmul  # noqa: E402

from bench_common import blas_note, blas_one_thread, cpu_timed as timed  # noqa: E402


# ---------------------------------------------------------------- bare NumPy floors

def numpy_matmul(at32, b32, TK=128, TM=128, TN=512):
    K, M = at32.shape
    _, N = b32.shape
    TN = min(TN, N)
    out = np.empty((M, N), dtype=np.float32)
    for m in range(M // TM):
        for n in range(N // TN):
            acc = np.zeros((TM, TN), dtype=np.float32)
            for k in range(K // TK):
                a_t = at32[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM].copy()
                b_t = b32[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN].copy()
                acc += np.matmul(a_t.T, b_t)
            res = acc.astype(ml_dtypes.bfloat16).astype(np.float32)
            out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN] = res
    return out


def numpy_add(a, b, P=128):
    R, C = a.shape
    out = np.empty_like(a)
    for r in range(R // P):
        ta = a[r * P:(r + 1) * P, :].copy()
        tb = b[r * P:(r + 1) * P, :].copy()
        np.add(ta, tb, out=ta)
        out[r * P:(r + 1) * P, :] = ta
    return out


def numpy_small(x, y, n_instr):
    ta = x.copy()
    tb = y.copy()
    for _ in range(n_instr):
        np.add(ta, tb, out=ta)
    return ta


# ---------------------------------------------------------------- small-tile kernel

def make_small_kernel(n_instr):
    def small_tiles(x, y):
        P, F = x.shape
        ta = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        tb = nl.ndarray((P, F), dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(ta, x)
        nisa.dma_copy(tb, y)
        for _ in range(n_instr):
            nisa.tensor_tensor(ta, ta, tb, op=nl.add)
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
        nisa.dma_copy(out, ta)
        return out
    return small_tiles


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, one run each")
    ap.add_argument("--repeats", type=int, default=None, help="runs per measurement (median); default 3, 1 with --quick")
    ap.add_argument("--profile", action="store_true", help="cProfile one simulator run of each workload")
    args = ap.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)

    mm = 512 if args.quick else 2048
    add_rows = 2048 if args.quick else 32768
    n_small = 2000 if args.quick else 20000

    rng = np.random.default_rng(0)
    rows = []

    with blas_one_thread():
        # 1. matmul
        at = rng.standard_normal((mm, mm), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((mm, mm), dtype=np.float32).astype(ml_dtypes.bfloat16)
        at32, b32 = at.astype(np.float32), b.astype(np.float32)
        kmm = trnsim.jit(tiled_matmul)
        sim_t, res = timed(lambda: kmm.run(at, b), repeats)
        np_t, ref = timed(lambda: numpy_matmul(at32, b32), repeats)
        sim_out = np.asarray(res.outputs).astype(np.float32)
        err = float(np.max(np.abs(sim_out - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
        rows.append((f"matmul bf16 {mm}^3", sim_t, np_t, len(res.cores[0].instructions), err))

        # 2. elementwise add
        a = rng.standard_normal((add_rows, 512), dtype=np.float32)
        c = rng.standard_normal((add_rows, 512), dtype=np.float32)
        kadd = trnsim.jit(tensor_add)
        sim_t, res = timed(lambda: kadd.run(a, c), repeats)
        np_t, ref = timed(lambda: numpy_add(a, c), repeats)
        err = float(np.max(np.abs(np.asarray(res.outputs) - ref)))
        mib = a.nbytes / 2**20
        rows.append((f"add fp32 {mib:.0f} MiB ({add_rows}x512)", sim_t, np_t, len(res.cores[0].instructions), err))

        # 3. small tiles
        x = rng.standard_normal((128, 64), dtype=np.float32) * 1e-3
        y = rng.standard_normal((128, 64), dtype=np.float32) * 1e-6
        ksm = trnsim.jit(make_small_kernel(n_small))
        sim_t, res = timed(lambda: ksm.run(x, y), repeats)
        np_t, ref = timed(lambda: numpy_small(x, y, n_small), repeats)
        err = float(np.max(np.abs(np.asarray(res.outputs) - ref)))
        rows.append((f"tensor_tensor 128x64 x{n_small}", sim_t, np_t, len(res.cores[0].instructions), err))

        if args.profile:
            import cProfile
            import pstats
            for name, fn in (("matmul", lambda: kmm.run(at, b)), ("add", lambda: kadd.run(a, c)),
                             ("small", lambda: ksm.run(x, y))):
                pr = cProfile.Profile()
                pr.enable()
                fn()
                pr.disable()
                print(f"\n=== cProfile: {name} (top 10 by cumulative time) ===")
                pstats.Stats(pr).sort_stats("cumulative").print_stats(10)

    print(f"process CPU time; {blas_note()}; median of {repeats} run(s)")
    hdr = f"{'workload':<32} {'sim s':>9} {'numpy s':>9} {'ratio':>8} {'instrs':>8} {'instr/s':>10} {'max err':>9}"
    print(hdr)
    print("-" * len(hdr))
    for name, st, nt, ni, err in rows:
        print(f"{name:<32} {st:>9.3f} {nt:>9.3f} {st / nt:>7.1f}x {ni:>8d} {ni / st:>10.0f} {err:>9.2g}")
    print("aims (issue 14): matmul <= 1.3x bare NumPy; >= 200,000 small-tile instructions/s")


if __name__ == "__main__":
    main()
