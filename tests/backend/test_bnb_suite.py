"""bitsandbytes' own test suite on the neuron device (issue 28): its module, int8 and 4-bit layer tests, run from a
source snapshot with ``TORCHNEURON_TARGET=sim BNB_TEST_DEVICE=neuron`` and no edits, pass as they do on the CPU
(``torch_compile`` cases included: inductor on neuron tensors compiles with the neuron backend).

Needs the snapshot (``$TRNSIM_BNB_SRC``, a checkout of bitsandbytes at commit 95f9af3) and the bitsandbytes package
built with its CPU library installed in this environment; skipped without them, and marked slow (minutes).

Left out, with the reason: ``test_linear_no_igemmlt``.  bitsandbytes' conftest runs each test a second time without
re-seeding (its ``pytest_runtest_call`` calls ``item.runtest()`` and pytest's own hook runs it again).  bitsandbytes
picks its int8 algorithm by device: the CPU takes ``MatMul8bitFp`` (dequantise, then a float matmul), every other
device ``MatMul8bitLt`` (int8 matmul with outlier columns).  On the second run's data the int8 algorithm leaves 12
of 9,216 outputs outside the test's atol 0.02, over its 2.5e-4 budget (2.3): the CPU gives the same 12, bit for bit,
when made to take that algorithm (``Linear8bitLt.eval()``), so the device computes it as the CPU does."""

import importlib.util
import os
import subprocess
import sys

import pytest

SRC = os.environ.get("TRNSIM_BNB_SRC", "")


def _have_bnb():
    if not os.path.isfile(os.path.join(SRC, "tests", "test_modules.py")):
        return False
    try:
        return importlib.util.find_spec("bitsandbytes") is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _have_bnb(), reason=f"no bitsandbytes snapshot at {SRC} or bitsandbytes not installed")
@pytest.mark.parametrize("path,deselect", [
    ("tests/test_modules.py", None),
    ("tests/test_linear8bitlt.py", "not no_igemmlt"),
    ("tests/test_linear4bit.py", None),
])
def test_bitsandbytes_suite_passes_on_neuron(tmp_path, path, deselect):
    env = dict(os.environ, TORCHNEURON_TARGET="sim", BNB_TEST_DEVICE="neuron")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "log_cli=false",
           "-o", f"log_file={tmp_path / 'bnb.log'}", path]
    if deselect:
        cmd += ["-k", deselect]
    r = subprocess.run(cmd, cwd=SRC, env=env, capture_output=True, text=True, timeout=3600)
    tail = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " failed" not in r.stdout, tail
