"""Where the 2048^3 bf16 tiled matmul's time goes, against the bare NumPy tile loop (issue 14's matmul aim).

Usage: python benchmarks/bench_matmul_parts.py [--runs N] [--size S]

One process, every measurement interleaved with the others run by run (so a load burst hits all of them), best
(minimum) of ``--runs`` process-CPU times after one warm-up run each:

  sim      trnsim.jit(tiled_matmul).run: the whole functional simulation (outputs, records, capacity)
  shape    the same kernel shape-only (execute=False): the front end, records and capacity, no numerics
  mirror   the NumPy calls the simulator makes for this kernel, with nothing around them: the input
           conversions (bf16 -> float32 storage), a copy into a new array per DMA, the matmul into PSUM (the
           first of each output tile written straight into it, the others added), bf16 rounding of each output
           tile, the copy out, the output conversion
  numpy    bench_sim.numpy_matmul: the bare NumPy loop the aim is stated against

and the derived figures: sim / numpy (the aim: <= 1.3x), mirror - numpy (what the simulator's numerics cost
beyond the bare loop: the conversions), sim - shape - mirror (the numerics' Python around the NumPy calls, plus
whatever running them between the front end's work costs).  For base-vs-branch comparisons run this in
alternated processes (branch, base, branch, ...) with the base tree on PYTHONPATH, from a directory holding no
``trnsim/``, and compare within a pair.
"""

import argparse
import os
import sys
import time

import bench_common  # noqa: F401  (first: pins BLAS threads before NumPy loads)

import ml_dtypes
import numpy as np

import trnsim

nki = trnsim.install_nki()

from bench_common import blas_note, blas_one_thread  # noqa: E402
from bench_sim import numpy_matmul  # noqa: E402
from trnsim.kernels.jit import run_kernel  # noqa: E402
from trnsim.kernels.library.matmul import tiled_matmul  # noqa: E402
from trnsim.memory.dtypes import DTYPES, from_real, to_real  # noqa: E402

BF16 = DTYPES["bfloat16"]


def mirror(at, b, TK=128, TM=128, TN=512):
    """The simulator's NumPy calls for tiled_matmul, bare (see the module docstring)."""
    A = from_real(BF16, at)
    B = from_real(BF16, b)
    K, M = A.shape
    N = B.shape[1]
    out = np.empty(M * N, np.float32).reshape(M, N)
    for m in range(M // TM):
        for n in range(N // TN):
            acc = np.empty(TM * TN, np.float32).reshape(TM, TN)
            for k in range(K // TK):
                a_t = np.empty(TK * TM, np.float32).reshape(TK, TM)
                np.copyto(a_t, A[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM], casting="unsafe")
                b_t = np.empty(TK * TN, np.float32).reshape(TK, TN)
                np.copyto(b_t, B[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN], casting="unsafe")
                if k == 0:
                    np.matmul(a_t.T, b_t, out=acc)
                else:
                    np.add(acc, a_t.T @ b_t, out=acc)
            res = np.empty(TM * TN, np.float32).reshape(TM, TN)
            # round to bf16 (nearest even) into the tile's float32 storage: what trnsim stores (a NaN is kept whole
            # here, trnsim keeps its upper half; these products hold no NaN)
            bits = acc.view(np.uint32)
            r = res.view(np.uint32)
            np.right_shift(bits, 16, out=r)
            r &= 1
            r += np.uint32(0x7FFF)
            r += bits
            r &= np.uint32(0xFFFF0000)
            nan = np.isnan(acc)
            if nan.any():
                np.copyto(res, acc, where=nan)
            np.copyto(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], res, casting="unsafe")
    return to_real(BF16, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each part (minimum taken); default 5")
    ap.add_argument("--size", type=int, default=2048, help="M = N = K; default 2048")
    args = ap.parse_args()
    s = args.size
    rng = np.random.default_rng(0)
    at = rng.standard_normal((s, s), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((s, s), dtype=np.float32).astype(ml_dtypes.bfloat16)
    at32, b32 = at.astype(np.float32), b.astype(np.float32)
    parts = {
        "sim": lambda: run_kernel(tiled_matmul, (at, b), {}, (1,), "trn2"),
        "shape": lambda: run_kernel(tiled_matmul, (at, b), {}, (1,), "trn2", execute=False),
        "mirror": lambda: mirror(at, b),
        "numpy": lambda: numpy_matmul(at32, b32),
    }
    best = {}
    with blas_one_thread():
        first = {k: f() for k, f in parts.items()}       # warm-up (and the outputs, compared below)
        for _ in range(args.runs):
            for k, f in parts.items():
                t0 = time.process_time()
                f()
                t = time.process_time() - t0
                best[k] = min(best.get(k, t), t)
    same = (np.asarray(first["sim"].outputs).view(np.uint16) == first["mirror"].view(np.uint16)).all()
    print(f"trnsim from {os.path.dirname(trnsim.__file__)}; {blas_note()}; process CPU time, best of "
          f"{args.runs}; load average {os.getloadavg()[0]:.2f}")
    print(f"tiled_matmul {s}^3 bf16: simulator output bit-identical to the mirror's: {bool(same)}")
    for k in parts:
        print(f"  {k:8s} {best[k]:.4f} s")
    print(f"  sim / numpy            {best['sim'] / best['numpy']:.3f}x  (aim: <= 1.3x)")
    print(f"  mirror - numpy         {best['mirror'] - best['numpy']:+.4f} s  (the numerics beyond the bare loop)")
    print(f"  sim - shape - mirror   {best['sim'] - best['shape'] - best['mirror']:+.4f} s  "
          "(the numerics' Python, and running between the front end's work)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
