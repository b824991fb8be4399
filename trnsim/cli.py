"""The ``trnsim`` command: ``trnsim demo``, ``trnsim profile FILE::KERNEL``, ``trnsim compare A B``."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np


# -- progress ---------------------------------------------------------------------------------------
class Progress:
    """A one-line progress display on stderr: instructions issued while simulating, then a scheduling bar.
    Silent unless enabled (by default: when stderr is a terminal)."""

    def __init__(self, enabled=None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._stop = threading.Event()
        self._thread = None
        self._t0 = time.perf_counter()

    def _write(self, text):
        self.stream.write("\r" + text.ljust(72))
        self.stream.flush()

    def _poll(self):
        from .machine.core import live_cores
        while not self._stop.wait(0.25):
            n = sum(len(c.instructions) for c in live_cores())
            self._write(f"  simulating: {n:,} instructions issued, {time.perf_counter() - self._t0:.1f} s")

    def simulating(self):
        if self.enabled:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def stop_simulating(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def scheduling(self, done, total):
        if not self.enabled or total <= 0:
            return
        w = 30
        k = int(w * done / total)
        self._write(f"  scheduling: [{'#' * k}{'.' * (w - k)}] {done:,}/{total:,}")

    def finish(self):
        self.stop_simulating()
        if self.enabled:
            self._write("")
            self.stream.write("\r")
            self.stream.flush()


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


# -- demo -------------------------------------------------------------------------------------------
def _demo(args):
    import ml_dtypes

    from .kernels import simulate
    from .kernels.library.matmul import tiled_matmul
    from .profiling import profile_result
    from .targets import get_target

    tg = get_target(args.target)
    rng = np.random.default_rng(0)
    K, M, N = args.k, args.m, args.n
    at = rng.standard_normal((K, M)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    t0 = time.perf_counter()
    res = simulate(tiled_matmul, target=tg).run(at, b)
    prof = profile_result(res, name="tiled_matmul")
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
    """``name=128x512:bfloat16`` -> ``(name, (128, 512), "bfloat16")`` (dtype defaults to float32)."""
    if "=" not in spec:
        raise ValueError(f"--arg {spec!r}: expected NAME=SHAPE[:DTYPE], e.g. a=128x512:bfloat16")
    name, rest = spec.split("=", 1)
    shape_s, _, dtype = rest.partition(":")
    try:
        shape = tuple(int(s) for s in shape_s.lower().replace(",", "x").split("x") if s)
    except ValueError:
        raise ValueError(f"--arg {spec!r}: shape {shape_s!r} is not like 128x512") from None
    if not shape:
        raise ValueError(f"--arg {spec!r}: empty shape")
    return name.strip(), shape, (dtype.strip() or "float32")


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
    install_nki()
    path = os.path.abspath(path)
    name = "trnsim_profiled_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod


def _profile(args):
    from .profiling import profile

    if "::" not in args.kernel:
        print("trnsim profile: give the kernel as FILE::KERNEL, e.g. kernels.py::matmul", file=sys.stderr)
        return 2
    path, kname = args.kernel.rsplit("::", 1)
    mod = _load_file(path)
    kern = getattr(mod, kname, None)
    if kern is None:
        print(f"trnsim profile: {path} has no {kname!r}", file=sys.stderr)
        return 2
    execute = not args.shape_only
    rng = np.random.default_rng(args.seed)
    pargs, kwargs = [], {}
    if args.inputs:
        builder = getattr(mod, args.inputs, None)
        if builder is None:
            print(f"trnsim profile: {path} has no input builder {args.inputs!r}", file=sys.stderr)
            return 2
        built = builder()
        if isinstance(built, dict):
            kwargs = dict(built)
        elif isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], dict) and \
                isinstance(built[0], (list, tuple)):
            pargs, kwargs = list(built[0]), dict(built[1])
        else:
            pargs = list(built) if isinstance(built, (list, tuple)) else [built]
    for spec in args.arg or ():
        try:
            name, shape, dtype = parse_arg_spec(spec)
            kwargs[name] = make_input(shape, dtype, rng, execute)
        except ValueError as e:
            print(f"trnsim profile: {e}", file=sys.stderr)
            return 2
    prog = Progress(True if args.progress else (False if args.no_progress else None))
    grid = tuple(int(g) for g in args.grid.split("x")) if args.grid else None
    t0 = time.perf_counter()
    prog.simulating()
    try:
        def first_sched(done, total):
            prog.stop_simulating()
            prog.scheduling(done, total)
        runner = profile(kern, target=args.target, grid=grid, execute=execute, progress=first_sched)
        prof = runner(*pargs, **kwargs)
    finally:
        prog.finish()
    wall = time.perf_counter() - t0
    mode = "shape-only" if not execute else "full"
    print(prof.summary())
    print(f"  host time {wall:.2f} s ({mode} simulation)")
    stem = getattr(getattr(kern, "fn", kern), "__name__", kname)
    _write_outputs(prof, args.out, stem, trace=args.trace, png=args.png, plot=not args.no_plot)
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="trnsim", description="Trainium NeuronCore simulator")
    sub = p.add_subparsers(dest="cmd")
    d = sub.add_parser("demo", help="run a built-in NKI kernel on a simulated NeuronCore, check it, profile it")
    d.add_argument("--target", default=None, help="trn1, trn2 (default) or trn3")
    d.add_argument("--m", type=int, default=256)
    d.add_argument("--k", type=int, default=512)
    d.add_argument("--n", type=int, default=1024)
    d.add_argument("--out", default="trnsim-out", help="folder for the trace and the PNG (default trnsim-out)")
    d.add_argument("--no-plot", action="store_true", help="skip the PNG")
    pr = sub.add_parser("profile", help="simulate and time a kernel: FILE::KERNEL",
                        description="Simulate a kernel, print its timing summary, write a Perfetto/Chrome trace "
                                    "and a PNG timeline.")
    pr.add_argument("kernel", help="FILE::KERNEL, e.g. my_kernels.py::matmul")
    pr.add_argument("--arg", action="append", metavar="NAME=SHAPE[:DTYPE]",
                    help="an input, e.g. --arg a=128x512:bfloat16 (repeatable; random values, seed --seed)")
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
    sub.add_parser("conformance", add_help=False,
                   help="PyTorch op and NKI instruction conformance (see `trnsim conformance --help`)")
    sub.add_parser("compare", add_help=False, help="compare two difftest recordings: first divergence, report "
                   "(see `trnsim compare --help`)")
    sub.add_parser("replay", add_help=False, help="re-run a recording's inputs on the simulator and compare")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["compare"], ["replay"]):
        from .difftest.cli import main as difftest_main
        return difftest_main(argv)
    if argv[:1] == ["conformance"]:
        from conformance.runner import main as conformance_main
        return conformance_main(argv[1:])
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return _demo(args)
    if args.cmd == "profile":
        return _profile(args)
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
