"""The long robustness campaign: random calls of every instruction (trnsim.isa.fuzz) on trn1, trn2 and trn3
cores; every exception other than NkiValidationError is a failure, and so is a memset that did not store its value.

    python benchmarks/fuzz_isa.py [--calls 1000000] [--seed 0] [--examples 3]

Prints the calls made, how many were accepted, refused with NkiValidationError, and failed otherwise (by
instruction and cause, with a reproducing example).  Exit status 1 when anything failed.  The suite runs a
bounded slice of the same generator under hypothesis (tests/isa/test_fuzz.py).
"""

import argparse
import random
import sys
import time
import warnings

from bench_common import blas_one_thread

from trnsim.isa.fuzz import Fuzzer, FuzzResult
from trnsim.machine import NeuronCore


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=3, help="reproducing examples to print")
    args = ap.parse_args(argv)
    targets = random.Random(args.seed + 1)
    fz = Fuzzer(random.Random(args.seed),
                lambda: NeuronCore(targets.choice(("trn1", "trn2", "trn3")), record=False))
    total = FuzzResult()
    t0 = time.perf_counter()
    step = 50_000
    with warnings.catch_warnings(), blas_one_thread():
        warnings.simplefilter("ignore")
        done = 0
        while done < args.calls:
            n = min(step, args.calls - done)
            total.merge(fz.run(n))
            done += n
            el = time.perf_counter() - t0
            print(f"  {done:9d} calls, {total.crashes} non-validation exceptions, {done / el:,.0f} calls/s",
                  flush=True)
    print(total.report())
    for k, (kw, tb) in list(total.examples.items())[:args.examples]:
        print(f"\n{k}\n  {kw}\n{tb}")
    return 1 if total.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
