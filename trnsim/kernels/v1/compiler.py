"""``neuronxcc.nki.compiler``: compiler directives legacy kernels import.

trnsim executes kernels directly, so directives that steer the compiler's passes are recognised and have no
effect; explicit allocation requests (``ncc.sbuf.mod_alloc(...)``, ``ncc.psum.mod_alloc(base_bank=...)``,
``alloc(func)``) name the memory and the physical tiles: the front end (``language._direct_placement``) turns them
into placements that the capacity check bounds- and overlap-checks (machine/capacity.py) instead of counting the
tensor's logical size.
"""

from __future__ import annotations

import functools

from ...memory import PSUM, SBUF

__all__ = ["skip_middle_end_transformations", "enable_stack_allocator", "force_auto_alloc", "no_reorder", "sbuf",
           "psum", "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine"]


def _directive(name):
    def deco(func=None, **kwargs):
        if func is None:
            return lambda f: deco(f, **kwargs)

        if hasattr(type(func), "__getitem__"):
            # a kernel object (``@directive`` above ``@nki.baremetal(...)``): kept as it is, so that ``k[grid]``
            # still launches it
            try:
                func._trnsim_directives = getattr(func, "_trnsim_directives", ()) + (name,)
            except AttributeError:
                pass
            return func

        @functools.wraps(func)
        def wrapper(*a, **k):
            return func(*a, **k)
        wrapper._trnsim_directives = getattr(func, "_trnsim_directives", ()) + (name,)
        return wrapper
    deco.__name__ = name
    return deco


skip_middle_end_transformations = _directive("skip_middle_end_transformations")
enable_stack_allocator = _directive("enable_stack_allocator")
force_auto_alloc = _directive("force_auto_alloc")


class no_reorder:
    """``nki.compiler.no_reorder()``: a loop directive (``nl.sequential_range(n, directives=no_reorder())``) asking
    the scheduler to keep the loop body's instructions in program order.  trnsim runs and times instructions in
    program order already, and its capacity check tries program order first; only when that overflows does the
    check try a reordering, which does not look at this directive (recognised, as the other loop hints are,
    ``loops._range``)."""

    def __repr__(self):
        return "no_reorder()"


class _Allocation:
    """An allocation request for a memory; usable wherever ``buffer=`` is."""

    def __init__(self, kind, how, **params):
        self._trnsim_kind = kind
        self.how = how
        self.params = params

    def __repr__(self):
        return f"ncc.{self._trnsim_kind}.{self.how}({self.params})"


class _Memory:
    def __init__(self, kind):
        self._trnsim_kind = kind

    def alloc(self, func=None, **kw):
        return _Allocation(self._trnsim_kind, "alloc", func=func, **kw)

    def mod_alloc(self, *, base_addr=None, base_partition=0, num_par_tiles=(), num_free_tiles=(), base_bank=0,
                  num_bank_tiles=(), **kw):
        return _Allocation(self._trnsim_kind, "mod_alloc", base_addr=base_addr, base_partition=base_partition,
                           num_par_tiles=num_par_tiles, num_free_tiles=num_free_tiles, base_bank=base_bank,
                           num_bank_tiles=num_bank_tiles)

    def auto_alloc(self, **kw):
        return _Allocation(self._trnsim_kind, "auto_alloc")


sbuf = _Memory(SBUF)
psum = _Memory(PSUM)
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = "tensor", "vector", "scalar", "gpsimd"
