"""Issue-path speed: the cost of issuing an instruction from a kernel, with and without the issue cache
(trnsim/kernels/issue_cache.py), measured in the same run.

Usage: python benchmarks/bench_issue.py [--quick] [--million] [--matmul] [--repeats N]

1. shape-only streaming kernel (load, three engine instructions, store per 128x64 tile; as bench_timing.py):
   issue time per instruction with the cache off and on (loop replay off), and with the loop-body replay on
   (its ratio against replay off in the same run), the compiled scheduler's time, and the total for
   1,000,000 instructions (measured with --million, else extrapolated from 200,000).  Baseline in the same run:
   a bare Python loop making the same calls to a function that does nothing (the floor of any Python front end).
   Then the same stream as most kernels write it: defined inside a function (a closure), its instructions in
   helper functions, a branch on the loop index; each issued with the loop replay off (the general path) and on,
   and scheduled.
2. functional small tiles: nisa.tensor_tensor on 128x64 fp32 SBUF tiles, instructions/s with the cache off and
   on, against a NumPy loop of the same adds.
3. (--matmul) 2048^3 bf16 tiled matmul, functional, against the bare NumPy tile loop of bench_sim.py.
4. library kernels, shape-only: issue time with the cache off and on (loop replay off), and with the loop replay
   (trnsim/kernels/loop_replay.py) on, and the simulated time (identical: neither changes the record).

Figures are medians of --repeats runs in process CPU time (``time.process_time``: other processes on the machine
do not count), BLAS pinned to one thread (bench_common, imported before NumPy).  Each figure is printed as a
ratio against its baseline measured in the same run.  Run against a trnsim without the issue cache
(PYTHONPATH=<older tree>), the "cache on" rows repeat "cache off".
"""

import argparse
import gc
import statistics
import time

import bench_common  # noqa: F401  (first: pins BLAS threads before NumPy loads)

import ml_dtypes
import numpy as np

import trnsim

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

try:
    from trnsim.kernels import issue_cache  # noqa: E402
except ImportError:         # a trnsim from before the issue cache (the "before" run of a comparison)
    issue_cache = None
try:
    from trnsim.kernels import loop_replay  # noqa: E402
except ImportError:         # a trnsim from before the loop replay
    loop_replay = None
from trnsim.kernels.jit import run_kernel  # noqa: E402
from trnsim.machine import schedule  # noqa: E402
from trnsim.profiling import gc_paused  # noqa: E402

from bench_common import blas_note, blas_one_thread, cpu_timed as timed  # noqa: E402
from bench_sim import make_small_kernel, numpy_matmul, numpy_small  # noqa: E402
from bench_timing import stream  # noqa: E402


def make_stream_closure():
    """``stream`` as a kernel factory writes it: defined inside a function, reading the factory's names."""
    isa, lang, scale = nisa, nl, 2.0

    def stream_closure(x, n):
        P, F = x.shape
        out = lang.ndarray((P, F), dtype=x.dtype, buffer=lang.shared_hbm)
        for i in range(n):
            t = lang.ndarray((P, F), dtype=x.dtype, buffer=lang.sbuf)
            isa.dma_copy(t, x)
            u = lang.ndarray((P, F), dtype=x.dtype, buffer=lang.sbuf)
            isa.tensor_scalar(u, t, lang.multiply, scale)
            isa.activation(t, lang.exp, u)
            isa.tensor_tensor(u, t, u, op=lang.add)
            isa.dma_copy(out, u)
        return out
    return stream_closure


def _load_tile(x, P, F):
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    return t


def _compute(t, P, F):
    u = nl.ndarray((P, F), dtype=t.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(u, t, nl.multiply, 2.0)
    nisa.activation(t, nl.exp, u)
    nisa.tensor_tensor(u, t, u, op=nl.add)
    return u


def stream_helpers(x, n):
    """``stream`` with its body in helper functions."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = _load_tile(x, P, F)
        u = _compute(t, P, F)
        nisa.dma_copy(out, u)
    return out


def stream_branch(x, n):
    """``stream`` with a branch on the index: every other tile scaled by the Vector Engine, the others by the
    Scalar Engine (five instructions per tile either way)."""
    P, F = x.shape
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(n):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        if i % 2 == 0:
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        else:
            nisa.activation(u, nl.copy, t, scale=2.0)
        nisa.activation(t, nl.exp, u)
        nisa.tensor_tensor(u, t, u, op=nl.add)
        nisa.dma_copy(out, u)
    return out


def _noop(*args, **kwargs):
    return None


def bare_loop(x, n):
    """The same calls as ``stream`` to a function that does nothing (no allocation, no instruction)."""
    t = u = out = x
    mul, exp, add = nl.multiply, nl.exp, nl.add
    for _ in range(n):
        _noop(t, x)
        _noop(u, t, mul, 2.0)
        _noop(t, exp, u)
        _noop(u, t, u, op=add)
        _noop(out, u)
    return out


def bare_matmuls(at32, b32, TK=128, TM=128, TN=512):
    """Only the tile matmuls of ``numpy_matmul`` (on contiguous tiles cut once beforehand)."""
    K, M = at32.shape
    N = b32.shape[1]
    a_t = [[at32[k:k + TK, m:m + TM].copy() for m in range(0, M, TM)] for k in range(0, K, TK)]
    b_t = [[b32[k:k + TK, n:n + TN].copy() for n in range(0, N, TN)] for k in range(0, K, TK)]
    t0 = time.process_time()
    for m in range(M // TM):
        for n in range(N // TN):
            for k in range(K // TK):
                np.matmul(a_t[k][m].T, b_t[k][n])
    return time.process_time() - t0


def with_cache(on, fn):
    if issue_cache is None:
        return fn()
    prev = issue_cache.set_enabled(on)
    try:
        return fn()
    finally:
        issue_cache.set_enabled(prev)


def with_replay(on, fn):
    if loop_replay is None:
        return fn()
    prev = loop_replay.set_enabled(on)
    try:
        return fn()
    finally:
        loop_replay.set_enabled(prev)


def shape_only(fn, args, kw):
    with gc_paused():          # as trnsim.profile runs it
        return run_kernel(fn, args, kw, (1,), "trn2", execute=False)


def lib_cases():
    from trnsim.kernels.library import elementwise, normalization, reduction, softmax
    from trnsim.kernels.library.matmul import tensor_add, tiled_matmul
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    b = lambda *s: r.standard_normal(s).astype(ml_dtypes.bfloat16)  # noqa: E731
    return {
        "tiled_matmul 1024^3 bf16": (tiled_matmul, (b(1024, 1024), b(1024, 1024))),
        "tensor_add 4096x512": (tensor_add, (f(4096, 512), f(4096, 512))),
        "unary 4096x512": (elementwise.unary, (f(4096, 512),)),
        "rms_norm 4096x512": (normalization.rms_norm, (f(4096, 512), f(4096, 512))),
        "layer_norm 4096x512": (normalization.layer_norm, (f(4096, 512), f(4096, 512), f(4096, 512))),
        "row_reduce 4096x512": (reduction.row_reduce, (f(4096, 512),)),
        "row_softmax 4096x512": (softmax.row_softmax, (f(4096, 512),)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--million", action="store_true", help="issue and schedule 1,000,000 instructions")
    ap.add_argument("--matmul", action="store_true", help="also the 2048^3 bf16 matmul against NumPy")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    reps = args.repeats or (1 if args.quick else 3)
    n_goal = 1_000_000 if args.million else (20_000 if args.quick else 200_000)
    n_small = 5_000 if args.quick else 20_000

    print(f"process CPU time; {blas_note()}")
    with blas_one_thread():
        # 1. shape-only streaming kernel --------------------------------------------------------------
        x = np.zeros((128, 64), np.float32)
        tiles = n_goal // 5
        r1 = 1 if n_goal > 300_000 else reps
        t_loop, _ = timed(lambda: bare_loop(x, tiles), reps)
        t_off, res_off = timed(lambda: with_replay(False, lambda: with_cache(
            False, lambda: shape_only(stream, (x,), {"n": tiles}))), r1)
        t_on, res_on = timed(lambda: with_replay(False, lambda: with_cache(
            True, lambda: shape_only(stream, (x,), {"n": tiles}))), r1)
        n = len(res_on.instructions)
        schedule(res_on.cores, impl="numba")          # the compiled loop loaded (or compiled) once
        t_sched, tl_on = timed(lambda: schedule(res_on.cores, impl="numba"), r1)
        same_off_on = schedule(res_off.cores, impl="numba") == tl_on
        # the replay is measured holding one 1M-row result (tl_on), as "cache on" was measured holding res_off:
        # a process holding more objects pays more for each full pass of Python's cycle collector
        del res_off, res_on
        # loop-body replay (trnsim/kernels/loop_replay.py): the later iterations appended in bulk
        t_rep, res_rep = timed(lambda: with_replay(True, lambda: with_cache(
            True, lambda: shape_only(stream, (x,), {"n": tiles}))), r1)
        t_sched_rep, tl_rep = timed(lambda: schedule(res_rep.cores, impl="numba"), r1)
        del res_rep
        us = lambda t: t / n * 1e6  # noqa: E731
        print(f"1. shape-only streaming kernel, {n:,} instructions (median of {r1})")
        print(f"   bare call loop (floor)      {us(t_loop):7.2f} us/instruction")
        print(f"   issue, cache off            {us(t_off):7.2f} us/instruction  ({t_off / t_loop:5.1f}x the floor)")
        print(f"   issue, cache on             {us(t_on):7.2f} us/instruction  ({t_on / t_loop:5.1f}x the floor; "
              f"{t_off / t_on:.2f}x faster than off)")
        print(f"   issue, cache on, loop replay {us(t_rep):7.2f} us/instruction  ({t_rep / t_loop:5.1f}x the floor; "
              f"{t_on / t_rep:.2f}x faster than replay off; "
              f"{'replayed' if loop_replay is not None and loop_replay.STATS['replayed'] else 'NOT replayed'})")
        print(f"   schedule (compiled)         {us(t_sched):7.2f} us/instruction (replay: {us(t_sched_rep):.2f})")
        print(f"   identical timelines (cache off/on/replay): {same_off_on and tl_on == tl_rep}")
        tag = "measured" if n >= 1_000_000 else "extrapolated"
        for name, ti, ts in (("cache off", t_off, t_sched), ("cache on", t_on, t_sched),
                             ("cache on + loop replay", t_rep, t_sched_rep)):
            tot = (ti + ts) / n * 1e6
            print(f"   1,000,000 instructions issued + scheduled, {name}: {tot:.1f} s ({tag}; aim: under 3 s)")
        del tl_on, tl_rep
        gc.collect()

        # the general path's kernels: closure, helpers, branch; loop replay off (general) and on
        print(f"   as most kernels are written ({n:,} instructions each; issue + compiled scheduling; median of {r1})")
        for name, kern in (("closure (kernel factory)", make_stream_closure()), ("helper calls", stream_helpers),
                           ("branch on the index", stream_branch)):
            row = []
            for on in (False, True):
                before = loop_replay.STATS["replayed"] if loop_replay is not None else 0
                ti, res = timed(lambda: with_replay(on, lambda: with_cache(
                    True, lambda: shape_only(kern, (x,), {"n": tiles}))), r1)
                rep = loop_replay is not None and loop_replay.STATS["replayed"] > before
                ni = len(res.instructions)
                schedule(res.cores, impl="numba")
                ts, tl = timed(lambda: schedule(res.cores, impl="numba"), r1)
                row.append((ti, ts, ni, rep, tl))
                del res
                gc.collect()
            (ti0, ts0, n0, _, tl0), (ti1, ts1, n1, rep1, tl1) = row
            print(f"   {name:<26} replay off: {ti0 / n0 * 1e6:5.2f} + {ts0 / n0 * 1e6:4.2f} us/instr = "
                  f"{(ti0 + ts0) / n0 * 1e6:4.1f} s per 1M (aim: under 4 s); replay on: {ti1 / n1 * 1e6:5.2f} + "
                  f"{ts1 / n1 * 1e6:4.2f} us/instr = {(ti1 + ts1) / n1 * 1e6:4.1f} s per 1M "
                  f"({'replayed' if rep1 else 'NOT replayed'}; aim: under 3 s); identical timelines: {tl0 == tl1}")
            del row, tl0, tl1
            gc.collect()
        gc.collect()        # section 1's results are not collected inside a later section's timing

        # 2. functional small tiles ---------------------------------------------------------------------
        xs = np.random.default_rng(0).standard_normal((128, 64), dtype=np.float32) * 1e-3
        ys = np.random.default_rng(1).standard_normal((128, 64), dtype=np.float32) * 1e-6
        k = trnsim.jit(make_small_kernel(n_small))
        k.run(xs, ys)
        t_np, ref = timed(lambda: numpy_small(xs, ys, n_small), reps)
        print(f"\n2. functional small tiles: {n_small:,} tensor_tensor on 128x64 fp32 (median of {reps})")
        print(f"   NumPy loop (floor)          {t_np / n_small * 1e6:7.2f} us/instruction")
        for name, on in (("cache off", False), ("cache on", True)):
            t, res = timed(lambda: with_cache(on, lambda: k.run(xs, ys)), reps)
            ni = len(res.cores[0].instructions)
            same = np.array_equal(np.asarray(res.outputs), ref)
            print(f"   {name:<9}                   {t / ni * 1e6:7.2f} us/instruction = {ni / t:8,.0f} instr/s "
                  f"({t / t_np:5.1f}x NumPy; equal to NumPy: {same}; aim: >= 200,000 instr/s)")

        # 3. matmul --------------------------------------------------------------------------------------
        if args.matmul:
            mm = 2048
            rng = np.random.default_rng(0)
            at = rng.standard_normal((mm, mm), dtype=np.float32).astype(ml_dtypes.bfloat16)
            b = rng.standard_normal((mm, mm), dtype=np.float32).astype(ml_dtypes.bfloat16)
            at32, b32 = at.astype(np.float32), b.astype(np.float32)
            from trnsim.kernels.library.matmul import tiled_matmul
            kmm = trnsim.jit(tiled_matmul)
            t_np, ref = timed(lambda: numpy_matmul(at32, b32), reps)
            print(f"\n3. 2048^3 bf16 tiled matmul (median of {reps}); NumPy tile loop {t_np:.2f} s")
            for name, on in (("cache off", False), ("cache on", True)):
                t, res = timed(lambda: with_cache(on, lambda: kmm.run(at, b)), reps)
                same = np.array_equal(np.asarray(res.outputs).astype(np.float32), ref)
                print(f"   {name:<9} {t:7.2f} s = {t / t_np:.2f}x NumPy (equal: {same}; aim: <= 1.3x)")
            # NumPy's own floor: the same 1024 tile matmuls with no copies (what no simulator can go below)
            t_mm = statistics.median(bare_matmuls(at32, b32) for _ in range(reps))
            print(f"   the tile matmuls alone (no copies, no loop body) {t_mm:.2f} s = {t_mm / t_np:.2f}x the NumPy "
                  "tile loop")

        # 4. library kernels -----------------------------------------------------------------------------
        print(f"\n4. library kernels, shape-only issue (median of {reps}) and simulated time")
        hdr = (f"   {'kernel':<26} {'instrs':>7} {'off us/i':>9} {'on us/i':>8} {'speed-up':>8} {'replay us/i':>9} "
               f"{'vs on':>7} {'simulated us':>13} {'same':>5}")
        print(hdr)
        found = []
        for name, (fn, fargs) in lib_cases().items():
            t_off, r_off = timed(lambda: with_cache(False, lambda: shape_only(fn, fargs, {})), reps)
            t_on, r_on = timed(lambda: with_replay(False, lambda: with_cache(
                True, lambda: shape_only(fn, fargs, {}))), reps)
            t_rep, r_rep = timed(lambda: with_cache(True, lambda: shape_only(fn, fargs, {})), reps)
            ni = len(r_on.instructions)
            a, c, e = schedule(r_off.cores), schedule(r_on.cores), schedule(r_rep.cores)
            print(f"   {name:<26} {ni:>7} {t_off / ni * 1e6:>9.2f} {t_on / ni * 1e6:>8.2f} {t_off / t_on:>7.2f}x "
                  f"{t_rep / ni * 1e6:>9.2f} {t_on / t_rep:>7.2f}x {c.total_ns / 1e3:>13.2f} {str(a == c == e):>5}")
            found.append((name, c))
        try:
            from trnsim.profiler.findings import findings
        except ImportError:
            findings = None
        if findings is not None:
            print("\n   the Timeline's findings (what the simulated time is made of)")
            for name, tl in found:
                for f in findings(tl, limit=3):
                    print(f"   {name}: {f}")


if __name__ == "__main__":
    main()
