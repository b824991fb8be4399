"""``trnsim estimate``: time, memory and dollars of a training step, from the model's layers run on the shape-only
device (see :mod:`trnsim.cost.estimator`)."""

from __future__ import annotations

import argparse
import os
import sys

from ..cliutil import OneLineParser, ProgressLine

__all__ = ["main"]

_EXAMPLES = """examples:
  trnsim estimate --model qwen3-32b --instance trn2.48xlarge --count 1 --tp 4 --seq 8192 --global-batch 64
  trnsim estimate --model llama3-8b --instance trn2.48xlarge            # best parallelism found for 1 instance
  trnsim estimate --model deepseek-v3 --instance trn2-ultraserver --tp 8 --ep 8 --pp 4 --checkpointing --json
  trnsim estimate --model ./config.json --instance trn3-gen1-ultraserver --search --counts 1,2 -j 2
  trnsim estimate --model bert-config.json --instance trn1.32xlarge --seq 128 --micro-batch 16 --precision autocast
  trnsim estimate --model examples/estimate_factory.py:make_model --instance trn2.48xlarge --micro-batch 8
"""


_Parser = OneLineParser


def _ints(text, flag):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected integers like 1,2,4") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected positive integers like 1,2,4")
    return vals


def _positive(text):
    try:
        v = int(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return v


def _instance(text):
    from .estimator import instance_name
    try:
        return instance_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser():
    from .estimator import INSTANCES
    from .models import builtin_names
    p = _Parser(prog="trnsim estimate", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EXAMPLES,
                description="Estimate the time and price of a training step on trn1/trn2/trn3 instances: the "
                            "model's layers run on the simulated device in shape-only mode, collectives on the "
                            "instance's topology.")
    p.add_argument("--model", required=True, help=f"built-in ({', '.join(builtin_names())}), a Hugging Face "
                   "config.json path (any architecture transformers builds), or a Python factory path.py:function "
                   "returning (nn.Module, input spec)")
    p.add_argument("--instance", "--topology", dest="instance", required=True, type=_instance, metavar="INSTANCE",
                   help=f"one of {', '.join(INSTANCES)} (aliases as in nccom-test: trn1, trn2, trn2u, "
                        "trn2u.48xlarge, trn3, ...)")
    p.add_argument("--count", type=_positive, default=1, help="instances (UltraServers for the UltraServer types)")
    for flag in ("--tp", "--pp", "--cp", "--ep", "--dp"):
        p.add_argument(flag, type=_positive, default=None, help=f"{flag[2:].upper()} degree")
    p.add_argument("--no-fsdp", action="store_true", help="plain data parallelism (gradient all-reduce)")
    p.add_argument("--no-sequence-parallel", action="store_true",
                   help="plain tensor parallelism (all-reduces; norms on the whole sequence on every TP rank)")
    p.add_argument("--micro-batch", type=_positive, default=1)
    p.add_argument("--seq", type=_positive, default=None,
                   help="sequence length (default 4096 for decoders; a text model run as its own code: 512 or its "
                        "max_position_embeddings if fewer; unused for images and factories)")
    p.add_argument("--global-batch", type=_positive, default=None,
                   help="sequences (samples) per step; default 4 x ranks x micro-batch (with a search: x the least "
                        "common multiple of the micro-batches tried), the same for every candidate")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    p.add_argument("--precision", choices=("bf16", "fp8", "autocast", "fp32"), default="bf16",
                   help="bf16 (default); fp8 (decoder templates, trn2+); autocast (fp32 weights, bf16 matmuls: "
                        "Neuron's 'Autocast BF16') and fp32 (fp32 matmuls; NEURON_CC_FLAGS='--auto-cast matmult' "
                        "prices them as the compiler's bf16 auto-cast) for models run as their own code")
    p.add_argument("--optimizer", choices=("adamw", "lamb"), default="adamw")
    p.add_argument("--compile", action="store_true", help="compiled execution (default eager)")
    p.add_argument("--lnc", type=int, choices=(1, 2), default=None, help="logical core size (default: the target's)")
    p.add_argument("--prices", metavar="FILE", help="your own price file (same format as the built-in one)")
    p.add_argument("--tokens", type=float, default=None, help="a token budget: time and dollars to train on it")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", default=None, help="folder for estimate.json and the breakdown PNG")
    p.add_argument("--search", action="store_true", help="search parallelism x count x micro-batch: Pareto front")
    p.add_argument("--counts", type=lambda t: _ints(t, "--counts"), default=None, help="instance counts to search")
    p.add_argument("--micro-batches", type=lambda t: _ints(t, "--micro-batches"), default=[1, 2])
    p.add_argument("-j", "--jobs", type=_positive, default=None,
                   help="processes for the kernel simulations (default 1: in this process, the least CPU)")
    return p


def _search_progress(line):
    def progress(done, total):
        line.bar(done, total, "  searching", "configurations")
    return progress


def main(argv=None) -> int:
    """``trnsim estimate``: the estimate (or the search), then, when this process scheduled its kernel simulations
    uncompiled because numba's cache does not hold the compiled scheduler yet, a note naming ``trnsim warmup``."""
    code = _main(argv)
    from ..backend import costs
    if costs.ran_uncompiled_cold():
        print("trnsim estimate: note: the scheduler ran uncompiled (numba has not compiled it for this install yet); "
              "'trnsim warmup' compiles it once, about 1.5 min, and later estimates run faster", file=sys.stderr)
    return code


def _main(argv=None) -> int:
    import json
    p = build_parser()
    a = p.parse_args(argv)
    from ..fileio import FileWriteError, atomic_write_json, ensure_writable_dir
    from . import estimator as E
    from .report import format_estimate, format_front, plot_breakdown, plot_front, write_json
    from .search import search
    line = ProgressLine()          # a terminal only
    try:
        if E.is_template(a.model):
            E.load_model(a.model)
        else:
            from .anyestimate import check_flags
            check_flags(a.model, tp=a.tp, pp=a.pp, cp=a.cp, ep=a.ep, checkpointing=a.checkpointing,
                        compiled=a.compile, precision=a.precision)
        if a.prices:
            E.load_prices(a.prices)
        if a.out:
            ensure_writable_dir(a.out)
        common = dict(seq=a.seq, global_batch=a.global_batch, precision=a.precision, compiled=a.compile,
                      lnc=a.lnc, prices=a.prices, fsdp=not a.no_fsdp,
                      sequence_parallel=not a.no_sequence_parallel, optimizer=a.optimizer)
        if a.search or all(v is None for v in (a.tp, a.pp, a.dp)):
            counts = a.counts or [a.count]
            try:
                # the best configuration with --compile: rank every candidate eagerly, compile the 2 fastest
                # (--search --compile compiles every candidate)
                res, front, rejected = search(a.model, a.instance, counts=counts, micro_batches=a.micro_batches,
                                              progress=_search_progress(line), jobs=a.jobs,
                                              compile_top=None if a.search else 2, fork=True, **common)
            finally:
                line.clear()
            if not res:
                why = "; ".join(sorted({r[1] for r in rejected})[:3])
                print(f"trnsim estimate: no configuration of {a.model} fits {counts} x {a.instance}: {why}",
                      file=sys.stderr)
                return 1
            best = min(res, key=lambda e: e.step_time_s)
            which = f"fastest of the {len(res)} compiled" if a.compile else f"fastest of {len(res)} that fit"
            best.notes.append(f"configuration chosen by the search ({which} at the global "
                              f"batch {best.global_batch}, the same for every candidate): "
                              f"{best.parallelism.label()}")
            if a.search:
                if a.json:
                    print(json.dumps({"front": [e.to_json() for e in front],
                                      "feasible": len(res), "rejected": len(rejected)}, indent=1))
                else:
                    print(format_front(res, front))
                    print(f"({len(res)} configurations fit, {len(rejected)} rejected; * = Pareto front)")
                if a.out:
                    plot_front(res, front, os.path.join(a.out, "pareto.png"))
                    atomic_write_json(os.path.join(a.out, "search.json"), [e.to_json() for e in res], indent=1)
                return 0
            e = best
        else:
            with line.ticking(f"estimating {a.model} on {a.count} x {a.instance}"):
                e = E.estimate(a.model, a.instance, a.count, dp=a.dp, tp=a.tp or 1, pp=a.pp or 1, cp=a.cp or 1,
                               ep=a.ep or 1, micro_batch=a.micro_batch, checkpointing=a.checkpointing, jobs=a.jobs,
                               **common)
            line.clear()
    except (ValueError, FileWriteError) as err:
        line.clear()
        print(f"trnsim estimate: error: {err}", file=sys.stderr)
        return 2
    if a.json:
        d = e.to_json()
        if a.tokens:
            d.update(tokens=a.tokens, time_for_tokens_s=a.tokens / e.tokens_per_s,
                     usd_for_tokens=e.usd_for_tokens(a.tokens))
        print(json.dumps(d, indent=1))
    else:
        print(format_estimate(e, tokens=a.tokens))
    if a.out:
        write_json(e, os.path.join(a.out, "estimate.json"), tokens=a.tokens)
        plot_breakdown([e], os.path.join(a.out, "breakdown.png"))
    return 0 if e.fits else 1
