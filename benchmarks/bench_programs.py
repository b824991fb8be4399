"""Cost of running a launch's programs concurrently (machine/programs.py) and of the per-instruction live-range
tracking for capacity (machine/capacity.py), as ratios against baselines measured in the same run.

    python benchmarks/bench_programs.py

1. The same 10,000 instructions as one program, and as two interleaved programs of 5,000 (LNC=2).
2. 10,000 instructions with the live-range tracking, and with it replaced by a bare counter.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import blas_one_thread, timed  # noqa: E402

import trnsim.kernels.nki as nki  # noqa: E402
import trnsim.kernels.nki.isa as nisa  # noqa: E402
import trnsim.kernels.nki.language as nl  # noqa: E402
from trnsim.machine.core import NeuronCore  # noqa: E402


@nki.jit
def chain(x, n):
    pid = nl.program_id(0)
    t = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(t, x[pid * 128:(pid + 1) * 128, :])
    for _ in range(n):
        nisa.tensor_scalar(t, t, nl.add, 1.0)
    return x


def main(repeats=3):
    x = np.zeros((256, 16), np.float32)
    with blas_one_thread():
        one, _ = timed(lambda: chain(x, 10_000), repeats)
        two, _ = timed(lambda: chain[2](x, 5_000), repeats)
        print(f"10,000 instructions: 1 program {one:.3f} s, 2 interleaved programs {two:.3f} s, "
              f"ratio {two / one:.2f}")
        tracked, _ = timed(lambda: chain(x, 10_000), repeats)
        orig = NeuronCore._occupy

        def bare(self, writes, reads, loc):
            self.occupancy.seq += 1
        NeuronCore._occupy = bare
        try:
            untracked, _ = timed(lambda: chain(x, 10_000), repeats)
        finally:
            NeuronCore._occupy = orig
        print(f"10,000 instructions: live-range tracking {tracked:.3f} s, without {untracked:.3f} s, "
              f"ratio {tracked / untracked:.2f}")


if __name__ == "__main__":
    main()
