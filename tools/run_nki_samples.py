#!/usr/bin/env python3
"""Run the kernels of AWS's aws-neuron/nki-samples against trnsim, each the way its own test or driver runs it, and
write a report.

    python tools/run_nki_samples.py --snapshot /path/to/nki-samples [--only NAME ...] [--timeout 1800]

The snapshot is used read-only.  Each kernel runs in its own process under ``TORCHNEURON_TARGET=sim`` (so
``import neuronxcc.nki`` is trnsim), from a temporary working directory, with the snapshot's ``src`` (and the
tutorial's own folder) on ``PYTHONPATH``:

- ``unit``: a pytest file of ``test/unit`` with its ``--simulation-only`` option (the tests' own NumPy references);
- ``main``: a tutorial file's ``__main__`` in accuracy mode (its own comparison and ``assert``), or its PyTorch
  driver (softmax: ``xm.xla_device()`` is trnsim's ``neuron`` device through the torch_xla stand-in);
- ``attn``: the attention tutorial's ``test_attn_tutorial("accuracy", attn_fwd_vN)``;
- ``ref``: kernels with no asserting accuracy driver in the snapshot (the matrix multiplication tutorial, whose
  PyTorch driver only prints, the reference add kernel, and double_row_matmul, whose unit test cannot run: it
  returns early unless the host's /sys product name says trn2, and reads it through an unimported ``warnings``):
  called here on random inputs and compared with a float64 NumPy reference written in this file (``REFERENCES``),
  with the tolerance stated there;
- ``contrib``: a ``contributed/`` kernel's own ``check_correct()`` (its comparison printed as ``Is close: True``,
  read here), or, for a file that checks at import, the file itself.

The kernel list depends on the snapshot: the legacy layout (``src/nki_samples/reference`` present: commit 7af4e4d
and earlier) or the newer one (6905a68 and later: the beta-2 tutorials, ``contributed/``); ``--list`` prints it.

``--profile`` runs ``trnsim profile`` instead, for each kernel in ``PROFILES`` (its kernel and inputs written to a
wrapper file), shape-only and full, on trn1 and trn2, and reports per kernel whether each of the four ran without a
refusal, with the simulated time.

Outputs ``<out>.json`` and ``<out>.md`` (default ``conformance/reports/nki-samples``): per kernel, the outcome
(match / mismatch / error / timeout) and, for failures, the last error line.  Exit status 0 when the run completed
(whatever the outcome), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
from trnsim.fileio import atomic_write  # noqa: E402

DEFAULT_SNAPSHOT = os.environ.get("NKI_SAMPLES_PATH", "")
DEFAULT_OUT = os.path.join(REPO, "conformance", "reports", "nki-samples")
TUT = "src/nki_samples/tutorials"

# (name, kind, spec): the kernels of the legacy layout (7af4e4d) and how each runs
KERNELS = [
    ("unit/flash_attn_fwd", "unit", "test_flash_attn_fwd.py"),
    ("unit/flash_attn_bwd", "unit", "test_flash_attn_bwd.py"),
    ("unit/SD_attention_small_head", "unit", "test_SD_attention_small_head.py"),
    ("unit/allocated_SD_attention_small_head", "unit", "test_allocated_SD_attention_small_head.py"),
    ("unit/rmsnorm_qkv", "unit", "test_rmsnorm_qkv.py"),
    ("unit/select_and_scatter", "unit", "test_select_and_scatter.py"),
    ("unit/resize_nearest", "unit", "test_resize_nearest.py"),
    ("unit/adaptive_avg_pool2d", "unit", "test_adaptive_avg_pool2d.py"),
    ("unit/double_row_matmul", "unit", "test_double_row_matmul.py"),
] + [(f"tutorial/attention_fwd_v{v}", "attn", v) for v in range(1, 12)] + [
    ("tutorial/average_pool2d", "main", (f"{TUT}/average_pool2d/average_pool2d_nki_kernels.py", [])),
    ("tutorial/fused_mamba_v1-v3", "main", (f"{TUT}/fused_mamba/mamba_nki_kernels.py", ["--mode", "accuracy"])),
    ("tutorial/layernorm_v1-v2", "main", (f"{TUT}/layernorm/layernorm_nki_kernel.py", ["--mode", "accuracy"])),
    ("tutorial/rmsnorm", "main", (f"{TUT}/rmsnorm/rmsnorm_nki_kernels.py", [])),
    ("tutorial/rotary", "main", (f"{TUT}/rotary/rotary_nki_kernels.py", [])),
    ("tutorial/sd_attention", "main", (f"{TUT}/sd_attention/sd_attention_nki_kernels.py", ["--mode", "accuracy"])),
    ("tutorial/transpose2d", "main", (f"{TUT}/transpose2d/transpose2d_nki_kernels.py", [])),
    ("tutorial/tensor_addition", "main", (f"{TUT}/tensor_addition/tensor_addition_nki_kernels.py", [])),
    ("tutorial/spmd_tensor_addition", "main", (f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py", [])),
    ("tutorial/spmd_multiple_nc_tensor_addition", "main",
     (f"{TUT}/tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py", [])),
] + [(f"tutorial/matmul_{k}", "ref", f"matmul:{k}") for k in
     ("basic", "tiled", "hoist_load", "block_free_dimension", "fully_optimized")] + [
    ("tutorial/softmax", "main", (f"{TUT}/softmax/softmax_torch.py", [])),
    ("reference/tutorial_add", "ref", "tutorial_add"),
    ("reference/double_row_matmul", "ref", "double_row_matmul"),
] + [(f"contributed/{c}", "contrib", c) for c in ("interpolate_bilinear_fwd", "interpolate_trilinear_fwd", "matmul",
                                                  "maxpooling", "pipelined_attention")]

# the newer layout (6905a68 and later): the tutorials kept (beta-2 matrix multiplication and MX matmul among them)
# and contributed/; the unit tests there import the removed reference kernels and are not listed
KERNELS_NEW = [(f"tutorial/attention_fwd_v{v}", "attn", v) for v in range(1, 12)] + [
    ("tutorial/average_pool2d", "main", (f"{TUT}/average_pool2d/average_pool2d_nki_kernels.py", [])),
    ("tutorial/fused_mamba_v1-v3", "main", (f"{TUT}/fused_mamba/mamba_nki_kernels.py", ["--mode", "accuracy"])),
    ("tutorial/transpose2d", "main", (f"{TUT}/transpose2d/transpose2d_nki_kernels.py", [])),
    ("tutorial/tensor_addition", "main", (f"{TUT}/tensor_addition/tensor_addition_nki_kernels.py", [])),
    ("tutorial/spmd_tensor_addition", "main", (f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py", [])),
    ("tutorial/spmd_multiple_nc_tensor_addition", "main",
     (f"{TUT}/tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py", [])),
] + [(f"tutorial/matmul_{k}", "ref", f"matmul:{k}") for k in
     ("basic", "tiled", "hoist_load", "block_free_dimension", "fully_optimized")] + [
    ("tutorial/mxfp_matmul", "main", (f"{TUT}/mxfp-matmul/mx_toplevel.py", [])),
] + [(f"contributed/{c}", "contrib", c) for c in ("interpolate_bilinear_fwd", "interpolate_trilinear_fwd", "matmul",
                                                  "maxpooling", "pipelined_attention")]

# per kernel, the environment it needs besides the default (MX formats exist on trn3 only)
KERNEL_ENV = {"tutorial/mxfp_matmul": {"NEURON_PLATFORM_TARGET_OVERRIDE": "trn3"}}

# the ``ref`` drivers: Python run in the kernel's process (``np`` imported, the snapshot's src on sys.path);
# each ends with an assertion against a float64 NumPy reference
REFERENCES = {
    "matmul": """
import importlib, sys
sys.path.insert(0, {tut!r} + "/matrix_multiplication")
m = importlib.import_module("matrix_multiplication_nki_kernels")
fn = getattr(m, "nki_matmul_" + {arg!r} + "_")
M, K, N = ({shape})
rng = np.random.default_rng(0)
lhs = rng.random((M, K)).astype(np.float32).astype(ml_dtypes.bfloat16)
rhs = rng.random((K, N)).astype(np.float32).astype(ml_dtypes.bfloat16)
out = fn(np.ascontiguousarray(lhs.T), rhs)
want = lhs.astype(np.float64) @ rhs.astype(np.float64)
# bf16 inputs, fp32 accumulation, bf16 output: within bf16's half-ulp of the result (2^-8 relative)
np.testing.assert_allclose(np.asarray(out, dtype=np.float64), want, rtol=2 ** -7, atol=1e-2)
print("match")
""",
    "tutorial_add": """
from nki_samples.reference.tutorial import add_kernel_nx8x128x512
rng = np.random.default_rng(0)
a = rng.standard_normal((2, 8, 128, 512)).astype(np.float32)
b = rng.standard_normal((2, 8, 128, 512)).astype(np.float32)
out = add_kernel_nx8x128x512[2](a, b, a.size)
np.testing.assert_allclose(np.asarray(out, np.float64), a.astype(np.float64) + b.astype(np.float64), rtol=1e-6)
print("match")
""",
}
REFERENCES["double_row_matmul"] = """
import importlib.util
spec = importlib.util.spec_from_file_location("t_drm", {snap!r} + "/test/unit/test_double_row_matmul.py")
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)        # the test's own helpers (its rhs reshape and column-wise quantisation)
from neuronxcc.nki import baremetal, simulate_kernel
import neuronxcc.nki.language as nl
rng = np.random.default_rng(0)
M, K, N = 512, 16 * 1024, 1024
for TM, TN, TK in ((2, 2, 16), (4, 1, 32), (4, 2, 128)):     # the test's three configurations
    lhs = rng.random((M, K))
    rhs = rng.random((K, N))
    want = lhs @ rhs                                        # float64
    sc, rq = t.column_wise_quantize(rhs)
    out = simulate_kernel(baremetal(t.quantized_double_row_matmul), nl.static_cast(lhs, nl.bfloat16),
                          nl.static_cast(t.reshape(rq), nl.float8_e4m3), nl.static_cast(sc, nl.bfloat16), TM, TN, TK)
    # the test's own tolerance (fp8 e4m3 operands: 3 mantissa bits, scaled per row and column)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=2e-2)
print("match")
"""
CONTRIB_DRIVER = """
import contextlib, io, re, runpy, sys
sys.argv = [{path!r}]
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    ns = runpy.run_path({path!r}, run_name="nki_samples_contrib")      # not __main__: no benchmark
    if "check_correct" in ns:
        ns["check_correct"]()
text = buf.getvalue()
print(text)
if "check_correct" in ns:
    got = re.findall(r"Is close\??:?\s*(True|False)", text)
    assert got and all(g == "True" for g in got), "check_correct printed: " + repr(text[-300:])
print("match")
"""
MATMUL_SHAPES = {"basic": "64, 128, 512", "tiled": "1024, 1024, 1024", "hoist_load": "1024, 1024, 1024",
                 "block_free_dimension": "1024, 1024, 2048", "fully_optimized": "4096, 1024, 2048"}
ATTN_DRIVER = """
import runpy, sys
sys.path.insert(0, {d!r})
sys.argv = ["test_attention.py"]
src = open({d!r} + "/test_attention.py").read()
# the file ends by running v1 at import; keep everything above that line and call the version asked for
body = src[:src.rindex('test_attn_tutorial("accuracy", attn_fwd_v1)')]
ns = {{"__name__": "nki_samples_attention_driver"}}
exec(compile(body, {d!r} + "/test_attention.py", "exec"), ns)
import pytest  # noqa: F401  (the driver calls pytest.xfail in benchmark mode only)
ns["test_attn_tutorial"]("accuracy", ns["attn_fwd_v{v}"])
print("match")
"""


def snapshot_commit(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("NKI_SAMPLES_COMMIT", "unknown")


def repo_commit():
    """``{"commit": full hash (+dirty), "made": ISO date}`` of this checkout (conformance.report.provenance)."""
    from conformance.report import provenance
    return provenance(REPO)


def command_for(kind, spec, snap):
    """(argv, cwd, extra PYTHONPATH entries) for one kernel."""
    tut = os.path.join(snap, TUT)
    py = sys.executable
    if kind == "unit":
        return ([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--simulation-only", spec],
                os.path.join(snap, "test", "unit"), [])
    if kind == "main":
        rel, args = spec
        path = os.path.join(snap, rel)
        return [py, path] + list(args), None, [os.path.dirname(path)]
    if kind == "attn":
        d = os.path.join(tut, "attention_fwd_performance")
        return [py, "-c", ATTN_DRIVER.format(d=d, v=spec)], None, [d]
    if kind == "contrib":
        path = os.path.join(snap, "contributed", spec + ".py")
        return [py, "-c", CONTRIB_DRIVER.format(path=path)], None, [os.path.dirname(path)]
    name, _, arg = spec.partition(":")
    code = "import numpy as np, ml_dtypes\n" + REFERENCES[name].format(tut=tut, arg=arg, snap=snap,
                                                                         shape=MATMUL_SHAPES.get(arg, ""))
    return [py, "-c", code], None, []


def kernels_for(snap):
    """The kernel list of the snapshot's layout: legacy (with ``src/nki_samples/reference``) or newer."""
    return KERNELS if os.path.isdir(os.path.join(snap, "src", "nki_samples", "reference")) else KERNELS_NEW


def last_error(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^(E\s+)?[A-Za-z_.]*(Error|Exception|Failed)\b", ln.strip()) or ln.startswith("E "):
            return ln.strip()[:300]
    return lines[-1][:300] if lines else ""


def run_one(name, kind, spec, snap, timeout):
    argv, cwd, extra = command_for(kind, spec, snap)
    env = dict(os.environ)
    env["TORCHNEURON_TARGET"] = "sim"
    env.update(KERNEL_ENV.get(name, {}))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")          # one BLAS thread per kernel process (see run_nki_library.py)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([REPO, os.path.join(snap, "src")] + extra +
                                        [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory(prefix="trnsim-samples-") as tmp:
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, cwd=cwd or tmp, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"name": name, "kind": kind, "outcome": "timeout", "seconds": round(time.monotonic() - t0, 1),
                    "detail": f"no result in {timeout} s"}
        out = p.stdout + p.stderr
    secs = round(time.monotonic() - t0, 1)
    rec = {"name": name, "kind": kind, "seconds": secs}
    if kind == "unit":
        m = re.search(r"(\d+) passed", out)
        f = re.search(r"(\d+) failed", out)
        e = re.search(r"(\d+) error", out)
        rec["tests_passed"] = int(m.group(1)) if m else 0
        rec["tests_failed"] = (int(f.group(1)) if f else 0) + (int(e.group(1)) if e else 0)
    if p.returncode == 0:
        rec["outcome"] = "match"
    else:
        mism = "AssertionError" in out or "Mismatched elements" in out or "Not equal to tolerance" in out
        rec["outcome"] = "mismatch" if mism else "error"
        rec["detail"] = last_error(out).replace(os.path.abspath(snap), "<snapshot>")
    return rec


def write_report(records, out, snap_commit, elapsed):
    made = repo_commit()
    meta = {"snapshot": "aws-neuron/nki-samples", "snapshot_commit": snap_commit, "commit": made["commit"],
            "made": made["made"], "wall_seconds": round(elapsed, 1)}
    counts = {k: sum(1 for r in records if r["outcome"] == k) for k in ("match", "mismatch", "error", "timeout")}
    with atomic_write(out + ".json") as f:
        f.write(json.dumps({"meta": meta, "counts": counts, "kernels": records}, indent=1) + "\n")
    lines = [f"# nki-samples against trnsim ({snap_commit})", "",
             f"Made at commit {meta['commit']} on {meta['made'][:10]} by `python tools/run_nki_samples.py` "
             f"({meta['wall_seconds']} s).", "",
             f"**{counts['match']} / {len(records)} match**; {counts['mismatch']} mismatch, {counts['error']} error, "
             f"{counts['timeout']} timeout.", "",
             "| kernel | how it runs | outcome | seconds | detail |", "|---|---|---|---|---|"]
    for r in records:
        how = {"unit": "its pytest file (--simulation-only)", "main": "its `__main__` (accuracy)",
               "attn": "test_attn_tutorial('accuracy')", "ref": "float64 NumPy reference (this tool)",
               "contrib": "its check_correct() (or the file's own check)"}[r["kind"]]
        if r["kind"] == "unit":
            how += f": {r.get('tests_passed', 0)} passed, {r.get('tests_failed', 0)} failed"
        lines.append(f"| {r['name']} | {how} | {r['outcome']} | {r['seconds']} | "
                     f"{r.get('detail', '').replace('|', '/')} |")
    with atomic_write(out + ".md") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n  python tools/run_nki_samples.py --snapshot ~/nki-samples\n"
                                        "  python tools/run_nki_samples.py --only tutorial/softmax --out /tmp/s",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshot", default=DEFAULT_SNAPSHOT, help="a checkout of aws-neuron/nki-samples")
    ap.add_argument("--out", default=DEFAULT_OUT, help="report path without extension")
    ap.add_argument("--only", nargs="*", default=None, help="kernel names (or prefixes) to run")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per kernel")
    ap.add_argument("--quick-first", action="store_true", help="run the pytest files after everything else")
    ap.add_argument("--list", action="store_true", help="print the kernel names of the snapshot's layout and exit")
    a = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(a.snapshot, "src", "nki_samples")):
        print(f"run_nki_samples: {a.snapshot} is not an nki-samples checkout (no src/nki_samples); "
              "give --snapshot or NKI_SAMPLES_PATH", file=sys.stderr)
        return 2
    kernels = kernels_for(a.snapshot)
    if a.list:
        print("\n".join(k[0] for k in kernels))
        return 0
    todo = [k for k in kernels if a.only is None or any(k[0].startswith(o) for o in a.only)]
    if a.quick_first:        # the tutorials and reference drivers first, the pytest files (the long ones) last
        todo.sort(key=lambda k: k[1] == "unit")
    if not todo:
        print(f"run_nki_samples: --only {a.only} names no kernel; names: "
              f"{', '.join(k[0] for k in KERNELS)}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    records = []
    for i, (name, kind, spec) in enumerate(todo, 1):
        rec = run_one(name, kind, spec, a.snapshot, a.timeout)
        records.append(rec)
        print(f"[{i}/{len(todo)}] {name}: {rec['outcome']} ({rec['seconds']} s) {rec.get('detail', '')}",
              flush=True)
    write_report(records, a.out, snapshot_commit(a.snapshot), time.monotonic() - t0)
    print(f"report: {a.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
