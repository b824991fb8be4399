"""The ``trnsim`` command: ``demo``, ``profile FILE::KERNEL``, ``estimate``, ``nccom-test``, ``compare``/``replay``,
``conformance``.

A mistake in the command line ends with one line on stderr naming the argument, the value and what is allowed,
and exit status 2 (never a traceback); output to a closed pipe (``trnsim profile ... | head``) ends quietly.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import numpy as np

from .cliutil import OneLineParser, ProgressLine


class UsageError(ValueError):
    """A mistake in the command line: printed as one line, exit status 2."""


_Parser = OneLineParser     # one-line errors: ``trnsim profile: error: ... (see 'trnsim profile --help')``


# -- progress ---------------------------------------------------------------------------------------
class Progress:
    """Progress of a kernel run on stderr (``trnsim.cliutil.ProgressLine``: a terminal only): instructions issued
    while simulating, then a scheduling bar."""

    def __init__(self, enabled=None, stream=None):
        self.line = ProgressLine(enabled, stream)
        self.enabled = self.line.enabled
        self._ticking = None

    def simulating(self):
        from .machine.core import live_cores

        def issued():
            return f"{sum(len(c.instructions) for c in live_cores()):,} instructions issued"
        self._ticking = self.line.ticking("simulating", issued)
        self._ticking.__enter__()
        return self

    def stop_simulating(self):
        if self._ticking is not None:
            self._ticking.__exit__(None, None, None)
            self._ticking = None

    def scheduling(self, done, total):
        if not self.enabled or total <= 0:
            return
        from .machine import sched_fast
        chosen = sched_fast.last_choice()
        if done == 0 and total >= sched_fast.FAST_MIN and chosen == "numba" and not sched_fast.compiled():
            # the compiled loop's first use in this process: numba loads it from its cache, or compiles it (after
            # an install: about 90 s of CPU on the 2-core development machine, stop 47), with no progress of its own
            what = ("loading the compiled scheduler" if sched_fast.cache_warm() else
                    "compiling the scheduler once (~1.5 min; 'trnsim warmup')")
            self.line.show(f"  scheduling: {what}", force=True)
            return
        # a large run under auto before the loop is compiled for this install: uncompiled (sched_fast.choose's cold
        # budget, the one condition sched_fast.ran_uncompiled_cold states)
        slow = total >= sched_fast.FAST_MIN and chosen == "python" and sched_fast.ran_uncompiled_cold()
        if slow and done == 0:
            self.line.show("  scheduling, uncompiled ('trnsim warmup' compiles it once)", force=True)
            return
        w = 30
        k = int(w * done / total)
        label = "scheduling, uncompiled" if slow else "scheduling"
        self.line.show(f"  {label}: [{'#' * k}{'.' * (w - k)}] {done:,}/{total:,}", force=done >= total)

    def finish(self):
        self.stop_simulating()
        self.line.clear()


def _warmup(args):
    """``trnsim warmup``: the compiled scheduler built into numba's cache (or found there), with the time taken."""
    from .kernels.jit import run_kernel
    from .kernels.library.matmul import tiled_matmul
    from .machine import sched_fast
    from .machine.scheduler import schedule

    if not sched_fast.fast_available():
        raise UsageError("the compiled scheduler needs numba, which cannot be imported here (pip install numba); "
                         "trnsim runs the same scheduler uncompiled without it")
    held = sched_fast.cache_warm()
    print("trnsim warmup: " + ("numba's cache holds the compiled scheduler: loading it" if held else
                               "compiling the scheduler into numba's cache (about 1.5 min on a 2-core machine)"),
          flush=True)
    import ml_dtypes
    z = np.zeros((128, 128), ml_dtypes.bfloat16)
    res = run_kernel(tiled_matmul, (z, z), {}, (1,), "trn2", execute=False)        # shape only: no numerics
    t0, c0 = time.perf_counter(), time.process_time()
    schedule(res.cores, impl="numba")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  done in {wall:.1f} s ({cpu:.1f} s of CPU); later runs load it from the cache")
    return 0


def _write_outputs(prof, out_dir, stem, trace=None, png=None, plot=True):
    trace = trace or os.path.join(out_dir, f"{stem}.trace.json")
    prof.save_trace(trace)
    print(f"  trace: {trace} (open in ui.perfetto.dev or chrome://tracing)")
    if plot:
        png = png or os.path.join(out_dir, f"{stem}.png")
        try:
            prof.plot(png)
            print(f"  timeline picture: {png}")
        except ImportError:
            print("  timeline picture: skipped (matplotlib is not installed)")


# -- argument checks ------------------------------------------------------------------------------
def _target_arg(name):
    """The Target named by ``--target`` (None: the environment's or trn2); a UsageError names the choices."""
    from .targets import get_target
    try:
        return get_target(name)
    except ValueError as e:
        raise UsageError(f"--target {name!r}: {e}" if name is not None else str(e)) from None


def _positive_ints(text, what, example):
    try:
        vals = tuple(int(s) for s in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise UsageError(f"{what} {text!r}: expected positive integers like {example}") from None
    bad = [v for v in vals if v <= 0]
    if bad:
        raise UsageError(f"{what} {text!r}: every dimension must be a positive integer (got {bad[0]}), "
                         f"e.g. {example}")
    return vals


def _check_demo_shape(M, K, N):
    """The demo's kernel (library ``tiled_matmul``) tiles M by 128 (stationary free size), K by 128 (partitions)
    and N by 512 (moving free size; a smaller N is one tile): say so before running instead of computing
    a result with untouched (NaN) edges."""
    from .kernels.language import tile_size
    TM, TK, TN = tile_size.gemm_stationary_fmax, tile_size.pmax, tile_size.gemm_moving_fmax
    def near(v, t):
        lo, hi = (v // t) * t, (v // t + 1) * t
        return f"try {hi}" if lo <= 0 else f"try {lo} or {hi}"
    for flag, v, t in (("--m", M, TM), ("--k", K, TK)):
        if v <= 0 or v % t:
            raise UsageError(f"{flag} {v}: the demo's tiled matmul needs a positive multiple of {t} "
                             f"(its tile size on that axis); {near(v, t)}")
    if N <= 0 or (N > TN and N % TN):
        raise UsageError(f"--n {N}: the demo's tiled matmul needs a positive N that is at most {TN} or a "
                         f"multiple of {TN}; {near(N, TN)}")


# -- demo -------------------------------------------------------------------------------------------
def _demo(args):
    import ml_dtypes

    from .kernels import simulate
    from .kernels.library.matmul import tiled_matmul
    from .profiling import profile_result
    from .targets import get_target

    from .fileio import ensure_writable_dir
    tg = _target_arg(args.target)
    K, M, N = args.k, args.m, args.n
    _check_demo_shape(M, K, N)
    ensure_writable_dir(args.out)
    rng = np.random.default_rng(0)
    at = rng.standard_normal((K, M)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    prog = Progress(None)
    t0 = time.perf_counter()
    prog.simulating()
    try:
        res = simulate(tiled_matmul, target=tg).run(at, b)

        def sched(done, total):
            prog.stop_simulating()
            prog.scheduling(done, total)
        prof = profile_result(res, name="tiled_matmul", progress=sched)
    finally:
        prog.finish()
    wall = time.perf_counter() - t0
    out = res.outputs.astype(np.float64)
    ref = at.astype(np.float64).T @ b.astype(np.float64)
    err = np.max(np.abs(out - ref)) / max(1e-30, np.max(np.abs(ref)))
    # bf16 output: one rounding of the fp32 accumulation, relative error up to 2^-8 of the largest value
    tol = 2.0 ** -7
    core = res.cores[0]
    print(f"trnsim demo: tiled bf16 matmul [{M}x{K}] @ [{K}x{N}] on a simulated {tg.marketing_name} "
          f"NeuronCore ({tg.name})")
    print(f"  instructions: {len(core.instructions)} "
          + ", ".join(f"{k} x{v}" for k, v in sorted(core.instruction_counts().items())))
    print(f"  max relative error vs float64 NumPy: {err:.2e} (tolerance {tol:.1e}) -> "
          f"{'OK' if err <= tol else 'MISMATCH'}")
    print(f"  simulated and scheduled in {wall * 1000:.0f} ms of host time")
    print(prof.summary())
    _write_outputs(prof, args.out, "demo", plot=not args.no_plot)
    return 0 if err <= tol else 1


# -- profile ----------------------------------------------------------------------------------------
def parse_arg_spec(spec):
    """``name=128x512:bfloat16`` -> ``(name, (128, 512), "bfloat16")`` (dtype defaults to float32).
    A malformed spec raises :class:`UsageError` (a ValueError) naming it."""
    if "=" not in spec:
        raise UsageError(f"--arg {spec!r}: expected NAME=SHAPE[:DTYPE], e.g. a=128x512:bfloat16")
    name, rest = spec.split("=", 1)
    if not name.strip().isidentifier():
        raise UsageError(f"--arg {spec!r}: {name.strip()!r} is not a parameter name")
    shape_s, _, dtype = rest.partition(":")
    if not shape_s.strip():
        raise UsageError(f"--arg {spec!r}: empty shape; expected NAME=SHAPE[:DTYPE], e.g. a=128x512:bfloat16")
    shape = _positive_ints(shape_s.strip(), f"--arg {name.strip()}: shape", "128x512")
    dtype = dtype.strip() or "float32"
    from .memory import dtype_of
    try:
        dtype_of(dtype)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--arg {name.strip()}: {e}") from None
    return name.strip(), shape, dtype


def make_input(shape, dtype, rng, execute=True):
    """An input array of ``shape`` and trnsim dtype name ``dtype``: random values, or zeros in shape-only mode
    (zeros are allocated lazily by the OS, so large shape-only inputs cost no memory)."""
    from .memory import dtype_of
    dt = dtype_of(dtype)
    if not execute:
        return np.zeros(shape, dtype=dt.np)
    if dt.is_float:
        return rng.standard_normal(shape, dtype=np.float32).astype(dt.np)
    return rng.integers(0, 10, size=shape).astype(dt.np)


def _load_file(path):
    import importlib.util

    from . import install_nki
    if not os.path.exists(path):
        raise UsageError(f"kernel file {path!r} does not exist")
    if os.path.isdir(path) or not path.endswith(".py"):
        raise UsageError(f"kernel file {path!r}: expected a Python file (.py)")
    install_nki()
    path = os.path.abspath(path)
    name = "trnsim_profiled_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"kernel file {path!r} cannot be loaded as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(mod)     # an error in the user's file shows the user's traceback
    finally:
        sys.path.pop(0)
    return mod


def _names(mod):
    """The kernels and functions a file defines (not the ones it imports)."""
    return sorted(k for k, v in vars(mod).items() if not k.startswith("_") and callable(v)
                  and (hasattr(v, "fn") or getattr(v, "__module__", None) == mod.__name__))


def _where(fn):
    """``file:line`` of a kernel's definition (its ``def`` line), or ``None`` when Python cannot tell."""
    import inspect
    try:
        path = inspect.getsourcefile(fn) or inspect.getfile(fn)
        line = fn.__code__.co_firstlineno     # the first decorator's line: move on to the ``def``
    except (TypeError, AttributeError):
        return None
    import linecache
    for ln in range(line, line + 50):
        text = linecache.getline(path, ln).lstrip()
        if text.startswith(("def ", "async def ")):
            line = ln
            break
    try:
        path = os.path.relpath(path)
    except ValueError:                  # another drive (Windows)
        pass
    if not path.startswith(".."):
        return f"{path}:{line}"
    return f"{os.path.abspath(path)}:{line}"


def _check_inputs(kern, kname, pargs, kwargs, sources, problems=()):
    """Check the inputs the command line built against the kernel's parameters before running it, so that a
    mismatch is one line naming the kernel, where it is defined, its parameters and what is missing, unknown or
    given twice (never a ``TypeError`` traceback from inside the launch).  ``sources[name]`` says which option
    gave each keyword input; positional inputs come from ``--inputs``; ``problems`` are ones found already."""
    import difflib
    import inspect

    from .profiling import _unwrap
    fn = inspect.unwrap(_unwrap(kern)[0])
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):     # no signature to check against (a builtin): let the launch decide
        if problems:
            raise UsageError(f"kernel {kname}: " + "; ".join(problems)) from None
        return
    params = list(sig.parameters.values())
    P = inspect.Parameter
    shown = []
    for q in params:
        if q.kind is P.VAR_POSITIONAL:
            shown.append("*" + q.name)
        elif q.kind is P.VAR_KEYWORD:
            shown.append("**" + q.name)
        elif q.default is not P.empty:
            shown.append(f"{q.name}={q.default!r}")
        else:
            shown.append(q.name)
    where = _where(fn)
    head = f"kernel {kname}{f' ({where})' if where else ''} takes ({', '.join(shown)})"
    named = [q for q in params if q.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]
    positional = [q for q in params if q.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    var_pos = any(q.kind is P.VAR_POSITIONAL for q in params)
    var_kw = any(q.kind is P.VAR_KEYWORD for q in params)
    problems = list(problems)
    if len(pargs) > len(positional) and not var_pos:
        problems.append(f"{sources.get('*', '--inputs')} gives {len(pargs)} positional inputs, it takes at most "
                        f"{len(positional)}")
    filled = {q.name for q in positional[:len(pargs)]}
    by_name = {q.name: q for q in named}
    unknown, twice = [], []
    missing_names = [q.name for q in named if q.name not in filled and q.name not in kwargs]
    strays = [k for k in kwargs if (k not in by_name and not var_kw) or
              (k in by_name and by_name[k].kind is P.POSITIONAL_ONLY)]
    for name in kwargs:
        q = by_name.get(name)
        if q is None or q.kind is P.POSITIONAL_ONLY:
            if q is None and var_kw:
                continue
            # the one parameter left without a value, when this is the one input it has no place for; else a
            # close spelling
            near = missing_names if len(missing_names) == 1 and len(strays) == 1 else \
                difflib.get_close_matches(name, missing_names, n=1, cutoff=0.3) or \
                difflib.get_close_matches(name, [q.name for q in named], n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            what = "is positional-only" if q is not None else "is not one of its parameters"
            unknown.append(f"{sources.get(name, name)} {what}{hint}")
        elif name in filled:
            twice.append(f"{name} is given twice ({sources.get('*', '--inputs')} and {sources.get(name, name)})")
    missing = [q.name for q in named if q.default is P.empty and q.name not in filled and q.name not in kwargs]
    problems += unknown + twice
    if missing:
        if not pargs and not kwargs:
            problems.append(f"no inputs given (missing {', '.join(missing)}): give them with "
                            f"--arg NAME=SHAPE[:DTYPE] or --inputs FUNC")
        else:
            problems.append(f"missing {', '.join(missing)} (add --arg NAME=SHAPE[:DTYPE] for each)")
    if problems:
        raise UsageError(f"{head}: " + "; ".join(problems))


def _profile(args):
    from .isa.errors import NkiValidationError
    from .profiling import profile

    if "::" not in args.kernel:
        raise UsageError(f"kernel {args.kernel!r}: give it as FILE::KERNEL, e.g. kernels.py::matmul")
    path, kname = args.kernel.rsplit("::", 1)
    if not kname:
        raise UsageError(f"kernel {args.kernel!r}: the kernel name after '::' is missing")
    target = _target_arg(args.target)
    grid = _positive_ints(args.grid, "--grid", "2 or 2x2") if args.grid else None
    specs = [parse_arg_spec(s) for s in args.arg or ()]
    from .fileio import ensure_writable_dir
    for d in {args.out} | {os.path.dirname(os.path.abspath(p)) for p in (args.trace, args.png) if p}:
        ensure_writable_dir(d)
    mod = _load_file(path)
    kern = getattr(mod, kname, None)
    if kern is None or not callable(kern):
        have = ", ".join(_names(mod)[:12]) or "none"
        raise UsageError(f"kernel {kname!r}: {path} defines no such function (functions there: {have})")
    execute = not args.shape_only
    rng = np.random.default_rng(args.seed)
    pargs, kwargs = [], {}
    if args.inputs:
        builder = getattr(mod, args.inputs, None)
        if builder is None or not callable(builder):
            raise UsageError(f"--inputs {args.inputs!r}: {path} defines no such function")
        built = builder()
        if isinstance(built, dict):
            kwargs = dict(built)
        elif isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], dict) and \
                isinstance(built[0], (list, tuple)):
            pargs, kwargs = list(built[0]), dict(built[1])
        else:
            pargs = list(built) if isinstance(built, (list, tuple)) else [built]
    sources = {"*": f"--inputs {args.inputs}"}
    sources.update({k: f"--inputs {args.inputs} (keyword {k})" for k in kwargs})
    twice = []
    for name, shape, dtype in specs:
        if name in sources:
            twice.append(f"--arg {name} is given twice" if sources[name] == f"--arg {name}" else
                         f"{name} is given twice (by {sources[name]} and --arg {name})")
        sources[name] = f"--arg {name}"
    _check_inputs(kern, kname, pargs, {**kwargs, **{n: None for n, _, _ in specs}}, sources, twice)
    for name, shape, dtype in specs:
        kwargs[name] = make_input(shape, dtype, rng, execute)
    prog = Progress(True if args.progress else (False if args.no_progress else None))
    t0 = time.perf_counter()
    prog.simulating()
    try:
        def first_sched(done, total):
            prog.stop_simulating()
            prog.scheduling(done, total)
        runner = profile(kern, target=target, grid=grid, execute=execute, progress=first_sched)
        try:
            prof = runner(*pargs, **kwargs)
        except NkiValidationError as e:
            prog.finish()
            print(f"trnsim profile: {kname} broke a hardware rule: {e}", file=sys.stderr)
            return 1
    finally:
        prog.finish()
    wall = time.perf_counter() - t0
    if len(prof.timeline) == 0:
        print(f"trnsim profile: {kname} issued no instruction, so there is nothing to time "
              f"(does it return before loading anything?)", file=sys.stderr)
        return 1
    mode = "shape-only" if not execute else "full"
    print(prof.summary())
    print(f"  host time {wall:.2f} s ({mode} simulation)")
    stem = getattr(getattr(kern, "fn", kern), "__name__", kname)
    _write_outputs(prof, args.out, stem, trace=args.trace, png=args.png, plot=not args.no_plot)
    return 0


# -- the command -------------------------------------------------------------------------------------
_EPILOGS = {
    "demo": "examples:\n  trnsim demo\n  trnsim demo --target trn3 --m 512 --k 1024 --n 2048\n"
            "  trnsim demo --no-plot --out /tmp/demo",
    # the kernels are examples/my_kernels.py's (tests/test_guides.py runs these lines from the repository)
    "profile": "examples:\n  trnsim profile examples/my_kernels.py::matmul --arg a_t=512x256:bfloat16 "
               "--arg b=512x1024:bfloat16\n"
               "  trnsim profile examples/my_kernels.py::matmul --inputs make_inputs --shape-only --target trn3\n"
               "  trnsim profile examples/my_kernels.py::scaled_add --arg a=256x1024 --arg b=256x1024 --no-plot",
}


def _sub(sub, name, **kw):
    return sub.add_parser(name, formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog=_EPILOGS.get(name), **kw)


def build_parser():
    from . import __version__
    p = _Parser(prog="trnsim", description="Trainium NeuronCore simulator: run, check and time NKI kernels and "
                "PyTorch code on a simulated Trainium.", formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="examples:\n  trnsim demo\n  trnsim profile examples/my_kernels.py::matmul "
                       "--arg a_t=512x256:bfloat16 --arg b=512x1024:bfloat16\n"
                       "  trnsim conformance --suite nki\n\nrun 'trnsim COMMAND --help' for a command's options")
    p.add_argument("--version", action="version", version=f"trnsim {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    d = _sub(sub, "demo", help="run a built-in NKI kernel on a simulated NeuronCore, check it, profile it",
             description="Run a tiled bf16 matmul (M x K x N) on a simulated NeuronCore, check it against float64 "
                         "NumPy, print the timing summary, write a trace and a PNG.")
    d.add_argument("--target", default=None, help="trn1, trn2 (default) or trn3")
    d.add_argument("--m", type=int, default=256, help="rows of the result, a multiple of 128 (default 256)")
    d.add_argument("--k", type=int, default=512, help="contraction size, a multiple of 128 (default 512)")
    d.add_argument("--n", type=int, default=1024, help="columns, at most 512 or a multiple of 512 (default 1024)")
    d.add_argument("--out", default="trnsim-out", help="folder for the trace and the PNG (default trnsim-out)")
    d.add_argument("--no-plot", action="store_true", help="skip the PNG")
    pr = _sub(sub, "profile", help="simulate and time a kernel: FILE::KERNEL",
              description="Simulate a kernel, print its timing summary, write a Perfetto/Chrome trace "
                          "and a PNG timeline.")
    pr.add_argument("kernel", help="FILE::KERNEL, e.g. my_kernels.py::matmul")
    pr.add_argument("--arg", action="append", metavar="NAME=SHAPE[:DTYPE]",
                    help="an input, e.g. --arg a_t=512x256:bfloat16 (one per parameter of the kernel; random "
                    "values, seed --seed)")
    pr.add_argument("--inputs", metavar="FUNC", help="a function in FILE returning the inputs (a tuple of "
                    "positional arguments, a dict of keyword arguments, or (args, kwargs))")
    pr.add_argument("--target", default=None, help="trn1, trn2 (default) or trn3")
    pr.add_argument("--grid", default=None, help="launch grid, e.g. 2 or 2x2 (default: the kernel's)")
    pr.add_argument("--shape-only", action="store_true", help="no numerics: timing only (much faster)")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--out", default="trnsim-out", help="folder for the trace and the PNG (default trnsim-out)")
    pr.add_argument("--trace", default=None, help="trace path (default OUT/KERNEL.trace.json)")
    pr.add_argument("--png", default=None, help="PNG path (default OUT/KERNEL.png)")
    pr.add_argument("--no-plot", action="store_true", help="skip the PNG")
    pr.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    pr.add_argument("--no-progress", action="store_true", help="never show progress")
    _sub(sub, "warmup", help="compile the scheduler into numba's cache (once per install)",
         description="Compile trnsim's scheduler loop with numba into numba's cache, so that no later run waits "
                     "for it or runs it uncompiled (a fresh install, or after trnsim is upgraded or edited: about "
                     "1.5 min on a 2-core machine; loading it afterwards takes under a second).  Without it, runs "
                     "schedule uncompiled until their rows would repay the compile (the same timelines, slower).")
    for name, (_, _, helptext) in _DELEGATED.items():
        sub.add_parser(name, add_help=False, help=f"{helptext} (see 'trnsim {name} --help')")
    return p


_COMMANDS = {"demo": _demo, "profile": _profile, "warmup": _warmup}

# subcommands with parsers of their own: name -> (module, function taking argv, help)
_DELEGATED = {
    "conformance": ("conformance.runner", "main", "PyTorch op and NKI instruction conformance"),
    "nccom-test": ("trnsim.collectives.nccom", "run", "AWS nccom-test on a simulated cluster"),
    "estimate": ("trnsim.cost.cli", "main", "time and price of a training job on trn1/trn2/trn3 instances"),
    "compare": ("trnsim.difftest.cli", "compare_main", "compare two difftest recordings: first divergence, report"),
    "replay": ("trnsim.difftest.cli", "replay_main", "re-run a recording's inputs on the simulator and compare"),
}


def _run(argv):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in _DELEGATED:
        import importlib
        mod, fn, _ = _DELEGATED[argv[0]]
        return getattr(importlib.import_module(mod), fn)(argv[1:])
    p = build_parser()
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help()
        return 2
    from .fileio import FileWriteError
    try:
        return _COMMANDS[args.cmd](args)
    except (UsageError, FileWriteError) as e:
        print(f"trnsim {args.cmd}: error: {e}", file=sys.stderr)
        return 2


def main(argv=None):
    try:
        return _run(argv)
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly; point stdout at /dev/null so the interpreter's
        # final flush does not raise again
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except KeyboardInterrupt:
        print("trnsim: interrupted", file=sys.stderr)
        return 130


# The cyclic collector's thresholds for a ``trnsim`` process: a first generation of 10,000 allocations instead of
# Python's 700, and a collection of the second every 20 of the first instead of 10.  torch and dynamo hold
# hundreds of thousands of objects, which each full collection walks: a cold compiled Qwen3-32B estimate spent
# 1.14-1.28 s of CPU in 1,237 / 115 / 8 collections with Python's thresholds, 0.59-0.64 s in 126 / 13 / 1 with
# these (gc.callbacks, stop 45).
COLLECTOR_THRESHOLDS = (10_000, 20, 10)


def command(argv=None):
    """The ``trnsim`` console script and ``python -m trnsim``: :func:`main` in a process that ends right after
    (called in-process, as tests do, :func:`main` leaves the collector alone).  It collects less often
    (:data:`COLLECTOR_THRESHOLDS`), and freezes the collector's objects before the interpreter's shutdown: that
    shutdown's collections would walk every object torch, dynamo and the run made, only to free memory the
    process gives back anyway (a cold compiled estimate: 1.0-1.7 s of CPU after its exit handlers, 0.13-0.26 s
    frozen).  The exit handlers (the caches' writes) still run, and objects are still released, with their
    finalizers, as the modules go."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    code = main(argv)
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(command())
