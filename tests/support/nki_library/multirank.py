"""nki-library's multi-rank (collective) tests in simulation mode: one simulated rank per NeuronCore the test asks
for, joined by trnsim's collectives.

On hardware the harness launches a collective test on ``InferenceArgs.collective_ranks`` NeuronCores of one host,
rank ``r`` with the inputs ``kernel_input.for_rank(r)`` of its ``PerRankLazyInputGenerator`` (or the same input
dict on every rank), and writes rank ``r``'s outputs under ``output_worker_<r>/``, where its ``OutputValidator``
looks for them (rank ``r`` against ``PerRankLazyGoldenGenerator.for_rank(r)``, or rank 0 against a single golden).
The snapshot's simulation path (``test/utils/simulation_setup.run_simulator_inference``, commit d2ad3a5) has no
such branch: it passes the per-rank generator to ``nki.cpu_simulate`` as if it were an input dict (the test fails
with "'PerRankLazyInputGenerator' object has no attribute 'items'"), and a test with one input dict and several
ranks runs as a single rank, whose collectives have no peer.

:func:`install` gives the harness's ``Orchestrator._run_simulator_inference`` that branch, for tests with
``collective_ranks > 1`` only (every other test takes the snapshot's own path unchanged): the ranks run with
``trnsim.kernels.collectives.simulate_ranks`` (``nki.cpu_simulate(kernel)[lnc]`` per rank, on the target the harness
sets in ``NKI_NC_VERSION``), each rank's outputs are converted to its golden's dtypes as the snapshot's simulation
path does, and dumped per rank with the harness's own ``__dump_tensors__``.
"""

from __future__ import annotations

import os

import numpy as np

SUFFIX = ".must_alias_input"          # the harness's marker of in-place inputs (stripped as its simulation path does)


def rank_inputs(kernel_input, nranks):
    """Each rank's keyword arguments: ``for_rank(r)`` of a per-rank generator, else a copy of the one input dict per
    rank (so a kernel writing an input in place on one rank does not change another rank's)."""
    out = []
    for r in range(nranks):
        if hasattr(kernel_input, "for_rank"):
            raw = kernel_input.for_rank(r)
        else:
            raw = {k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
                   for k, v in (kernel_input or {}).items()}
        out.append({k.removesuffix(SUFFIX): v for k, v in raw.items()})
    return out


def as_list(result):
    if result is None:
        return []
    return list(result) if isinstance(result, (list, tuple)) else [result]


def named_outputs(outputs, golden, rank):
    """``{name: array}`` of one rank's outputs, in the golden's order and dtypes (as the snapshot's
    ``run_simulator_inference`` converts a single rank's)."""
    if len(outputs) != len(golden):
        raise RuntimeError(f"rank {rank}: the kernel returned {len(outputs)} outputs but the golden names "
                           f"{len(golden)}: {list(golden)}")
    res = {}
    for (name, g), o in zip(golden.items(), outputs):
        dtype = g.dtype if isinstance(g, np.ndarray) else getattr(getattr(g, "output_ndarray", None), "dtype", None)
        res[name] = np.asarray(o, dtype=dtype) if dtype is not None else np.asarray(o)
    return res


def simulate_all_ranks(kernel_under_test):
    """``[{name: array}, ...]``, one dict per rank, of a test with ``collective_ranks > 1``."""
    import nki
    from test.utils.common_dataclasses import normalize_golden_output, PerRankLazyGoldenGenerator
    from trnsim.kernels.collectives import simulate_ranks

    n = kernel_under_test.inference_args.collective_ranks
    os.environ["NKI_NC_VERSION"] = kernel_under_test.compiler_input.platform_target.get_nc_gen()
    kernel = nki.cpu_simulate(kernel_under_test.kernel_func)[kernel_under_test.compiler_input.logical_nc_config]
    import peak_rss
    inputs = rank_inputs(kernel_under_test.kernel_input, n)
    with peak_rss.around_simulate():
        results = simulate_ranks(kernel, inputs)
    if kernel_under_test.validation_args is None:
        raise ValueError("Simulation mode requires validation_args to verify outputs")
    gold = kernel_under_test.validation_args.golden_output
    per_rank = isinstance(gold, PerRankLazyGoldenGenerator)
    names0 = normalize_golden_output(gold) if not per_rank else None
    return [named_outputs(as_list(res), normalize_golden_output(gold, r) if per_rank else names0, r)
            for r, res in enumerate(results)]


def install(orchestrator_cls, inference_exception):
    """Give ``orchestrator_cls._run_simulator_inference`` the multi-rank branch (once)."""
    single = orchestrator_cls._run_simulator_inference
    if getattr(single, "_trnsim_multirank", False):
        return

    def _run_simulator_inference(self, kernel_under_test):
        args = getattr(kernel_under_test, "inference_args", None)
        if args is None or getattr(args, "collective_ranks", 1) <= 1:
            return single(self, kernel_under_test)
        from test.utils.common_dataclasses import INF_ARTIFACT_DIR_NAME
        try:
            ranks = simulate_all_ranks(kernel_under_test)
            base = os.path.join(self.fs_config.artifacts_output_directory_path, INF_ARTIFACT_DIR_NAME)
            for r, outs in enumerate(ranks):
                self.__dump_tensors__(os.path.join(base, f"output_worker_{r}"), outs, lambda name: name)
            return base
        except Exception as e:          # noqa: BLE001 -- as the snapshot's simulation path reports any failure
            raise inference_exception(str(e)) from e

    _run_simulator_inference._trnsim_multirank = True
    orchestrator_cls._run_simulator_inference = _run_simulator_inference
