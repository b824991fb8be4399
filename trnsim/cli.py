"""The ``trnsim`` command."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _demo(args):
    import ml_dtypes

    from .kernels import simulate
    from .kernels.library.matmul import tiled_matmul
    from .targets import get_target

    tg = get_target(args.target)
    rng = np.random.default_rng(0)
    K, M, N = args.k, args.m, args.n
    at = rng.standard_normal((K, M)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    t0 = time.perf_counter()
    res = simulate(tiled_matmul, target=tg).run(at, b)
    wall = time.perf_counter() - t0
    out = res.outputs.astype(np.float64)
    ref = at.astype(np.float64).T @ b.astype(np.float64)
    err = np.max(np.abs(out - ref)) / max(1e-30, np.max(np.abs(ref)))
    # bf16 output: one rounding of the fp32 accumulation, relative error up to 2^-8 of the largest value
    tol = 2.0 ** -7
    core = res.cores[0]
    print(f"trnsim demo: tiled bf16 matmul [{M}x{K}] @ [{K}x{N}] on a simulated {tg.marketing_name} "
          f"NeuronCore ({tg.name})")
    print(f"  instructions: {len(core.instructions)} "
          + ", ".join(f"{k} x{v}" for k, v in sorted(core.instruction_counts().items())))
    busy = core.busy_ns_by_engine()
    print("  engine busy time (sum of instruction costs, before overlap): "
          + ", ".join(f"{e} {ns / 1000:.1f} us" for e, ns in sorted(busy.items())))
    print(f"  SBUF peak {core.sbuf.peak} B/partition of {core.sbuf.capacity}; PSUM peak {core.psum.peak} B/partition "
          f"of {core.psum.capacity}")
    print(f"  max relative error vs float64 NumPy: {err:.2e} (tolerance {tol:.1e}) -> "
          f"{'OK' if err <= tol else 'MISMATCH'}")
    print(f"  simulated in {wall * 1000:.0f} ms of host time")
    return 0 if err <= tol else 1


def main(argv=None):
    p = argparse.ArgumentParser(prog="trnsim", description="Trainium NeuronCore simulator")
    sub = p.add_subparsers(dest="cmd")
    d = sub.add_parser("demo", help="run a built-in NKI kernel on a simulated NeuronCore and check it")
    d.add_argument("--target", default=None, help="trn1, trn2 (default) or trn3")
    d.add_argument("--m", type=int, default=256)
    d.add_argument("--k", type=int, default=512)
    d.add_argument("--n", type=int, default=1024)
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return _demo(args)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
