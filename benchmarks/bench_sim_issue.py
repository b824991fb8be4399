"""The kernel simulations of a cold cost estimate, replayed: CPU time per kernel family, issue and scheduling, and
every simulated figure (to show that a change to the issue path leaves them identical).

Usage: python benchmarks/bench_sim_issue.py [--repeats N] [--save FILE] [--compare FILE] [--set FILE]
       python benchmarks/bench_sim_issue.py --capture [--set FILE] [-- trnsim estimate arguments]

The set (``--set``, default ``benchmarks/sim_issue_qwen3.json``) is every shape-only kernel simulation one cold
``trnsim estimate --model qwen3-32b --instance trn2.48xlarge --count 1 --compile`` runs (``costs._simulate``: the
kernel, its shape-only inputs, its options and the target), in the order it runs them; ``--capture`` runs that
estimate in this process with the op-cost cache off and writes the set (atomically).  A set is plain data: kernels
by module and name, inputs by shape and dtype (no pickle).

Each repeat runs in a fresh Python process (``--child``): the issue path keeps state per process (call sites, layout
numbers), so a second pass in one process would not be the estimate's cold pass.  The process first loads the
compiled scheduler by scheduling a tiny kernel of its own (loading it costs ~0.6 s of CPU, once per process, not
part of any family), calls ``costs.expect_many()`` as the estimate does, then runs every simulation of the set in
order: ``run_kernel(..., execute=False)`` (the issue: the kernel's Python, every instruction's rules, cost and
record) and ``costs.kernel_duration_ns`` (the compiled scheduler), each timed in process CPU time.  Baseline in the
same process: a bare Python loop making one call of a function that does nothing per recorded instruction of the
set (the floor of any Python front end issuing them; 100,000 calls timed before and after the set, best of 5 each,
scaled to the set's instruction count); the ratios divide by it, so a loaded machine moves them less than the
seconds.  Figures: medians over the repeats.  Every simulation's (ns, flops, bytes) must be the
same in every repeat; ``--save`` writes them with the figures, ``--compare`` checks them against a saved run (==,
every simulation) and prints the before/after table.

Conditions to note with the figures: the load (``uptime``), the tree (``trnsim.__file__`` is printed), and that
numba's scheduler cache is warm (a fresh tree compiles it on its first schedule: about a minute).
"""

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SET = os.path.join(HERE, "sim_issue_qwen3.json")
ESTIMATE = ["--model", "qwen3-32b", "--instance", "trn2.48xlarge", "--count", "1", "--compile"]


# -- the set: plain data ------------------------------------------------------------------------------------
def _enc(v):
    """A kernel argument or option as JSON: a shape-only input as ``{"in": [shape, dtype]}``, a tuple as
    ``{"tuple": [...]}``; numbers, strings, None, bools and lists as they are."""
    from trnsim.kernels.jit import ShapeOnlyInput
    if isinstance(v, ShapeOnlyInput):
        return {"in": [list(v.shape), v.dtype.name]}
    if isinstance(v, tuple):
        return {"tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"bench_sim_issue: cannot write a kernel argument of type {type(v).__name__} into the set")


def _dec(v):
    from trnsim.kernels.jit import ShapeOnlyInput
    if isinstance(v, dict):
        if "in" in v:
            return ShapeOnlyInput(tuple(v["in"][0]), v["in"][1])
        return tuple(_dec(x) for x in v["tuple"])
    if isinstance(v, list):
        return [_dec(x) for x in v]
    return v


def load_set(path):
    """``[(family, fn, args, kwargs, target)]`` of the set file ``path``."""
    from trnsim.targets import get_target
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    out = []
    for i, s in enumerate(doc["sims"]):
        mod, name = s["fn"].split(":")
        fn = getattr(importlib.import_module(mod), name)
        out.append((name, fn, tuple(_dec(a) for a in s["args"]), {k: _dec(v) for k, v in s["kwargs"].items()},
                    get_target(s["target"])))
    return out


def capture(path, est_args):
    """Run the estimate in this process (op-cost cache off) and write the simulations it runs into ``path``."""
    os.environ["TRNSIM_COST_CACHE"] = "0"
    os.environ["TRNSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-sim-issue-")
    os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = os.path.join(os.environ["TRNSIM_CACHE_DIR"], "compile")
    from trnsim.backend import costs
    from trnsim.cost import cli
    from trnsim.fileio import atomic_write_json
    from trnsim.targets import get_target
    sims = []
    inner = costs._simulate

    def noted(fn, args, kwargs, target):
        if get_target(target.name) is not target:
            raise ValueError(f"bench_sim_issue --capture: target {target.name!r} is not the registered one")
        rec = {"fn": f"{fn.__module__}:{fn.__name__}", "args": [_enc(a) for a in args],
               "kwargs": {k: _enc(v) for k, v in kwargs.items()}, "target": target.name}
        sims.append(rec)
        return inner(fn, args, kwargs, target)

    costs._simulate = noted
    try:
        with open(os.devnull, "w") as null:
            out, sys.stdout = sys.stdout, null
            try:
                cli.main(est_args)
            finally:
                sys.stdout = out
    finally:
        costs._simulate = inner
    atomic_write_json(path, {"estimate": ["trnsim", "estimate"] + est_args, "sims": sims}, indent=0)
    print(f"{len(sims)} simulations written to {path}")


# -- one repeat, in a fresh process ---------------------------------------------------------------------------
def _noop(a, b, c):
    return None


def _floor(n):
    """CPU seconds of a bare loop making ``n`` calls of a function that does nothing (best of 5)."""
    best = None
    for _ in range(5):
        t = time.process_time()
        f = _noop
        for i in range(n):
            f(i, None, None)
        t = time.process_time() - t
        best = t if best is None else min(best, t)
    return best


def _warm_kernel(x):
    """A kernel of this file (its own call sites): scheduling it loads the compiled scheduler."""
    from trnsim.kernels.nki import isa as nisa
    from trnsim.kernels.nki import language as nl
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.dma_copy(out, t)
    return out


def child(path):
    from trnsim.backend import costs
    from trnsim.kernels.jit import ShapeOnlyInput, run_kernel
    from trnsim.machine import sched_fast
    sims = load_set(path)
    sched_fast.expect_many()
    costs.kernel_duration_ns(run_kernel(_warm_kernel, (ShapeOnlyInput((128, 64), "float32"),), {},
                                        target=sims[0][4], execute=False))
    floor = _floor(100_000)
    fam = {}
    values = []
    n_instr = 0
    clock = time.process_time
    t_all = clock()
    for name, fn, args, kwargs, tg in sims:
        t0 = clock()
        res = run_kernel(fn, args, kwargs, target=tg, execute=False)
        t1 = clock()
        ns = costs.kernel_duration_ns(res)
        t2 = clock()
        n = sum(len(c.columns) for c in res.cores)
        flops = sum(f for c in res.cores for f in c.columns.flops)
        nbytes = sum(b for c in res.cores for b in c.columns.nbytes)
        values.append([ns, flops, nbytes])
        a = fam.setdefault(name, [0, 0, 0.0, 0.0])
        a[0] += 1
        a[1] += n
        a[2] += t1 - t0
        a[3] += t2 - t1
        n_instr += n
    t_all = clock() - t_all
    import trnsim
    floor = min(floor, _floor(100_000)) * n_instr / 100_000
    json.dump({"tree": trnsim.__file__, "families": fam, "values": values, "total": t_all, "instructions": n_instr,
               "floor": floor}, sys.stdout)


# -- the parent: repeats, table, save and compare ------------------------------------------------------------
def run_repeats(path, repeats):
    env = dict(os.environ, TRNSIM_COST_CACHE="0", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env["TRNSIM_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-sim-issue-")
    runs = []
    for _ in range(repeats):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--set", path], env=env,
                           capture_output=True, text=True, check=False)
        if p.returncode:
            sys.exit(f"bench_sim_issue: a repeat failed:\n{p.stderr}")
        runs.append(json.loads(p.stdout))
    first = runs[0]["values"]
    for r in runs[1:]:
        if r["values"] != first:
            sys.exit("bench_sim_issue: the simulated figures differ between repeats of one tree")
    fams = {}
    for name in runs[0]["families"]:
        a = runs[0]["families"][name]
        fams[name] = {"sims": a[0], "instructions": a[1],
                      "issue": statistics.median(r["families"][name][2] for r in runs),
                      "schedule": statistics.median(r["families"][name][3] for r in runs)}
    return {"tree": runs[0]["tree"], "repeats": repeats, "families": fams, "values": first,
            "total": statistics.median(r["total"] for r in runs), "floor": statistics.median(r["floor"] for r in runs),
            "instructions": runs[0]["instructions"], "totals": [r["total"] for r in runs]}


def table(cur, base=None):
    fams = sorted(cur["families"], key=lambda k: -(cur["families"][k]["issue"] + cur["families"][k]["schedule"]))
    print(f"{'family':<22}{'sims':>6}{'instr':>9}{'issue s':>9}{'sched s':>9}{'total s':>9}{'us/instr':>10}"
          + (f"{'before s':>10}{'after/before':>14}" if base else ""))
    for k in fams + ["all"]:
        if k == "all":
            f = {"sims": sum(x["sims"] for x in cur["families"].values()), "instructions": cur["instructions"],
                 "issue": sum(x["issue"] for x in cur["families"].values()),
                 "schedule": sum(x["schedule"] for x in cur["families"].values())}
        else:
            f = cur["families"][k]
        tot = f["issue"] + f["schedule"]
        line = (f"{k:<22}{f['sims']:>6}{f['instructions']:>9}{f['issue']:>9.3f}{f['schedule']:>9.3f}{tot:>9.3f}"
                f"{1e6 * tot / max(f['instructions'], 1):>10.2f}")
        if base:
            if k == "all":
                b = sum(x["issue"] + x["schedule"] for x in base["families"].values())
            else:
                bf = base["families"].get(k)
                b = bf["issue"] + bf["schedule"] if bf else float("nan")
            line += f"{b:>10.3f}{tot / b:>14.3f}"
        print(line)
    print(f"whole set (one timer): {cur['total']:.3f} s CPU (repeats: {', '.join(f'{t:.3f}' for t in cur['totals'])});"
          f" floor (bare call per instruction, {cur['instructions']} calls): {cur['floor']:.4f} s; "
          f"ratio set/floor {cur['total'] / cur['floor']:.0f}x")
    if base:
        print(f"before: whole set {base['total']:.3f} s, floor {base['floor']:.4f} s, ratio "
              f"{base['total'] / base['floor']:.0f}x; after/before {cur['total'] / base['total']:.3f} "
              f"(ratios to the floor: {(cur['total'] / cur['floor']) / (base['total'] / base['floor']):.3f})")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    est = None
    if "--" in argv:
        est = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", default=DEFAULT_SET)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--save")
    p.add_argument("--compare")
    p.add_argument("--capture", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: at least 1")
    if a.capture:
        return capture(a.set, est or ESTIMATE)
    if a.child:
        return child(a.set)
    cur = run_repeats(a.set, a.repeats)
    print(f"tree: {cur['tree']}; {a.repeats} repeat(s), fresh process each; process CPU time, medians; "
          f"load {os.getloadavg()[0]:.1f}")
    base = None
    if a.compare:
        with open(a.compare, encoding="utf-8") as f:
            base = json.load(f)
        if len(base["values"]) != len(cur["values"]):
            sys.exit(f"bench_sim_issue: {a.compare} holds {len(base['values'])} simulations, this set "
                     f"{len(cur['values'])}")
        diff = [i for i, (x, y) in enumerate(zip(base["values"], cur["values"])) if x != y]
        print(f"simulated (ns, flops, bytes) identical to {a.compare}: {not diff} "
              f"({len(cur['values']) - len(diff)} of {len(cur['values'])} equal)")
        for i in diff[:10]:
            print(f"  simulation {i}: before {base['values'][i]}, after {cur['values'][i]}")
    table(cur, base)
    if a.save:
        from trnsim.fileio import atomic_write_json
        atomic_write_json(a.save, cur)
    return 0


if __name__ == "__main__":
    sys.exit(main())
