"""``trnsim compare A B`` and ``trnsim replay BUNDLE`` (also ``python -m trnsim.difftest compare|replay``).

Exit status: 0 equal within tolerance, 1 diverged, 2 usage error or a bundle that cannot be trusted or read.
"""

from __future__ import annotations

import os
import sys

from ..cliutil import OneLineParser
from .bundle import DEFAULT_MAX_BYTES, BundleError
from .tolerance import Tolerances, parse_spec


def _pairs(items, flag):
    out = []
    for it in items or ():
        pat, sep, spec = it.rpartition("=") if it.count("=") > 1 and "rtol=" not in it.split(",")[0] \
            else it.partition("=")
        if not sep or not pat or not spec:
            raise ValueError(f"{flag} {it!r}: expected PATTERN=rtol:X,atol:Y,ulps:Z")
        parse_spec(spec)            # fail early, with the flag named
        out.append((pat, spec))
    return out


def _common(p):
    p.add_argument("--tol", action="append", metavar="GLOB=SPEC",
                   help="tolerance for entries whose key matches GLOB, e.g. 'op/*/blocks.1.*=rtol:1e-3,ulps:4' "
                        "(repeatable; the last match wins)")
    p.add_argument("--dtype-tol", action="append", metavar="DTYPE=SPEC",
                   help="tolerance for a dtype, e.g. bfloat16=rtol:0.02,ulps:4 (repeatable)")
    p.add_argument("--strict", action="store_true", help="ops recorded on one side only count as divergences")
    p.add_argument("--report", metavar="DIR", help="write DIR/report.md and DIR/report.html")
    p.add_argument("--md", metavar="FILE", help="write the Markdown report here")
    p.add_argument("--html", metavar="FILE", help="write the HTML report here")
    p.add_argument("--top", type=int, default=5, help="worst elements listed per tensor (default 5)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                   help=f"largest tensor file read (default {DEFAULT_MAX_BYTES:,} bytes)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")


def _tolerances(args):
    dt = dict(_pairs(args.dtype_tol, "--dtype-tol"))
    return Tolerances(dtype_overrides=dt, path_overrides=_pairs(args.tol, "--tol"))


def _finish(cmp, args):
    from .report import text_summary, verdict, write_reports
    md, html = args.md, args.html
    if args.report:
        md = md or os.path.join(args.report, "report.md")
        html = html or os.path.join(args.report, "report.html")
    write_reports(cmp, md, html)
    print(verdict(cmp) if args.quiet else text_summary(cmp))
    for pth in (md, html):
        if pth and not args.quiet:
            print(f"  report: {pth}")
    return cmp.exit_code


_COMPARE_EXAMPLES = """examples:
  trnsim compare rec-cuda rec-sim                        # two --trnsim-record folders, A is the reference
  trnsim compare rec-cuda rec-sim --report diff --dtype-tol bfloat16=rtol:0.02,ulps:4
  trnsim compare rec-a/test_mlp/rank0 rec-b/test_mlp/rank0 --tol 'op/*/fc2.*=rtol:1e-3' -q"""

_REPLAY_EXAMPLES = """examples:
  trnsim replay rec-cuda/test_mlp/rank0                  # re-run the recorded function on the simulator
  trnsim replay rec-cuda/test_mlp/rank0 --fn my_model:forward --device cpu
  trnsim replay rec-sim/test_kernel/rank0 --kernel --call 1 --report replay-report"""


def compare_main(argv=None) -> int:
    p = OneLineParser(prog="trnsim compare", epilog=_COMPARE_EXAMPLES,
                                description="Compare two difftest recordings (A is the reference) tensor by tensor "
                                            "and report the first divergence. Exit 0 equal within tolerance, 1 "
                                            "diverged, 2 bad usage or an untrusted/unreadable bundle.")
    p.add_argument("a", help="recording folder A (a bundle, or a folder of them, e.g. the --trnsim-record DIR)")
    p.add_argument("b", help="recording folder B")
    _common(p)
    args = p.parse_args(argv)
    from .comparison import compare
    try:
        tols = _tolerances(args)
        cmp = compare(args.a, args.b, tols, strict=args.strict, top=args.top, max_bytes=args.max_bytes)
    except (BundleError, ValueError) as e:
        print(f"trnsim compare: {e}", file=sys.stderr)
        return 2
    return _finish(cmp, args)


def replay_main(argv=None) -> int:
    p = OneLineParser(prog="trnsim replay", epilog=_REPLAY_EXAMPLES,
                                description="Re-run a recording's inputs on the simulator and compare with what "
                                            "was recorded. Exit codes as for compare.")
    p.add_argument("bundle", help="one bundle folder (.../<test>/rank<r>)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--fn", metavar="MODULE:FUNC", help="the function to run (default: the recorded one)")
    g.add_argument("--kernel", metavar="MODULE:KERNEL", nargs="?", const="",
                   help="replay a recorded NKI kernel launch (default kernel: the recorded one)")
    p.add_argument("--call", type=int, default=0, help="which recorded call or kernel launch (default 0)")
    p.add_argument("--device", default=None, help="device for a function replay (default: simulated neuron)")
    p.add_argument("--out", default=None, help="folder for the replay's own recording (default: a temp folder)")
    _common(p)
    args = p.parse_args(argv)
    from .replaying import replay, replay_kernel
    try:
        tols = _tolerances(args)
        if args.kernel is not None:
            cmp = replay_kernel(args.bundle, args.kernel or None, call=args.call, out=args.out, tolerances=tols)
        else:
            cmp = replay(args.bundle, args.fn, call=args.call, device=args.device, out=args.out, tolerances=tols)
    except (BundleError, ValueError, ImportError, AttributeError) as e:
        print(f"trnsim replay: {e}", file=sys.stderr)
        return 2
    return _finish(cmp, args)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:])
    if argv[:1] == ["replay"]:
        return replay_main(argv[1:])
    print("usage: python -m trnsim.difftest {compare A B | replay BUNDLE} [options]", file=sys.stderr)
    return 2
