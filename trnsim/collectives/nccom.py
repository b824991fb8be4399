"""``trnsim nccom-test``: AWS's nccom-test on the simulated cluster.

Same arguments and output as the Neuron tool (tools/neuron-sys-tools/nccom-test.rst): ``<cc operation>``,
``-r/--nworkers``, ``-N/--nnodes``, ``-b/--minbytes``, ``-e/--maxbytes``, ``-i/--stepbytes``, ``-f/--stepfactor``,
``-n/--iters``, ``-w/--warmup_iters``, ``-d/--datatype``, ``-c/--check``, ``-s/--hosts``; columns ``size(B)
count(elems) type time(us) algbw(GB/s) busbw(GB/s)`` and ``Avg bus bandwidth``; busbw = algbw x the collective's
bus factor.

Units: trnsim prints decimal GB/s (10^9 bytes per second, = bytes per ns), the unit of every bandwidth in trnsim
(topologies, the Python API's ``busbw_bytes_per_ns``, the plot), so the label says what the number is.  AWS's
nccom-test on real hardware prints gibibytes per second under the same ``GB/s`` label (its page,
tools/neuron-sys-tools/nccom-test.rst: algbw "in gibibytes (1GiB = 1,073,741,824 bytes) per second"): to compare
a trnsim figure with one from the real tool, divide trnsim's by 1.0737 (or multiply the tool's by it).

trnsim additions: ``--topology``/``--instance`` (the machine, default trn2.48xlarge; the same names and aliases
as ``trnsim estimate --instance``, ``trnsim.collectives.MACHINE_ALIASES``), ``--lnc``, ``--algorithm`` (force
one), ``--show-algorithm`` (an extra column), ``--show-bound`` (two more: the physical busbw bound of the ranks'
paths, :mod:`.bounds`, and the fixed-cost floor, the time as the size goes to zero), ``--plot PNG`` with
``--compare TOPO,...`` (busbw against size for several topologies).  A ``#`` line before the table names the
machine and where the ranks sit.  The simulator is deterministic, so the P50 over ``--iters`` is the one simulated
time; ``--iters``/``--warmup_iters`` are accepted for compatibility and change nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np

from .algorithms import bus_factor, collective_time
from .bounds import physical_bound
from .topology import Placement, get_topology
from . import functional
from ..cliutil import OneLineParser

GiB = 1024 ** 3     # binary size units of -b/-e (1G = 1 GiB, as the tool's examples)

DTYPES = {"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16, "fp16": np.float16,
          "bf16": "bfloat16", "int32": np.int32, "uint32": np.uint32, "fp32": np.float32}
_ITEMSIZE = {"uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "fp16": 2, "bf16": 2, "int32": 4, "uint32": 4,
             "fp32": 4}

# nccom-test's operation names (and the collectives trnsim also times)
OP_NAMES = {"all_reduce": "all_reduce", "allr": "all_reduce", "all_gather": "all_gather", "allg": "all_gather",
            "reduce_scatter": "reduce_scatter", "redsct": "reduce_scatter", "sendrecv": "send_recv",
            "alltoall": "all_to_all", "all_to_all": "all_to_all", "permute": "permute", "broadcast": "broadcast"}

CHECK_LIMIT_BYTES = 256 * 1024 * 1024   # --check runs the functional collective; beyond this (all ranks) it skips

_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024 ** 2, "mb": 1024 ** 2, "g": GiB, "gb": GiB,
          "t": 1024 ** 4, "tb": 1024 ** 4}


def parse_size(text) -> int:
    """``2048``, ``2kb``, ``32M``, ``1GB`` -> bytes (binary units, as the tool's examples use: 1kb = 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?b?)\s*", str(text).lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (examples: 8, 2kb, 32M, 1GB)")
    v = float(m.group(1)) * _UNITS[m.group(2)]
    if v != int(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    return int(v)


_EXAMPLES = """examples:
  trnsim nccom-test all_reduce -r 32 -b 8 -e 1GB -f 2                 # one trn2.48xlarge, 8 B to 1 GiB
  trnsim nccom-test allg -r 64 -N 2 -b 1M -e 256M -f 4 --show-algorithm
  trnsim nccom-test redsct -r 64 --topology trn2-ultraserver -d fp32 -b 1K -e 1M -f 4 -c
  trnsim nccom-test all_reduce -r 32 -b 1K -e 1G -f 4 --plot busbw.png --compare trn1.32xlarge"""


def build_parser(p=None):
    p = p or OneLineParser(prog="trnsim nccom-test", description=__doc__.split("\n\n")[0], epilog=_EXAMPLES)
    p.add_argument("operation", choices=sorted(OP_NAMES), metavar="<cc operation>",
                   help="all_reduce/allr, all_gather/allg, reduce_scatter/redsct, sendrecv, alltoall, permute, "
                        "broadcast")
    p.add_argument("-r", "--nworkers", type=int, required=True, help="total number of workers (ranks)")
    p.add_argument("-N", "--nnodes", type=int, default=1, help="number of instances; workers divided equally")
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("32M"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("32M"))
    p.add_argument("-i", "--stepbytes", type=parse_size, default=None)
    p.add_argument("-f", "--stepfactor", type=float, default=None)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-d", "--datatype", choices=list(DTYPES), default="uint8")
    p.add_argument("-c", "--check", action="store_true", help="check results with the functional collective")
    p.add_argument("-s", "--hosts", nargs="*", default=None, help="accepted; the simulated nodes need no hosts")
    p.add_argument("--topology", "--instance", dest="topology", default="trn2.48xlarge",
                   help="the machine: trn2.48xlarge (default), trn2-ultraserver, trn1.32xlarge, "
                   "trn3-gen1-ultraserver, trn3-gen2-ultraserver (aliases trn1, trn2, trn2u, trn2u.48xlarge, trn3, "
                   "...: the names trnsim estimate --instance takes)")
    p.add_argument("--lnc", type=int, default=None, help="logical NeuronCore config (default: the target's)")
    p.add_argument("--algorithm", default=None, help="force mesh, rdh, kangaring, ring or hierarchical")
    p.add_argument("--show-algorithm", action="store_true", help="add the algorithm the runtime picks")
    p.add_argument("--show-bound", action="store_true", help="add the physical busbw bound of the ranks' paths "
                   "and the fixed-cost floor (us)")
    p.add_argument("--plot", default=None, metavar="PNG", help="write busbw against size to this PNG")
    p.add_argument("--compare", default="", help="more topologies for --plot, comma separated (each at its "
                   "full rank count)")
    return p


def sizes(minbytes, maxbytes, stepbytes=None, stepfactor=None):
    if minbytes < 0 or maxbytes < minbytes:
        raise ValueError(f"--minbytes {minbytes} / --maxbytes {maxbytes}: need 0 <= minbytes <= maxbytes")
    if stepfactor is not None:
        if stepfactor <= 1:
            raise ValueError(f"--stepfactor {stepfactor}: must be greater than 1")
        if minbytes == 0:
            raise ValueError("--stepfactor needs --minbytes > 0")
        out, s = [], minbytes
        while s <= maxbytes:
            out.append(int(s))
            s = s * stepfactor
        return out
    step = stepbytes if stepbytes is not None else max((maxbytes - minbytes) // 10, 1)
    if step <= 0:
        raise ValueError(f"--stepbytes {step}: must be positive")
    return list(range(minbytes, maxbytes + 1, step))


def _measured_size(op, size, itemsize, n):
    """The bytes actually moved: whole elements, and for the split collectives a whole element per rank."""
    q = itemsize * n if op in ("all_gather", "reduce_scatter", "all_to_all") else itemsize
    return (size // q) * q


def rows(op, size_list, topology, nranks, datatype="uint8", algorithm=None):
    """``[(size, count, type, time_us, algbw GB/s, busbw GB/s, algorithm, bound busbw GB/s, floor_us)]``;
    GB/s are decimal (bytes per ns), see the module docstring.  The bound is ``inf`` for collectives without
    one (send/recv, permute, broadcast)."""
    out = []
    isz = _ITEMSIZE[datatype]
    topo = get_topology(topology) if isinstance(topology, str) else topology
    place = Placement(topo, nranks)
    for s in size_list:
        m = _measured_size(op, s, isz, nranks)
        c = collective_time(op, m, topo, nranks=nranks, algorithm=algorithm)
        t_us = c.time_ns / 1e3
        algbw = m / c.time_ns if c.time_ns else 0.0
        bound = physical_bound(op, m, place, range(nranks)).busbw_bytes_per_ns \
            if op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") else float("inf")
        out.append((m, m // isz, datatype, t_us, algbw, algbw * bus_factor(op, nranks), c.algorithm, bound,
                    c.schedule.latency_ns() / 1e3))
    return out


def describe(topo, nranks) -> str:
    """The ``#`` line naming the machine and where the ranks sit."""
    p = Placement(topo, nranks)
    chips = len({p.chip(r) for r in range(nranks)})
    return (f"# trnsim nccom-test (simulated): {topo.name} ({topo.target.name}, LNC={topo.effective_lnc}, "
            f"{topo.ranks} ranks), {nranks} ranks on {chips} chip{'s' if chips > 1 else ''} of "
            f"{topo.nodes} node{'s' if topo.nodes > 1 else ''}; GB/s = 10^9 B/s")


def format_table(rs, show_algorithm=False, show_bound=False):
    head = f"{'size(B)':>14}{'count(elems)':>16}{'type':>9}{'time(us)':>12}{'algbw(GB/s)':>15}{'busbw(GB/s)':>15}"
    if show_bound:
        head += f"{'bound(GB/s)':>15}{'floor(us)':>12}"
    if show_algorithm:
        head += "  algorithm"
    lines = [head]
    for m, cnt, dt, t, a, b, algo, bound, floor in rs:
        line = f"{m:>14}{cnt:>16}{dt:>9}{t:>12.0f}{a:>15.2f}{b:>15.2f}"
        if show_bound:
            line += f"{bound:>15.2f}{floor:>12.1f}"
        if show_algorithm:
            line += f"  {algo}"
        lines.append(line)
    avg = sum(r[5] for r in rs) / len(rs) if rs else 0.0
    lines.append(f"Avg bus bandwidth:\t{avg:.4f}GB/s")
    return "\n".join(lines)


def check(op, size, nranks, datatype):
    """Run the functional collective on rank-distinct fp32 data and compare with the closed form; returns an
    error string or None."""
    if datatype != "fp32":
        return "--check is only available for --datatype fp32 (as in nccom-test)"
    count = size // 4
    rng = np.random.default_rng(size)
    if op == "all_reduce":
        xs = [rng.integers(-8, 8, count).astype(np.float32) for _ in range(nranks)]
        want = np.sum(np.stack(xs).astype(np.float64), axis=0)
        got = functional.all_reduce(xs)
    elif op == "all_gather":
        per = count // nranks
        xs = [np.full(per, r, np.float32) for r in range(nranks)]
        want = np.repeat(np.arange(nranks, dtype=np.float64), per)
        got = functional.all_gather(xs)
    elif op == "reduce_scatter":
        xs = [rng.integers(-8, 8, count).astype(np.float32) for _ in range(nranks)]
        tot = np.sum(np.stack(xs).astype(np.float64), axis=0)
        got = functional.reduce_scatter(xs)
        per = count // nranks
        bad = [r for r in range(nranks) if not np.array_equal(got[r], tot[r * per:(r + 1) * per])]
        return f"reduce_scatter: wrong result on ranks {bad}" if bad else None
    elif op == "all_to_all":
        per = count // nranks
        xs = [np.arange(count, dtype=np.float32) + 1e4 * r for r in range(nranks)]
        got = functional.all_to_all(xs)
        bad = [i for i in range(nranks) if not np.array_equal(
            got[i], np.concatenate([xs[r][i * per:(i + 1) * per] for r in range(nranks)]))]
        return f"all_to_all: wrong result on ranks {bad}" if bad else None
    else:
        xs = [np.full(count, r, np.float32) for r in range(nranks)]
        got = functional.permute(xs, [(r, (r + 1) % nranks) for r in range(nranks)])
        bad = [r for r in range(nranks) if not np.all(got[r] == (r - 1) % nranks)]
        return f"{op}: wrong result on ranks {bad}" if bad else None
    bad = [r for r in range(nranks) if not np.array_equal(got[r].astype(np.float64), want)]
    return f"{op}: wrong result on ranks {bad}" if bad else None


def plot(path, curves, op):
    """``curves`` = {label: [(size, busbw GB/s), ...]} -> a log-x PNG, written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, pts in curves.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s = 10^9 B/s)")
    ax.set_title(f"trnsim nccom-test: {op} (simulated)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    from ..fileio import atomic_write
    try:
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)


def main(args, out=sys.stdout) -> int:
    op = OP_NAMES[args.operation]
    try:
        topo = get_topology(args.topology, nodes=args.nnodes, lnc=args.lnc)
        sz = sizes(args.minbytes, args.maxbytes, args.stepbytes, args.stepfactor)
        rs = rows(op, sz, topo, args.nworkers, args.datatype, args.algorithm)
    except ValueError as e:
        print(f"nccom-test: error: {e}", file=sys.stderr)
        return 2
    print(describe(topo, args.nworkers), file=out)
    print(format_table(rs, args.show_algorithm, args.show_bound), file=out)
    status = 0
    if args.check:
        errors = 0
        for m, *_ in rs:
            if m * args.nworkers > CHECK_LIMIT_BYTES:
                print(f"check: size {m} skipped ({args.nworkers} ranks x {m} B is above the "
                      f"{CHECK_LIMIT_BYTES >> 20} MiB the functional check holds in memory)", file=out)
                continue
            err = check(op, m, args.nworkers, args.datatype)
            if err:
                errors += 1
                print(f"check: size {m}: {err}", file=out)
        if errors:
            print(f"{errors} errors found - test failed", file=out)
            status = 1
    if args.plot:
        curves = {f"{topo.name} ({args.nworkers} ranks)": [(r[0], r[5]) for r in rs]}
        for name in [x for x in args.compare.split(",") if x.strip()]:
            try:
                t = get_topology(name.strip(), lnc=args.lnc)
            except ValueError as e:
                print(f"nccom-test: error: --compare: {e}", file=sys.stderr)
                return 2
            rr = rows(op, sz, t, t.ranks, args.datatype)
            curves[f"{t.name} ({t.ranks} ranks)"] = [(r[0], r[5]) for r in rr]
        plot(args.plot, curves, op)
        print(f"plot: {args.plot}", file=out)
    return status


def run(argv=None, out=sys.stdout) -> int:
    return main(build_parser().parse_args(argv), out)


if __name__ == "__main__":
    sys.exit(run())
