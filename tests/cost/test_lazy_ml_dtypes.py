"""A shape-only estimate does not import ml_dtypes (issue 30: its import is about 0.8 s of a cold estimate's CPU
time, benchmarks/speed-estim11.md) and gets the same simulated times as before: the shape-only kernel inputs are
``ShapeOnlyInput``s (a shape and a trnsim dtype) instead of empty NumPy arrays of ml_dtypes' dtypes, and the
bfloat16/fp8 DTypes resolve their NumPy dtype and limits from ml_dtypes at first use."""

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from trnsim.backend import costs
from trnsim.kernels.jit import ShapeOnlyInput, run_kernel
from trnsim.kernels.library import attention, elementwise, matmul_batched, normalization
from trnsim.memory import DTYPES, dtype_of, round_to
from trnsim.targets import TRN2

_ML = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")

# a tiny decoder run eagerly and compiled through the estimator's layer and head runs, then the modules that are
# loaded; the caches point at a fresh folder so that every kernel is simulated in this process
_PROBE = r"""
import json, sys
import torch
import trnsim
from trnsim import backend
from trnsim.cost import step
from trnsim.cost.models import ModelSpec
backend.register()
spec = ModelSpec(name="tiny-lazy", hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1024)
costs = []
for compiled in (False, True):
    kw = dict(tp=1, micro_batch=1, seq=128, dtype=torch.bfloat16, target="trn2", compiled=compiled)
    costs.append(step.layer_cost(spec, "dense", **kw).fwd_ns)
    costs.append(step.head_cost(spec, **kw).fwd_ns)
print(json.dumps({"costs": costs, "ml_dtypes": "ml_dtypes" in sys.modules,
                  "v1": "trnsim.kernels.v1" in sys.modules}))
"""


def test_a_shape_only_eager_and_compiled_layer_run_does_not_import_ml_dtypes(tmp_path):
    env = dict(os.environ, TRNSIM_CACHE_DIR=str(tmp_path / "costs"),
               TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "neff"), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(c > 0 for c in r["costs"])           # the runs simulated their kernels
    assert r["ml_dtypes"] is False
    assert r["v1"] is False                          # the legacy front end (which needs ml_dtypes) neither


def test_importing_trnsim_memory_does_not_import_ml_dtypes_and_the_first_dtype_use_does():
    code = ("import sys; from trnsim.memory import DTYPES; d = DTYPES['bfloat16']; "
            "a = (d.itemsize, d.is_float, 'ml_dtypes' in sys.modules); n = d.np; "
            "print(a, n, 'ml_dtypes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "(2, True, False) bfloat16 True"


@pytest.mark.parametrize("name", _ML)
def test_the_lazy_formats_are_what_ml_dtypes_says(name):
    dt = DTYPES[name]
    ref = np.dtype(getattr(ml_dtypes, name))
    assert dt.np == ref
    assert dt.itemsize == ref.itemsize
    fi = ml_dtypes.finfo(ref)
    assert (dt.min, dt.max) == (float(fi.min), float(fi.max))
    assert dt.is_float and not dt.is_int and not dt.is_bool and dt.storage == np.float32
    assert dtype_of(ref) is dt and dtype_of(getattr(ml_dtypes, name)) is dt
    # written to an integer dtype, an array of the format is its float values (rounded, saturated), not raw bits
    x = np.array([1.5, -3.0, 2.5, 400.0], dtype=np.float32).astype(ref)
    np.testing.assert_array_equal(round_to(DTYPES["int8"], x), round_to(DTYPES["int8"], x.astype(np.float32)))
    assert round_to(DTYPES["int8"], x).dtype == np.int8


def test_float16_limits_come_from_numpy():
    fi = np.finfo(np.float16)
    assert (DTYPES["float16"].min, DTYPES["float16"].max) == (float(fi.min), float(fi.max))


def _ns(fn, args, kwargs):
    res = run_kernel(fn, args, kwargs, target=TRN2, execute=False)
    flops = sum(f for c in res.cores for f in c.columns.flops)
    nbytes = sum(b for c in res.cores for b in c.columns.nbytes)
    return costs.kernel_duration_ns(res), flops, nbytes, len(res.cores[0].instructions)


@pytest.mark.parametrize("fn, shapes, dtype, kw", [
    (elementwise.binary, [(128, 3000), (128, 3000)], "bfloat16", {"op": "add"}),
    (elementwise.copy, [(64, 700)], "float8_e4m3", {}),
    (matmul_batched.batched_matmul, [(2, 128, 128), (2, 128, 256)], "bfloat16", {"group": 1}),
    (attention.flash_attention, [(2, 64, 256), (2, 64, 256), (2, 256, 64)], "bfloat16",
     {"group": 1, "dropout_p": 0.0}),
    (normalization.rms_norm, [(128, 512), (128, 512)], "bfloat16", {}),
])
def test_a_shape_only_input_simulates_exactly_as_an_empty_array_of_its_dtype(fn, shapes, dtype, kw):
    # the reference: the inputs as the shape-only launches took them before, empty NumPy arrays of ml_dtypes' dtype
    arrays = [np.empty(s, dtype=getattr(ml_dtypes, dtype)) for s in shapes]
    specs = [ShapeOnlyInput(s, dtype) for s in shapes]
    assert _ns(fn, specs, kw) == _ns(fn, arrays, kw)


def test_a_shape_only_input_is_refused_by_a_launch_that_computes_values_and_checked():
    with pytest.raises(ValueError, match="argument 'x' is a ShapeOnlyInput.*execute=False"):
        run_kernel(elementwise.copy, [ShapeOnlyInput((4, 4), "float32")], {}, target=TRN2, execute=True)
    with pytest.raises(ValueError, match=r"negative dimension"):
        ShapeOnlyInput((4, -1), "float32")
    with pytest.raises(TypeError, match="unknown dtype 'bf17'"):
        ShapeOnlyInput((4, 4), "bf17")


def test_the_launch_memo_keys_shape_only_inputs_by_shape_and_dtype():
    k = costs._sim_key(elementwise.copy, (ShapeOnlyInput((4, 8), "bfloat16"),), {}, TRN2)
    assert k == costs._sim_key(elementwise.copy, (ShapeOnlyInput((4, 8), "bf16"),), {}, TRN2)
    assert k != costs._sim_key(elementwise.copy, (ShapeOnlyInput((4, 8), "float16"),), {}, TRN2)
    assert k != costs._sim_key(elementwise.copy, (ShapeOnlyInput((8, 4), "bfloat16"),), {}, TRN2)


def test_nki_compiler_is_still_an_attribute_of_the_nki_package():
    from trnsim.kernels import nki
    from trnsim.kernels.v1 import compiler as v1_compiler
    assert nki.compiler.__all__ == v1_compiler.__all__
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        nki.no_such_name
