"""Host CPU time of bitsandbytes' ``test_gemv_4bit`` iteration body (``bench_bnb_gemv_iter._iteration``) on ``neuron``
at shapes it has not seen, split by where the main thread spends it (issue 28: per-new-shape costs).  Each new
``dim`` recompiles bitsandbytes' ``torch.compile(dynamic=False)`` dequantize functions (dynamo, AOTAutograd, our
lowering) and prices new eager shapes (kernel simulations); a second call at the same dim is the steady state.

Parts are main-thread CPU (``time.thread_time``: torch's intra-op pool threads, which spin under load, are left
out), measured by wrapping the entry points, so they nest: ``backend`` (AOTAutograd + lowering) holds ``lower``
(trnsim's lowering) which holds ``plan`` (planning and costing the graph); ``sims`` counts every shape-only kernel
simulation, wherever it runs (lowering or eager dispatch).  Needs bitsandbytes (its CPU library built) and
``TORCHNEURON_TARGET=sim``; run it with a cold ``HOME`` (or ``TRNSIM_COST_CACHE=0`` and
``TRNSIM_COMPILE_CACHE=0``) so nothing comes from an earlier process.

    python -m benchmarks.bench_bnb_new_shape [dims, comma-separated]
"""

import functools
import sys
import time

import torch

from benchmarks.bench_bnb_gemv_iter import _iteration

_PARTS = ("backend", "lower", "plan", "sims")


def _timed(spent, part, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        t = time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            spent[part] += time.thread_time() - t
            spent[part + " n"] += 1
    return wrapper


def main(dims=(96, 160, 224, 288)):
    from bitsandbytes import functional as F
    from trnsim.backend import costs
    from trnsim.backend.compile import backend, lower
    spent = dict.fromkeys(_PARTS + tuple(p + " n" for p in _PARTS), 0)
    backend._aot = _timed(spent, "backend", backend._aot)
    backend._lower = _timed(spent, "lower", backend._lower)
    lower.plan_graph = _timed(spent, "plan", lower.plan_graph)
    costs._simulate = _timed(spent, "sims", costs._simulate)
    _iteration(F, "neuron", 64, torch.float32)            # imports, first compiles
    first = again = 0.0
    for k in list(spent):
        spent[k] = 0
    for d in dims:
        t = time.thread_time()
        _iteration(F, "neuron", d, torch.float32)
        first += time.thread_time() - t
        t = time.thread_time()
        _iteration(F, "neuron", d, torch.float32)
        again += time.thread_time() - t
    n = len(dims)
    print(f"gemv_4bit iteration on neuron at {n} new dims {list(dims)}: main-thread CPU per dim")
    print(f"  first call (new shape) {first / n * 1e3:8.1f} ms")
    print(f"  second call            {again / n * 1e3:8.1f} ms")
    for p in _PARTS:
        print(f"  {p:8s} {spent[p] / n * 1e3:8.1f} ms   ({spent[p + ' n'] / n:.1f} calls)")
    return first / n, again / n, {p: spent[p] / n for p in _PARTS}


if __name__ == "__main__":
    main(tuple(int(x) for x in sys.argv[1].split(",")) if len(sys.argv) > 1 else (96, 160, 224, 288))
