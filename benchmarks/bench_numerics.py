"""The per-element numerics of large arrays: fp8/bf16 rounding and the fp8 encodings, new path against old in one
run (issue 31: ml_dtypes' per-element ``astype`` was ~28% of the simulate time of rmsnorm_quant-like tests).

Usage: python benchmarks/bench_numerics.py [--runs N] [--sizes 65536,4194304]
       python benchmarks/bench_numerics.py --exhaustive [--formats float8_e4m3fn,...]

Timing: for each size (elements; 65536 is a [128, 512] tile, 4194304 a 16 MiB float32 array) and conversion, the
median of ``--runs`` process-CPU times of the old path (ml_dtypes element by element: ``dtypes._via``,
``_to_real_ref``, ``_from_real_ref``; bf16: the whole-array ``_bf16_round_block``) and the new one
(``dtypes``' table rounders and ``to_real``/``from_real``, the blocked ``_bf16_round``), run alternately, and
their ratio.  Inputs: normal-distributed values scaled into each format's range, with NaN, infinities, zeros and
subnormals mixed in.  Every new result is checked bit for bit against the old one before it is timed.

``--exhaustive``: every one of the 2**32 float32 bit patterns, in blocks of 2**24, through the new and the old
rounding and encoding of each fp8 format (and bf16 against its whole-array form), compared bit for bit; every
fp8 bit pattern decoded both ways.  Several minutes per format on one core.

Measured (the shared 2-core machine under a load of ~12, process CPU time, ``--runs 5``; old/new ratio, 65536 and
4194304 elements): fp8 round 2.7-6.4x and 5.0-5.4x (1.1-1.6 ns an element, from 7-9), ``to_real`` 2.5-4.3x and
2.2-3.6x, ``from_real`` 5.0-7.0x and 4.2-6.3x; bf16 round 1.0x and 1.5x (blocks only from 262144 elements).
Below ``dtypes.TABLE_MIN`` (2048) elements fp8 goes through the reference (the table's fixed cost made it 0.2-0.8x
at 128 and 1,024 elements); with that, 0.8-1.0x at 128-1,024 elements (the extra call), 1.2-2.0x at 4,096.
``--exhaustive``: identical on all 2**32 float32 bit patterns for float8_e4m3, float8_e4m3fn, float8_e5m2,
float8_e8m0fnu and bfloat16 (ml_dtypes 0.7.0, NumPy 2.4.6).
"""

import argparse
import sys
import time

import bench_common  # noqa: F401  (first: pins BLAS threads before NumPy loads)

import numpy as np

from bench_common import cpu_timed
from trnsim.memory import dtypes as D

FP8 = D._FP8_NAMES


def _inputs(n, dt, seed=0):
    rng = np.random.default_rng(seed)
    scale = dt.max / 8 if dt.name != "bfloat16" else 1e3
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    k = max(1, n // 1000)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-42], np.float32)
    x[rng.integers(0, n, k)] = specials[rng.integers(0, specials.size, k)]
    return x


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize and bool(
        (a.view(f"u{a.dtype.itemsize}") == b.view(f"u{b.dtype.itemsize}")).all())


def _cases(dt):
    """(conversion, old function, new function, input maker) for dtype ``dt``."""
    if dt.name == "bfloat16":
        return [("round", lambda x: D._bf16_round_block(x), lambda x: D._bf16_round(x), lambda x: x)]
    return [
        ("round", dt._round.reference, dt._round, lambda x: x),
        ("to_real", lambda x: D._to_real_ref(dt, x), lambda x: D.to_real(dt, x), lambda x: dt._round(x)),
        ("from_real", lambda c: D._from_real_ref(dt, c), lambda c: D.from_real(dt, c),
         lambda x: D.to_real(dt, dt._round(x))),
    ]


def timing(sizes, runs):
    print(f"{'dtype':16} {'conversion':10} {'elements':>9} {'old ns/el':>10} {'new ns/el':>10} {'old/new':>8}")
    for name in FP8 + ("bfloat16",):
        dt = D.DTYPES[name]
        for conv, old, new, make in _cases(dt):
            for n in sizes:
                x = make(_inputs(n, dt))
                if not _same(old(x), new(x)):
                    sys.exit(f"{name} {conv} n={n}: the new path's bits differ from the old path's")
                reps = max(runs, int(runs * 4194304 // n // 16))
                t_old, t_new = [], []
                for _ in range(reps):          # alternated, so a load burst hits both
                    t_old.append(cpu_timed(lambda: old(x), 1)[0])
                    t_new.append(cpu_timed(lambda: new(x), 1)[0])
                to, tn = float(np.median(t_old)), float(np.median(t_new))
                print(f"{name:16} {conv:10} {n:9d} {to / n * 1e9:10.2f} {tn / n * 1e9:10.2f} "
                      f"{(to / tn if tn else float('inf')):8.1f}")


def exhaustive(names):
    block = 1 << 24
    for name in names:
        dt = D.DTYPES[name]
        t0 = time.perf_counter()
        bad = 0
        for start in range(0, 1 << 32, block):
            x = np.arange(start, start + block, dtype=np.uint64).astype(np.uint32).view(np.float32)
            if name == "bfloat16":
                bad += not _same(D._bf16_round(x), D._bf16_round_block(x))
                continue
            bad += not _same(dt._round(x), dt._round.reference(x))
            bad += not _same(D.to_real(dt, x), D._to_real_ref(dt, x))
        if name != "bfloat16":
            c = np.arange(256, dtype=np.uint8).view(dt.np)
            bad += not _same(D.from_real(dt, c), D._from_real_ref(dt, c))
        print(f"{name}: every float32 bit pattern: {'identical' if not bad else f'{bad} blocks DIFFER'} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        if bad:
            sys.exit(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--sizes", default="65536,4194304")
    ap.add_argument("--exhaustive", action="store_true")
    ap.add_argument("--formats", default=",".join(FP8 + ("bfloat16",)))
    a = ap.parse_args(argv)
    if a.exhaustive:
        exhaustive(a.formats.split(","))
    else:
        timing([int(s) for s in a.sizes.split(",")], a.runs)


if __name__ == "__main__":
    main()
