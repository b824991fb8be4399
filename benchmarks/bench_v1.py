"""Cost of the legacy (neuronxcc.nki) front end against the v2 front end issuing the same instructions.

Usage: python benchmarks/bench_v1.py [--repeats N]

Workloads: the team's v1 kernels from tests/kernels/v1_team_kernels.py (masked 2-D SPMD add, tiled matmul with
`psum += nc_matmul`, masked softmax) against their v2 transcriptions in tests/kernels/test_v1.py, which issue the
identical instruction streams (checked here too).  Prints the wall time of each and the v1/v2 ratio, measured in
the same run; BLAS pinned to one thread.
"""

import argparse
import os
import sys

import ml_dtypes
import numpy as np

import trnsim

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "kernels"))
import test_v1  # noqa: E402
import v1_team_kernels as k1  # noqa: E402

from bench_common import blas_one_thread, timed  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    add2, mm2, sm2 = test_v1._v2_kernels(nki, nl, nisa)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 3000)).astype(np.float32)
    at = rng.standard_normal((1024, 512)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    s = rng.standard_normal((1000, 256)).astype(np.float32)
    cases = [("2-D SPMD add, masked edge, 1000x3000 fp32", k1.add_spmd[8, 6], add2[8, 6], (x, x)),
             ("tiled matmul bf16 512x1024x1024", k1.matmul_tiled, mm2, (at, b)),
             ("masked softmax 1000x256 fp32", k1.softmax[8], sm2[8], (s,))]
    blas_one_thread().__enter__()
    print(f"{'workload':45s} {'instr':>6s} {'v2 s':>8s} {'v1 s':>8s} {'v1/v2':>6s}")
    for name, kv1, kv2, args in cases:
        r1, r2 = kv1.run(*args), kv2.run(*args)
        assert test_v1._stream(r1) == test_v1._stream(r2), name
        t2 = timed(lambda: kv2.run(*args), a.repeats)[0]
        t1 = timed(lambda: kv1.run(*args), a.repeats)[0]
        print(f"{name:45s} {len(r1.instructions):6d} {t2:8.4f} {t1:8.4f} {t1 / t2:6.2f}")


if __name__ == "__main__":
    main()
