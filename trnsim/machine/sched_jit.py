"""``njit`` for the scheduler's loop (``sched_events``, ``sched_state`` and their helpers), and ``borrow``.

``njit(...)`` only marks a function for numba, with numba's options, and returns the function itself: the modules'
names are plain Python, and running them uncompiled (``schedule(..., impl="python")``, or ``auto`` on a short run:
``sched_fast.choose``) neither imports numba nor loads anything of it.  :func:`jitted` gives a marked function's
compiled build: its first call imports numba and makes a numba dispatcher of every marked function, each over a
copy of its module's globals in which the marked functions are their dispatchers (so compiled code calls compiled
helpers and inlines the ``inline="always"`` ones, as a module decorated with ``numba.njit`` would); the dispatchers
load their builds from numba's cache (``cache=True``) or compile them on their first call.  numba's cache keys a
function by its file, qualified name, first line and bytecode, so these dispatchers use the same cache entries
as the decorated functions did.  When numba cannot be imported (a broken install: numba is a dependency,
pyproject.toml), :func:`jitted` is unavailable (``HAVE_NUMBA`` false after :func:`available`) and the loop runs
uncompiled with the same timelines.

``borrow``: compiled code passes each array to a helper (inlined or not) with an atomic reference-count increment
and decrement of the array's memory (numba's NRT), which the compiler removes only in simple control flow: in the
loop's rows, with dozens of arrays handed to the rules of ``sched_rules``, that was most of the loop's time.  An
array made by ``borrow`` refers to the same memory without a reference count (no NRT meminfo), so handing it on
costs nothing.  Only for arrays that something else keeps alive for the whole call (the function's arguments, or a
tuple argument's items) and that are never returned or stored; uncompiled, ``borrow`` returns its argument."""

from __future__ import annotations

import sys
import threading
import types

__all__ = ["njit", "borrow", "available", "jitted", "loaded", "cache_holds"]

_MARKED: list = []          # (function, numba options), in definition order
_JIT: dict = {}             # marked function -> its numba dispatcher (made by _make)
_LOCK = threading.Lock()
_STATE = {"numba": None}    # None: not tried yet; then whether numba imports


def njit(*args, **kwargs):
    """Mark a function of the loop for numba (``numba.njit``'s options); returns the function unchanged."""
    def deco(fn):
        _MARKED.append((fn, kwargs))
        return fn
    if args and callable(args[0]):
        return deco(args[0])
    return deco


def borrow(a):
    """``a`` (an array, or a tuple of arrays and numbers): compiled, the same arrays without reference counts (see
    the module docstring); uncompiled, ``a`` itself."""
    return a


def available() -> bool:
    """Whether numba can be imported (imports it the first time: about 0.1-0.3 s)."""
    if _STATE["numba"] is None:
        try:
            import numba  # noqa: F401
            _STATE["numba"] = True
        except ImportError:
            _STATE["numba"] = False
    return _STATE["numba"]


def loaded() -> bool:
    """Whether the compiled builds have been asked for in this process (:func:`jitted`)."""
    return bool(_JIT)


def jitted(fn):
    """The compiled build of the marked function ``fn`` (a numba dispatcher; ``fn`` itself under numba's
    ``NUMBA_DISABLE_JIT=1``).  Raises ImportError when numba cannot be imported."""
    d = _JIT.get(fn)
    if d is None:
        with _LOCK:
            _make()
        d = _JIT.get(fn)
        if d is None:
            raise KeyError(f"sched_jit.jitted: {getattr(fn, '__qualname__', fn)!r} is not marked with njit")
    return d


def cache_holds(fn) -> bool:
    """Whether numba's cache holds a build of the marked function ``fn`` as its source is now, for this machine:
    loading it costs a fraction of a second, compiling it (a fresh install, an edited loop, another CPU) about a
    minute for the loop's entry points (:data:`sched_fast.COLD_ROWS`).  Imports numba.  Asks numba's own cache
    (its index, keyed by the source file's stamp, the machine's code generator and the function's bytecode); False
    when numba has no writable place for a cache (it would compile in every process); when the index cannot be read
    (numba's internals moved), True, so callers behave as before this check existed."""
    if not available():
        return False
    try:
        import hashlib

        from numba.core.caching import FunctionCache
        from numba.core.registry import cpu_target
        from numba.core.serialize import dumps
        try:
            cache = FunctionCache(fn)
        except RuntimeError:                            # numba finds no writable place to cache: it compiles always
            return False
        index = cache._cache_file._load_index()         # {} when absent or stale (numba checks the source stamp)
        if not index:
            return False
        if fn.__closure__ is not None:
            cvars = dumps(tuple(c.cell_contents for c in fn.__closure__))     # as numba keys it
        else:
            cvars = b""
        code = (hashlib.sha256(fn.__code__.co_code).hexdigest(), hashlib.sha256(cvars).hexdigest())
        magic = cpu_target.target_context.codegen().magic_tuple()
    except Exception:                                   # noqa: BLE001 - an unreadable cache: the former behaviour
        return True
    return any(len(k) == 3 and k[1] == magic and k[2] == code for k in index)


def _make():
    """A dispatcher for every marked function not made yet (see the module docstring)."""
    todo = [(fn, kw) for fn, kw in _MARKED if fn not in _JIT]
    if not todo:
        return
    if not available():
        raise ImportError("trnsim: the compiled scheduler needs numba, which cannot be imported")
    import numba
    _register_borrow()
    glob = {}                   # module name -> the compiled builds' globals
    made = {}
    for fn, kw in todo:
        g = glob.get(fn.__module__)
        if g is None:
            g = glob[fn.__module__] = dict(sys.modules[fn.__module__].__dict__)
        f2 = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
        f2.__qualname__ = fn.__qualname__
        f2.__module__ = fn.__module__
        f2.__doc__ = fn.__doc__
        f2.__kwdefaults__ = fn.__kwdefaults__
        made[fn] = numba.njit(**kw)(f2)
    every = dict(_JIT)
    every.update(made)
    for g in glob.values():
        for name, val in g.items():
            if isinstance(val, types.FunctionType) and val in every:
                g[name] = every[val]
    _JIT.update(made)


def _register_borrow():
    """``borrow``'s compiled build (once): arrays without NRT meminfo."""
    if _STATE.get("borrow"):
        return
    _STATE["borrow"] = True
    from numba.core import cgutils
    from numba.core import types as nbt
    from numba.extending import intrinsic, overload

    def _borrowable(ty):
        if isinstance(ty, nbt.BaseTuple):
            return all(_borrowable(t) for t in ty)
        return isinstance(ty, (nbt.Array, nbt.Number, nbt.Boolean))

    def _borrowed_value(context, builder, ty, val):
        if isinstance(ty, nbt.Array):
            ary = context.make_array(ty)(context, builder, value=val)
            ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
            ary.parent = cgutils.get_null_value(ary.parent.type)
            return ary._getvalue()
        if isinstance(ty, nbt.BaseTuple):
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
