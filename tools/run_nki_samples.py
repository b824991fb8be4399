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
wrapper file), shape-only and full, on trn1 and trn2 (``PROFILE_ONLY_ON``: a kernel built on a later target's
feature on that target only), and reports per kernel whether each run finished without a refusal, with the
simulated time.

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
CONTRIB_DRIVER = r"""
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


# --profile: (report row, file relative to the snapshot, kernel names in it, inputs, grid).  ``inputs`` is Python
# evaluated in the wrapper with ``rng`` (a seeded Generator), ``np``, ``nl`` (neuronxcc.nki.language) and ``bf16``
# (ml_dtypes.bfloat16) in scope, giving the kernel's positional arguments, or (args, kwargs); the shapes are those of
# the kernel's own test or driver, smaller where the kernel allows it (the profile shows the same instruction mix)
_RF = "src/nki_samples/reference"
_ATTN = f"{TUT}/attention_fwd_performance/attention_kernels.py"
_QKV = "tuple(rng.random((128, {n})).astype(np.float32) for _ in range(3))"
PROFILES = [(f"tutorial/attention_fwd_v{v}", _ATTN, [f"attn_fwd_v{v}"], _QKV.format(n=128 if v <= 2 else 4096), None)
            for v in range(1, 12)] + [
    ("tutorial/average_pool2d", f"{TUT}/average_pool2d/average_pool2d_nki_kernels.py", ["tensor_avgpool_kernel"],
     "(rng.random((128, 64, 64)).astype(np.float16), 2)", None),
    ("tutorial/fused_mamba_v1-v3", f"{TUT}/fused_mamba/mamba_nki_kernels.py", ["mamba_v1", "mamba_v2", "mamba_v3"],
     "(rng.random((1, 256, 512)).astype(np.float32), rng.random((1, 256, 512)).astype(np.float32), "
     "-rng.random((256, 16)).astype(np.float32), rng.random((1, 16, 512)).astype(np.float32), "
     "rng.random((1, 16, 512)).astype(np.float32))", None),
    ("tutorial/layernorm_v1-v2", f"{TUT}/layernorm/layernorm_nki_kernel.py",
     ["nki_layernorm_kernel_v1", "nki_layernorm_kernel_v2"],
     "(rng.random((512, 1024)).astype(np.float32), 1e-5, rng.random(1024).astype(np.float32), "
     "rng.random(1024).astype(np.float32))", None),
    ("tutorial/rmsnorm", f"{TUT}/rmsnorm/rmsnorm_nki_kernels.py", ["nki_rmsnorm_kernel"],
     "(rng.random((128, 512)).astype(np.float32), rng.random(512).astype(np.float32))", None),
    ("tutorial/rotary", f"{TUT}/rotary/rotary_nki_kernels.py", ["nki_apply_rotary_embedding"],
     "tuple(rng.random((1, 2, 256, 128)).astype(np.float32) for _ in range(2)) + "
     "tuple(rng.random((1, 256, 128)).astype(np.float32) for _ in range(2))", "1x2"),
    ("tutorial/sd_attention", f"{TUT}/sd_attention/sd_attention_nki_kernels.py",
     ["fused_self_attn_for_SD_small_head_size"], "tuple(rng.random((4096, 64)).astype(np.float32) for _ in range(3))",
     None),
    ("tutorial/transpose2d", f"{TUT}/transpose2d/transpose2d_nki_kernels.py", ["tensor_transpose2D_kernel_"],
     "(rng.integers(0, 100, (128, 12 * 64)).astype(np.int8), (12, 64))", None),
    ("tutorial/tensor_addition", f"{TUT}/tensor_addition/tensor_addition_nki_kernels.py", ["nki_tensor_add_kernel_"],
     "(rng.random((256, 1024)).astype(np.float16), rng.random((256, 1024)).astype(np.float16))", "2x2"),
    ("tutorial/spmd_tensor_addition", f"{TUT}/tensor_addition/spmd_tensor_addition_nki_kernels.py",
     ["nki_tensor_add_kernel_"],
     "(rng.random((256, 1024)).astype(np.float16), rng.random((256, 1024)).astype(np.float16))", "2x2"),
    ("tutorial/spmd_multiple_nc_tensor_addition", f"{TUT}/tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
     ["nki_tensor_add_kernel_"],
     "(rng.random((512, 2048)).astype(np.float16), rng.random((512, 2048)).astype(np.float16))", "4x4"),
    ("tutorial/matmul_basic", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py", ["nki_matmul_basic_"],
     "(rng.random((128, 64)).astype(bf16), rng.random((128, 512)).astype(bf16))", None),
] + [(f"tutorial/matmul_{k}", f"{TUT}/matrix_multiplication/matrix_multiplication_nki_kernels.py", [f"nki_matmul_{k}_"],
      "(rng.random(({K}, {M})).astype(bf16), rng.random(({K}, {N})).astype(bf16))".format(
          **dict(zip("MKN", (int(x) for x in MATMUL_SHAPES[k].split(","))))), None)
     for k in ("tiled", "hoist_load", "block_free_dimension", "fully_optimized")] + [
    ("tutorial/softmax", f"{TUT}/softmax/softmax_nki_kernels.py", ["nki_softmax_kernel"],
     "(rng.random((128, 1024)).astype(np.float32),)", None),
    ("reference/tutorial_add", f"{_RF}/tutorial.py", ["add_kernel_nx8x128x512"],
     "(rng.random((2, 8, 128, 512)).astype(np.float32), rng.random((2, 8, 128, 512)).astype(np.float32), "
     "2 * 8 * 128 * 512)", "2"),
    ("unit/flash_attn_fwd", f"{_RF}/attention.py", ["flash_fwd"],
     "((rng.random((1, 1, 128, 2048)) - 0.5).astype(bf16), (rng.random((1, 1, 128, 2048)) - 0.5).astype(bf16), "
     "(rng.random((1, 1, 2048, 128)) - 0.5).astype(bf16), None), dict(use_causal_mask=True, mixed_precision=True)",
     "1x1"),
    ("unit/flash_attn_bwd", f"{_RF}/attention.py", ["flash_attn_bwd"],
     "tuple((rng.random((1, 1, 128, 2048)) - 0.5).astype(bf16) for _ in range(5)) + "
     "(rng.random((1, 1, 128, 16)).astype(np.float32), None), dict(use_causal_mask=True, mixed_precision=True)",
     "1x1"),
    ("unit/SD_attention_small_head", f"{_RF}/attention.py", ["fused_self_attn_for_SD_small_head_size"],
     "(rng.random((1, 128, 4096)).astype(np.float32), rng.random((1, 4096, 128)).astype(np.float32), "
     "rng.random((1, 4096, 128)).astype(np.float32))", None),
    ("unit/allocated_SD_attention_small_head", f"{_RF}/allocated_attention.py",
     ["allocated_fused_self_attn_for_SD_small_head_size"],
     "(rng.random((1, 128, 4096)).astype(np.float32), rng.random((1, 128, 4096)).astype(np.float32), "
     "rng.random((1, 4096, 128)).astype(np.float32))", None),
    ("unit/rmsnorm_qkv", f"{_RF}/allocated_fused_linear.py", ["allocated_fused_rms_norm_qkv"],
     "(rng.random((1, 128, 1024)).astype(bf16), rng.random((1024, 512)).astype(bf16))", None),     # 2-byte, as its
    # addresses assume (its test runs fp16 and bf16)
    ("unit/select_and_scatter", f"{_RF}/vision.py", ["select_and_scatter_kernel"],
     "(rng.random((8, 64, 112, 112)).astype(np.float32), rng.random((8, 64, 56, 56)).astype(np.float32))", None),
    ("unit/resize_nearest", f"{_RF}/vision.py", ["resize_nearest_fixed_dma_kernel"],
     "(rng.random((1, 30, 20, 1280)).astype(np.float32), (1, 59, 38, 1280))", "1"),
    ("unit/adaptive_avg_pool2d", f"{_RF}/vision.py", ["adaptive_avg_pool2d_kernel"],
     "(rng.standard_normal((3, 96, 24, 24)).astype(bf16), (6, 6))", None),
    ("reference/double_row_matmul", f"{_RF}/double_row_matmul.py", ["quantized_double_row_matmul"],
     "(rng.random((512, 16384)).astype(bf16), rng.random((8192, 2048)).astype(ml_dtypes.float8_e4m3), "
     "rng.random((128, 1024)).astype(bf16), 2, 2, 16)", None),
    ("contributed/interpolate_bilinear_fwd", "contributed/interpolate_bilinear_fwd.py", ["interpolate_bilinear_2x_fwd"],
     "(rng.random((2, 64, 128, 128)).astype(np.float32),)", None),
    ("contributed/interpolate_trilinear_fwd", "contributed/interpolate_trilinear_fwd.py",
     ["interpolate_trilinear_2x_fwd"], "(rng.random((2, 64, 23, 23, 23)).astype(np.float32),)", None),
    ("contributed/matmul", "contributed/matmul.py", ["matmul"],
     "(rng.random((1024, 2048)).astype(np.float16), rng.random((1024, 2048)).astype(np.float16))", None),
    ("contributed/maxpooling", "contributed/maxpooling.py", ["max_pooling_2d_stride_1"],
     "(rng.random((448, 448)).astype(np.float32), 3)", None),
]
PROFILE_TARGETS = ("trn1", "trn2")
# kernels built on a feature of later targets only, profiled on those: double_row_matmul's nc_matmul
# perf_mode="double_row" exists from trn2 on (its own test returns early unless the host is a trn2)
PROFILE_ONLY_ON = {"reference/double_row_matmul": ("trn2",)}
PROFILE_WRAPPER = """
import sys, runpy
import numpy as np, ml_dtypes
sys.path.insert(0, {d!r})
bf16 = ml_dtypes.bfloat16
import neuronxcc.nki.language as nl
_ns = runpy.run_path({path!r}, run_name="nki_samples_profiled")
kernel = _ns[{sym!r}]
if not hasattr(kernel, "fn") and hasattr(kernel, "__wrapped__"):
    kernel = kernel.__wrapped__
def make_inputs():
    rng = np.random.default_rng(0)
    return {inputs}
"""


PROFILE_DRIVER = """
import contextlib, io, json, sys, traceback
from trnsim.cli import main
for sym, tg, shape_only in {runs!r}:
    buf = io.StringIO()
    argv = ["profile", {wrap!r} + "::" + sym, "--inputs", "make_inputs", "--target", tg, "--no-plot",
            "--no-progress", "--out", {out!r}] + (["--grid", {grid!r}] if {grid!r} else []) + \
        (["--shape-only"] if shape_only else [])
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = main(argv)
    except BaseException:
        rc = 1
        buf.write(traceback.format_exc())
    print("@@RUN " + json.dumps([sym, tg, shape_only, rc or 0, buf.getvalue()[-4000:]]), flush=True)
"""


def profile_one(name, rel, syms, inputs, grid, snap, timeout):
    """``trnsim profile`` of each kernel of a row, shape-only and full, on PROFILE_TARGETS (all in one process, through
    ``trnsim.cli.main``, as the command line runs it): a record with, per run, ``ok`` and the simulated time (or the
    error's last line)."""
    path = os.path.join(snap, rel)
    rec = {"name": name, "runs": {}}
    if not os.path.isfile(path):
        rec["missing"] = True
        return rec
    env = dict(os.environ)
    env["TORCHNEURON_TARGET"] = "sim"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([REPO, os.path.join(snap, "src")] + [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory(prefix="trnsim-samples-prof-") as tmp:
        wraps = {}
        for i, sym in enumerate(syms):
            wraps[sym] = os.path.join(tmp, f"wrap{i}.py")
            with open(wraps[sym], "w") as f:
                f.write(PROFILE_WRAPPER.format(d=os.path.dirname(path), path=path, sym=sym, inputs=inputs))
        for sym in syms:
            runs = [("kernel", tg, so) for tg in PROFILE_ONLY_ON.get(name, PROFILE_TARGETS) for so in (True, False)]
            code = PROFILE_DRIVER.format(runs=runs, wrap=wraps[sym], out=os.path.join(tmp, "out"), grid=grid or "")
            t0 = time.monotonic()
            try:
                p = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, capture_output=True, text=True,
                                   timeout=timeout)
                lines = [json.loads(ln[6:]) for ln in p.stdout.splitlines() if ln.startswith("@@RUN ")]
                tail = p.stdout + p.stderr
            except subprocess.TimeoutExpired:
                lines, tail = [], f"no result in {timeout} s"
            done = {(tg, so): (rc, out) for _, tg, so, rc, out in lines}
            for _, tg, so in runs:
                key = f"{sym}:{tg}:{'shape-only' if so else 'full'}"
                rc, out = done.get((tg, so), (1, tail))
                r = {"ok": rc == 0}
                m = re.search(r"total[^\n]*?([0-9][0-9.,]*)\s*(us|µs|ms|s)\b", out)
                if rc == 0 and m:
                    r["simulated"] = m.group(1) + " " + m.group(2)
                if rc != 0:
                    r["detail"] = last_error(out).replace(os.path.abspath(snap), "<snapshot>")
                rec["runs"][key] = r
                print(f"  {name} {key}: {'ok' if rc == 0 else 'FAILED'} {r.get('simulated', r.get('detail', ''))}",
                      flush=True)
            rec.setdefault("seconds", 0.0)
            rec["seconds"] = round(rec["seconds"] + time.monotonic() - t0, 1)
    return rec


def write_profile_report(records, out, snap_commit, elapsed):
    made = repo_commit()
    meta = {"snapshot": "aws-neuron/nki-samples", "snapshot_commit": snap_commit, "commit": made["commit"],
            "made": made["made"], "wall_seconds": round(elapsed, 1), "targets": list(PROFILE_TARGETS)}
    rows = [r for r in records if not r.get("missing")]
    ok = sum(1 for r in rows if r["runs"] and all(v["ok"] for v in r["runs"].values()))
    with atomic_write(out + ".json") as f:
        f.write(json.dumps({"meta": meta, "profiled": ok, "kernels": records}, indent=1) + "\n")
    lines = [f"# nki-samples profiles with trnsim ({snap_commit})", "",
             f"Made at commit {meta['commit']} on {meta['made'][:10]} by `python tools/run_nki_samples.py --profile` "
             f"({meta['wall_seconds']} s).", "",
             f"**{ok} / {len(rows)} kernels profile without a refusal** (`trnsim profile`, shape-only and full, on "
             f"{' and '.join(PROFILE_TARGETS)}; " + "; ".join(f"{k} on {', '.join(v)} only (a feature of those "
                                                             "targets)" for k, v in PROFILE_ONLY_ON.items()) + ").",
             "",
             "| kernel | runs | simulated time (first kernel; trn1 / trn2, full) | failures |", "|---|---|---|---|"]
    for r in rows:
        runs = r["runs"]
        good = sum(1 for v in runs.values() if v["ok"])
        first = next(iter(runs)).split(":")[0] if runs else ""
        sim = " / ".join(runs.get(f"{first}:{tg}:full", {}).get("simulated", "-" if tg in
                                                                  PROFILE_ONLY_ON.get(r["name"], PROFILE_TARGETS)
                                                                  else f"({tg}: not profiled)")
                         for tg in PROFILE_TARGETS)
        bad = "; ".join(f"{k}: {v.get('detail', '')}" for k, v in runs.items() if not v["ok"])
        lines.append(f"| {r['name']} | {good} / {len(runs)} ok | {sim} | {bad.replace('|', '/')[:400]} |")
    with atomic_write(out + ".md") as f:
        f.write("\n".join(lines) + "\n")


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


def unit_counts(out):
    """``tests_passed`` / ``tests_failed`` of a ``pytest -q`` output: its summary line, or, for a process killed
    before it printed one, its progress characters (``.`` passed, ``F``/``E`` failed)."""
    m = re.search(r"(\d+) passed", out)
    f = re.search(r"(\d+) failed", out)
    e = re.search(r"(\d+) error", out)
    if m or f or e:
        return {"tests_passed": int(m.group(1)) if m else 0,
                "tests_failed": (int(f.group(1)) if f else 0) + (int(e.group(1)) if e else 0)}
    prog = "".join(re.sub(r"\s*\[\s*\d+%\]$", "", ln.strip()) for ln in out.splitlines()
                   if re.fullmatch(r"[.FEsxX]+(\s*\[\s*\d+%\])?", ln.strip()))
    return {"tests_passed": prog.count("."), "tests_failed": prog.count("F") + prog.count("E")}


def _tree_rss(pid):
    """Resident bytes of process ``pid`` and its descendants (Linux /proc; 0 where it cannot be read)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            with open(f"/proc/{p}/status") as f:
                for ln in f:
                    if ln.startswith("VmRSS:"):
                        total += int(ln.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def run_capped(argv, cwd, env, timeout, mem_cap):
    """Run ``argv``; ``(returncode, output, peak resident bytes, why)`` where ``why`` is None, "timeout" or
    "memory" (its process tree was killed on passing ``mem_cap`` bytes resident, polled every half second)."""
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        t0, peak, why = time.monotonic(), 0, None
        while p.poll() is None:
            rss = _tree_rss(p.pid)
            peak = max(peak, rss)
            if mem_cap and rss > mem_cap:
                why = "memory"
            elif time.monotonic() - t0 > timeout:
                why = "timeout"
            if why:
                os.killpg(p.pid, 9)          # the kernel's own session: its process and any it started
                p.wait()
                break
            time.sleep(0.5)
        out.seek(0)
        return p.returncode, out.read(), peak, why


def run_one(name, kind, spec, snap, timeout, mem_cap=0):
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
        rc, out, peak, why = run_capped(argv, cwd or tmp, env, timeout, mem_cap)
    secs = round(time.monotonic() - t0, 1)
    rec = {"name": name, "kind": kind, "seconds": secs, "peak_rss_gb": round(peak / 2 ** 30, 2)}
    if kind == "unit":
        rec.update(unit_counts(out))
    if why == "timeout":
        rec.update(outcome="timeout", detail=f"no result in {timeout} s")
        return rec
    if why == "memory":
        rec.update(outcome="error", detail=f"killed at {peak / 2 ** 30:.1f} GB resident, above the runner's cap of "
                                           f"{mem_cap / 2 ** 30:.1f} GB (--mem-cap); last output: "
                                           f"{last_error(out).replace(os.path.abspath(snap), '<snapshot>')}")
        return rec
    if rc == 0:
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
             "| kernel | how it runs | outcome | seconds | peak GB | detail |", "|---|---|---|---|---|---|"]
    for r in records:
        how = {"unit": "its pytest file (--simulation-only)", "main": "its `__main__` (accuracy)",
               "attn": "test_attn_tutorial('accuracy')", "ref": "float64 NumPy reference (this tool)",
               "contrib": "its check_correct() (or the file's own check)"}[r["kind"]]
        if r["kind"] == "unit":
            how += f": {r.get('tests_passed', 0)} passed, {r.get('tests_failed', 0)} failed"
        lines.append(f"| {r['name']} | {how} | {r['outcome']} | {r['seconds']} | {r.get('peak_rss_gb', '-')} | "
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
    ap.add_argument("--mem-cap", type=float, default=6.0,
                    help="GB resident per kernel (its process tree), killed above it (0: no cap); default 6, the "
                         "committed reports' figure: a share of a 24 GB machine others use too (every kernel but "
                         "flash_attn_bwd's seqlen-8192 tests stays under 3.1 GB)")
    ap.add_argument("--quick-first", action="store_true", help="run the pytest files after everything else")
    ap.add_argument("--list", action="store_true", help="print the kernel names of the snapshot's layout and exit")
    ap.add_argument("--profile", action="store_true",
                    help="run `trnsim profile` (shape-only and full, trn1 and trn2) on each kernel instead; the report "
                         "goes to <out>-profiles.{md,json}")
    a = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(a.snapshot, "src", "nki_samples")):
        print(f"run_nki_samples: {a.snapshot} is not an nki-samples checkout (no src/nki_samples); "
              "give --snapshot or NKI_SAMPLES_PATH", file=sys.stderr)
        return 2
    kernels = kernels_for(a.snapshot)
    if a.profile:
        rows = [p for p in PROFILES if a.only is None or any(p[0].startswith(o) for o in a.only)]
        if not rows:
            print(f"run_nki_samples: --only {a.only} names no profiled kernel", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        recs = [profile_one(*row, a.snapshot, a.timeout) for row in rows]
        write_profile_report(recs, a.out + "-profiles", snapshot_commit(a.snapshot), time.monotonic() - t0)
        print(f"report: {a.out}-profiles.md")
        return 0
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
        rec = run_one(name, kind, spec, a.snapshot, a.timeout, int(a.mem_cap * 2 ** 30))
        records.append(rec)
        print(f"[{i}/{len(todo)}] {name}: {rec['outcome']} ({rec['seconds']} s) {rec.get('detail', '')}",
              flush=True)
    write_report(records, a.out, snapshot_commit(a.snapshot), time.monotonic() - t0)
    print(f"report: {a.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
