"""NKI instruction conformance: every ``nisa`` instruction and ``nl`` operation trnsim implements, run over
generated shapes, dtypes and operand placements against float64 NumPy references, plus every documented
hardware rule broken on purpose (``NkiValidationError`` naming the operand must be raised).

Interface (used by ``conformance.runner`` and the report writers):

``run_nki(pattern=None, dtypes=None, progress=None) -> list[dict]``
    ``pattern``: fnmatch pattern on the name (``"nisa.tensor_*"``, ``"nl.exp"``, ``"v1.nl.*"``);
    ``dtypes``: restrict the numerics groups to these dtypes (rule groups, dtype ``"-"``, always run);
    ``progress(done, total, name)``: called after each group.
    One record per name x dtype x mode (``numerics`` | ``rule``), aggregated over that group's cases:
    ``{"suite": "nki", "name", "dtype", "mode", "status", "counts", "samples", "detail", "seconds"}``.
``list_nki_names() -> list[str]``

Tolerances
----------
Inputs are generated exactly representable in their dtype, so the only error is the engine's fp32 arithmetic and
the final rounding into the output dtype.  Every expected value is carried as an *error-bounded value* (``EB``):
the float64 exact result ``v`` and a bound ``e`` on how far a conforming fp32 pipeline may be from it, built
step by step from the rounding of each fp32 operation (see ``EB`` and ``_fn_eval_ulps``), then widened by the
rounding into the output dtype (``_tol_out``).  Nothing is loosened beyond those bounds.

Layout: ``references`` (dtypes, error-bounded float64 references), ``harness`` (running and checking one case, the
registry), one module per instruction family (``nisa_elementwise``, ``nisa_reduce``, ``nisa_select``,
``nisa_matmul``, ``nl_ops``, ``v1_ops``, ``mx`` for the issue-13 instructions), ``rules`` (hardware rules broken on
purpose) and ``run`` (running the groups).  ``python -m conformance.nki_suite [PATTERN]`` runs it from a shell.
"""

from __future__ import annotations

# importing a family module registers its cases; the order is the registration order of the single-file suite
from . import nisa_elementwise, nisa_reduce, nisa_select, nisa_matmul, nl_ops, v1_ops  # noqa: F401
from .run import _record, list_nki_names, run_nki

__all__ = ["run_nki", "list_nki_names", "_record"]
