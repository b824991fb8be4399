"""Where the CPU time of one ``trnsim estimate`` goes, cold: imports, the eager layer runs of the search, the
compiled layer runs, the kernel simulations inside both, and the rest (composing the candidates).

Usage: python benchmarks/bench_estimate_split.py [--keep-caches] [--first-use] -- [trnsim estimate arguments]
       (default arguments: --model qwen3-32b --instance trn2.48xlarge --count 1 --compile)

``--first-use``: before the estimate, do the one-time work of a process that the estimate would otherwise do
inside its first layer runs, each as its own row: the imports a compile needs (``torch._dynamo``, which also
imports ``torch.distributed.tensor``, and AOTAutograd; an eager estimate imports ``torch.distributed.tensor`` too,
at its first tensor moved to the device), and numba's compiled scheduler (numba imported and its cached builds
loaded, by one 7-element copy simulated with the compiled loop).  The total stays about the same; the rows show
how much of it is a fixed cost per process and how much grows with the work.

Cold by default: the op-cost and layer-cost caches (TRNSIM_CACHE_DIR) and the compile cache
(TORCH_NEURONX_NEFF_CACHE_DIR) point at a fresh temporary folder, set before trnsim is imported.  numba's own
cache (``__pycache__`` beside the scheduler's sources) is not touched: run once first so that it holds the
compiled scheduler, as it does after any earlier run of the tree (a first run of a fresh tree compiles it: about
60 s more).  Times are process CPU time (``time.process_time``), so a background load changes them little;
it counts every thread (the device's backward runs on the thread that calls it, backend/registration.py, and
any other thread's work is counted too).  Each part is timed
around the function named in its row, the kernel simulations subtracted from the layer runs that call them.
The compiled search's helper process (``trnsim/cost/forked.py``) is off unless ``TRNSIM_ESTIMATE_FORK`` is set:
the split is of one process doing all the work.  Never part of the test pass/fail.
"""

import os
import sys
import tempfile
import time

_T0 = time.process_time()
_DEFAULT = ["--model", "qwen3-32b", "--instance", "trn2.48xlarge", "--count", "1", "--compile"]


def _args(argv):
    head = argv[:argv.index("--")] if "--" in argv else argv
    keep, first = "--keep-caches" in head, "--first-use" in head
    argv = argv[argv.index("--") + 1:] if "--" in argv else [a for a in argv if a not in ("--keep-caches",
                                                                                          "--first-use")]
    return keep, first, (argv or _DEFAULT)


def _first_use():
    """(imports a compile needs, numba's compiled scheduler): process CPU seconds of each (see ``--first-use``)."""
    t = time.process_time()
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor  # noqa: F401
    from torch._dynamo.backends.common import aot_autograd  # noqa: F401
    t_imports = time.process_time() - t
    from trnsim.backend import costs
    from trnsim.targets import get_target
    t = time.process_time()
    costs.expect_many()
    costs.elementwise_cost(get_target("trn2"), 7, "float32", kind="copy")
    return t_imports, time.process_time() - t


def main(argv=None):
    keep, first, est_args = _args(sys.argv[1:] if argv is None else argv)
    if not keep:
        tmp = tempfile.mkdtemp(prefix="trnsim-estimate-split-")
        os.environ["TRNSIM_CACHE_DIR"] = os.path.join(tmp, "costs")
        os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(tmp, "compile")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # one process's split: the compiled search's helper (trnsim/cost/forked.py) would take the runner-up's compile
    # out of this process (TRNSIM_ESTIMATE_FORK=1 in the environment keeps it)
    os.environ.setdefault("TRNSIM_ESTIMATE_FORK", "0")
    t = time.process_time()
    import torch  # noqa: F401
    t_torch = time.process_time() - t
    t = time.process_time()
    from trnsim.backend import costs
    from trnsim.backend.compile import runtime
    from trnsim.cost import cli, step
    t_trnsim = time.process_time() - t
    t_first = _first_use() if first else None

    acc = {"simulations": 0.0, "eager layer runs": 0.0, "compiled layer runs": 0.0, "compiled graph calls": 0.0}
    counts = {"simulations": 0, "eager layer runs": 0, "compiled layer runs": 0, "compiled graph calls": 0}
    depth = [0]

    def timed(name, fn, excl_sims=True):
        def wrapper(*a, **k):
            if name == "simulations" and depth[0]:
                return fn(*a, **k)
            depth[0] += name == "simulations"
            s, s_sim = time.process_time(), acc["simulations"]
            try:
                return fn(*a, **k)
            finally:
                depth[0] -= name == "simulations"
                d = time.process_time() - s
                if excl_sims and name != "simulations":
                    d -= acc["simulations"] - s_sim
                key = name
                if name == "layer runs":
                    compiled = a[5] if len(a) > 5 else k.get("compiled", False)
                    key = "compiled layer runs" if compiled else "eager layer runs"
                acc[key] += d
                counts[key] += 1
        return wrapper

    saved = (costs._simulate, step._run, runtime.CompiledGraph.__call__)
    costs._simulate = timed("simulations", costs._simulate)
    step._run = timed("layer runs", step._run)
    runtime.CompiledGraph.__call__ = timed("compiled graph calls", runtime.CompiledGraph.__call__)
    try:
        t = time.process_time()
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = cli.main(est_args)
        t_main = time.process_time() - t
    finally:
        costs._simulate, step._run, runtime.CompiledGraph.__call__ = saved
    total = time.process_time() - _T0
    line = [ln for ln in out.getvalue().splitlines() if "tokens/s" in ln]
    print(f"trnsim estimate {' '.join(est_args)}  ({'warm caches' if keep else 'cold caches'}; exit {rc}; "
          f"{line[0].strip() if line else 'no tokens/s line'})")
    print(f"{'part':34s} {'CPU s':>7s} {'calls':>6s}")
    rows = [("import torch", t_torch, 1), ("import trnsim (cost, compile runtime)", t_trnsim, 1)]
    if t_first is not None:
        rows += [("first use: dynamo, DTensor, AOTAutograd imports", t_first[0], 1),
                 ("first use: numba's compiled scheduler", t_first[1], 1)]
    rows += [(k + (" (within compiled layer runs)" if k == "compiled graph calls" else ""), acc[k], counts[k])
             for k in ("eager layer runs", "compiled layer runs", "compiled graph calls", "simulations")]
    rest = t_main - acc["eager layer runs"] - acc["compiled layer runs"] - acc["simulations"]
    rows += [("rest of the estimate (search, composing)", rest, 1), ("total (process CPU)", total, 1)]
    for name, v, n in rows:
        print(f"{name:34s} {v:7.2f} {n:6d}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
