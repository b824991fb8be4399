"""NKI names trnsim recognises but does not implement yet: each raises ``NotImplementedError`` naming itself."""

from __future__ import annotations

__all__ = ["unsupported", "install_unsupported"]


def unsupported(qualname):
    """A callable that raises ``NotImplementedError`` naming ``qualname`` (e.g. ``nki.isa.topk``)."""
    name = qualname.rsplit(".", 1)[-1]

    def fn(*args, **kwargs):
        raise NotImplementedError(f"{qualname} is not supported by trnsim yet")
    fn.__name__ = name
    fn._trnsim_unsupported = True        # how tools (the conformance suite) tell a stub from an instruction
    return fn


def install_unsupported(namespace, module_name, names):
    """Put an :func:`unsupported` stub for each of ``names`` into ``namespace`` (a module's globals)."""
    for n in names:
        namespace[n] = unsupported(f"{module_name}.{n}")
