"""A stand-in for trnsim's simulate call, to measure what nki-library's harness needs without trnsim (issue 31).

With ``TRNSIM_NKILIB_STUB_KERNELS=1`` (the runner's ``--stub-kernels``) the plugin replaces the harness's
``simulation_setup.simulate_kernel`` (the function that calls ``nki.cpu_simulate``) by :func:`simulate_kernel`
here: no kernel is traced or run.  It hands back what a kernel would, with the harness's memory as it is around a
real call:

1. the test's golden (``LazyGoldenGenerator.golden``, which caches it), built first, before any output exists:
   in a real run the harness dumps the kernel's outputs to files and drops them before its validator builds the
   golden (``Orchestrator._run_validation``), and then reads the outputs back for the comparison, so outputs and
   golden temporaries are never alive together; the validator finds the golden cached and does not build it
   again (the golden alive beside the outputs while they are dumped is no more than golden and outputs read back
   beside it in the comparison);
2. one array per output the harness expects (the shapes and dtypes of the golden's ``output_ndarray``
   placeholders), written, so resident as a kernel's outputs are when the call returns, holding the golden's
   values: the harness's dump, validation and comparison run their passing path, as for a kernel that matches.

A test's peak resident size in such a run is the harness's: its inputs, its golden, the outputs it receives, its
dump and comparison.  Its peak with trnsim, less this, is trnsim's share.  The outcome of a stubbed test says
nothing about trnsim: a report of such a run is a memory measurement only.  Multi-rank tests (a per-rank golden)
and goldens that are validators (no arrays) get zero-filled outputs (their validation then fails; their memory is
still the harness's).
"""

from __future__ import annotations

import os

import numpy as np

ENV = "TRNSIM_NKILIB_STUB_KERNELS"


def enabled():
    return os.environ.get(ENV, "") not in ("", "0")


_KERNEL = [None]        # the harness's KernelArgs of the running inference (set around run_simulator_inference)


def _placeholder(g):
    """The array whose shape and dtype an expected output has (a golden array, or a validator's placeholder)."""
    return getattr(g, "output_ndarray", g)


def outputs_for(golden_output, normalize, lazy_cls):
    """The stand-in outputs of one call (see the module docstring): a list in the golden's order."""
    values = None
    if isinstance(golden_output, lazy_cls):
        values = golden_output.golden           # built first and cached for the harness (see the docstring)
    elif isinstance(golden_output, dict):
        values = golden_output
    expected = normalize(golden_output)
    outs = []
    for name, g in expected.items():
        ph = _placeholder(g)
        a = np.empty(np.shape(ph), dtype=ph.dtype)
        v = (values or {}).get(name)
        if isinstance(v, np.ndarray) and v.shape == a.shape:
            np.copyto(a, v, casting="unsafe")
        else:
            a.fill(0)                   # written, so resident (np.zeros' pages would stay untouched)
        outs.append(a)
    return outs


def install(simulation_setup, common_dataclasses):
    """Replace the harness's simulate call (and note each inference's kernel arguments, which carry the golden)."""
    if getattr(simulation_setup.simulate_kernel, "_trnsim_stub", False):
        return
    inner_inference = simulation_setup.run_simulator_inference
    normalize = common_dataclasses.normalize_golden_output
    lazy_cls = common_dataclasses.LazyGoldenGenerator

    def run_simulator_inference(kernel_under_test):
        _KERNEL[0] = kernel_under_test
        try:
            return inner_inference(kernel_under_test)
        finally:
            _KERNEL[0] = None

    def simulate_kernel(kernel_func, kernel_input, lnc_count):
        kut = _KERNEL[0]
        if kut is None or kut.validation_args is None:
            raise RuntimeError("sim_stub: the stand-in simulate call needs the harness's kernel arguments "
                               "(run_simulator_inference was not entered)")
        return outputs_for(kut.validation_args.golden_output, normalize, lazy_cls)

    simulate_kernel._trnsim_stub = True
    simulation_setup.run_simulator_inference = run_simulator_inference
    simulation_setup.simulate_kernel = simulate_kernel
