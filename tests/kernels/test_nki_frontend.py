"""``nki.compiler.frontend`` (trnsim/kernels/nki/frontend.py): nki-library's trace-only mode traces a kernel with
``ParserFrontend().compile``; trnsim traces by a shape-only launch, so the kernel's own trace-time checks and NKI's
rules fire, nothing is computed, and there is no MLIR to hand out."""

import sys

import numpy as np
import pytest

import trnsim
from trnsim.isa import NkiValidationError

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from nki.compiler.frontend import NKIFrontend, ParserFrontend, TracerFrontend  # noqa: E402


def _copy_checked(out, x, rows, expect_cols):
    # a trace-time check on the input's shape, as nki-library's TensorView tests make with kernel_assert
    if x.shape[1] != expect_cols:
        raise AssertionError(f"size mismatch: {x.shape[1]} columns, expected {expect_cols}")
    t = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[0:rows, :])
    nisa.dma_copy(out[0:rows, :], t)
    return out


def test_the_module_is_the_one_nki_library_imports():
    import nki_cpu_simulator  # noqa: F401  (its aliases: the harness's nki.compiler is this package's)
    fe = sys.modules["nki.compiler.frontend"]
    assert fe is sys.modules["trnsim.kernels.nki.frontend"]
    assert sys.modules["nki_cpu_simulator.nki.compiler.frontend"] is fe
    assert nki.compiler.frontend is fe
    assert issubclass(ParserFrontend, NKIFrontend) and issubclass(TracerFrontend, NKIFrontend)


@pytest.mark.parametrize("wrap", [lambda f: f, nki.jit])
def test_a_kernel_that_traces_returns_its_launch_and_computes_nothing(wrap):
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    out = np.zeros_like(x)
    r = ParserFrontend().compile(wrap(_copy_checked), inputs={"out": out, "x": x, "rows": 128, "expect_cols": 64},
                                 target="trn2", lnc=1, artifacts_dir=None, output_names=["out"])
    assert (r.kernel_name, r.target, r.lnc, r.output_names) == ("_copy_checked", "trn2", 1, ["out"])
    assert r.instructions == 2                  # the two DMAs, issued shape-only
    assert not out.any()                        # a trace computes no value
    with pytest.raises(NotImplementedError, match="builds no MLIR"):
        r.module


def test_the_kernels_own_check_fails_the_trace_with_its_message():
    x = np.zeros((128, 64), np.float32)
    with pytest.raises(AssertionError, match="size mismatch: 64 columns, expected 32"):
        ParserFrontend().compile(_copy_checked, inputs={"out": x.copy(), "x": x, "rows": 128, "expect_cols": 32},
                                 target="trn2")


def test_nki_rules_fail_the_trace():
    x = np.zeros((256, 64), np.float32)        # 256 partitions: above the 128 an SBUF tile has (docs/hardware.md)
    with pytest.raises(NkiValidationError, match="128"):
        TracerFrontend().compile(_copy_checked, inputs={"out": x.copy(), "x": x, "rows": 256, "expect_cols": 64},
                                 target="trn3")


def test_bad_calls_are_named():
    with pytest.raises(TypeError, match="must be a function or an nki.jit kernel, got int"):
        ParserFrontend().compile(3, inputs={})
    with pytest.raises(ValueError, match="lnc must be >= 1, got 0"):
        ParserFrontend().compile(_copy_checked, inputs={}, lnc=0)
