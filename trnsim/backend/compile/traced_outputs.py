"""The outputs of a compiled graph called on shape-only payloads, made from its trace instead of by running its steps
(``runtime.CompiledGraph.__call__``; ``CompiledGraph.TRACED_OUTPUTS = False`` runs the steps, which tests compare).

``ref`` is the runtime's class of references to graph values (``runtime._Ref``, with the value's node index ``i``):
the output template holds them.
"""

from __future__ import annotations

import operator

import torch

from . import ops as O
from .fusion import val

__all__ = ["template", "outputs"]


def template(graph, nodes, ref):
    """The graph's output template with each value a step makes replaced by its traced metadata, for a graph whose
    outputs on shape-only payloads are known without running its steps; None otherwise.

    On shape-only payloads (``_shape_only_mode``) a step computes no value, only its output's metadata, which the
    trace already holds (``node.meta["val"]``, traced for these input shapes: graphs are compiled per shape,
    ``backend._PerShape``), and the graph's time comes from its plan (``_charge``), not from running it.  So the
    outputs can be made directly, as fake tensors of the traced metadata, in a fraction of the host time (a
    Qwen3-32B layer's forward and backward, tensor parallel: 0.4 s of CPU).  A value an op makes afresh becomes a
    new tensor (``_Traced``); a view (an op whose schema returns an alias of its argument, e.g. ``view``, ``t``,
    ``split``) becomes the same view, ``as_strided`` with its traced size, stride and offset, of the tensor its
    chain of views starts from (a graph input, or a value made afresh), so outputs share storage as a run makes
    them share it (the device's memory accounting counts each storage once).

    Only where nothing else can differ: every step a functional aten op, a view or a collective (no custom op,
    which runs device code; no random op, which draws from the device generator; no op that mutates an argument);
    every traced value a tensor (or a tuple of them) of static sizes (an op needing values, such as ``item`` or
    ``nonzero``, raises on shape-only payloads and leaves symbolic sizes); a value made afresh dense and at offset
    0, as ``empty_strided`` makes it."""
    if graph.has_custom:
        return None
    for n in nodes:
        if n.op != "call_function":
            continue
        k = O.kind(n.target)
        if n.target is not operator.getitem and (
                k in (None, "custom", "random") or not isinstance(n.target, torch._ops.OpOverload)
                or n.target._schema.is_mutable):
            return None
        if not _static_tensors(val(n)):
            return None
    index = {n: i for i, n in enumerate(nodes)}
    inputs = set(graph.placeholders)

    def root(i):
        """The template of the tensor whose storage value ``i`` holds: a graph input or a value made afresh."""
        n = nodes[i]
        if i in inputs:
            return ref(i)
        v = val(n)
        if n.op != "call_function" or not isinstance(v, torch.Tensor):
            raise _NotTraced
        src = _aliased(n)
        if src is None:
            if v.storage_offset() != 0 or not _dense(v):
                raise _NotTraced
            return _Traced(i, tuple(v.shape), tuple(v.stride()), v.dtype)
        return root(index[src])

    def out(a):
        if a.__class__ is ref:
            if a.i in inputs:
                return a
            r = root(a.i)
            if r.__class__ is _Traced and r.i == a.i:
                return r
            v = val(nodes[a.i])
            return _View(a.i, r, tuple(v.shape), tuple(v.stride()), v.storage_offset())
        if isinstance(a, (list, tuple)):
            return type(a)(out(b) for b in a)
        if isinstance(a, torch.Tensor):
            raise _NotTraced
        return a
    try:
        return out(graph.output)
    except _NotTraced:
        return None


class _NotTraced(Exception):
    pass


class _Traced:
    """A value made afresh: a new tensor of this metadata."""
    __slots__ = ("i", "shape", "stride", "dtype")

    def __init__(self, i, shape, stride, dtype):
        self.i, self.shape, self.stride, self.dtype = i, shape, stride, dtype


class _View:
    """Value ``i``, a view of ``base`` (the runtime's reference to a graph input, or a ``_Traced``) with this size,
    stride and offset."""
    __slots__ = ("i", "base", "shape", "stride", "offset")

    def __init__(self, i, base, shape, stride, offset):
        self.i, self.base, self.shape, self.stride, self.offset = i, base, shape, stride, offset


def _aliased(node):
    """The node whose storage ``node``'s value shares (the first argument of a view op: an alias annotation on its
    schema's returns, or a view by the compile backend's kinds), or None when the op makes its value afresh.
    ``getitem`` of a view op's tuple (``split``, ``unbind``) is a view of that op's argument."""
    src = node
    if node.target is operator.getitem:
        src = node.args[0]
        if not isinstance(src, torch.fx.Node) or src.op != "call_function":
            raise _NotTraced
    target = src.target
    if not isinstance(target, torch._ops.OpOverload):
        raise _NotTraced
    if all(r.alias_info is None for r in target._schema.returns) and O.kind(target) != "view":
        return None
    arg = src.args[0] if src.args else None     # views (``_unsafe_view`` too, unannotated) alias their first argument
    if not isinstance(arg, torch.fx.Node):
        raise _NotTraced
    return arg


def _dense(v):
    """Whether ``v``'s elements fill its storage span exactly once (a permutation of a contiguous layout)."""
    span = 1
    for stride, size in sorted((st, sz) for st, sz in zip(v.stride(), v.shape) if sz > 1):
        if stride != span:
            return False
        span *= size
    return True


def _static_tensors(v):
    if isinstance(v, torch.Tensor):
        return all(type(x) is int for x in v.shape) and all(type(x) is int for x in v.stride()) and \
            type(v.storage_offset()) is int
    if isinstance(v, (list, tuple)):
        return all(x is None or _static_tensors(x) for x in v)
    return False


def outputs(template, env, ref):
    """The outputs of ``template``'s result: graph inputs as given, each value made afresh a new
    shape-only tensor of its traced metadata, each view that view of its base; one tensor per value (a value output
    twice, or the base of two views, is one tensor, as a run gives it); called inside the shape-only fake mode."""
    made = {}

    def get(a):
        if a.__class__ is ref:
            return env[a.i]
        if a.__class__ is _Traced:
            t = made.get(a.i)
            if t is None:
                t = made[a.i] = torch.empty_strided(a.shape, a.stride, dtype=a.dtype)
            return t
        if a.__class__ is _View:
            t = made.get(a.i)
            if t is None:
                t = made[a.i] = get(a.base).as_strided(a.shape, a.stride, a.offset)
            return t
        if isinstance(a, (list, tuple)):
            return type(a)(get(b) for b in a)
        return a
    return get(template)
