"""``njit`` for the scheduler's loop (``sched_events``, ``sched_state`` and their helpers): numba's, or, when numba cannot be
imported, a decorator that leaves each function plain Python (with ``py_func`` pointing at itself), so the one
loop still runs, slowly, and gives the same timelines.  numba is a dependency of trnsim (pyproject.toml); this
only keeps a broken install usable.

``borrow``: compiled code passes each array to a helper (inlined or not) with an atomic reference-count increment
and decrement of the array's memory (numba's NRT), which the compiler removes only in simple control flow: in the
loop's rows, with dozens of arrays handed to the rules of ``sched_rules``, that was most of the loop's time.  An
array made by ``borrow`` refers to the same memory without a reference count (no NRT meminfo), so handing it on
costs nothing.  Only for arrays that something else keeps alive for the whole call (the function's arguments, or a
tuple argument's items) and that are never returned or stored; uncompiled, ``borrow`` returns its argument."""

from __future__ import annotations

__all__ = ["njit", "HAVE_NUMBA", "borrow"]

try:
    from numba import njit
    HAVE_NUMBA = True
except ImportError:          # pragma: no cover (exercised in a subprocess by tests/machine/test_sched_fast.py)
    HAVE_NUMBA = False

    def njit(*args, **kwargs):
        def deco(fn):
            fn.py_func = fn
            return fn
        if args and callable(args[0]):
            return deco(args[0])
        return deco


def borrow(a):
    """``a`` (an array, or a tuple of arrays and numbers): compiled, the same arrays without reference counts (see
    the module docstring); uncompiled, ``a`` itself."""
    return a


if HAVE_NUMBA:
    from numba.core import cgutils, types
    from numba.extending import intrinsic, overload

    def _borrowable(ty):
        if isinstance(ty, types.BaseTuple):
            return all(_borrowable(t) for t in ty)
        return isinstance(ty, (types.Array, types.Number, types.Boolean))

    def _borrowed_value(context, builder, ty, val):
        if isinstance(ty, types.Array):
            ary = context.make_array(ty)(context, builder, value=val)
            ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
            ary.parent = cgutils.get_null_value(ary.parent.type)
            return ary._getvalue()
        if isinstance(ty, types.BaseTuple):
            items = [_borrowed_value(context, builder, t, builder.extract_value(val, k)) for k, t in enumerate(ty)]
            return context.make_tuple(builder, ty, items)
        return val

    @intrinsic
    def _borrowed(typingctx, a):
        if not _borrowable(a):
            return None
        sig = a(a)

        def codegen(context, builder, sig, args):
            return _borrowed_value(context, builder, sig.args[0], args[0])
        return sig, codegen

    @overload(borrow)
    def _borrow_impl(a):
        if _borrowable(a):
            return lambda a: _borrowed(a)
        return None
