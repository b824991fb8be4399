"""Running a lowered graph: numerics on the CPU payloads, time from the plan's fused kernels.

Numerics: the graph's ops run in order on the payloads.  Inside a fused kernel values stay in fp32: low-precision
float inputs are read as fp32, each op computes in fp32 (matmuls and reductions accumulate in fp32), and a value is
rounded once, to its dtype, when it is materialised (read by another kernel or returned).  An fp32 matmul's operands
are first rounded to the compiler's auto-cast type (the plan's ``operand_casts``: none under the compiler's
default ``--auto-cast none``, bf16 with ``--auto-cast matmult``; ``costs.compiler_auto_cast``).  An explicit cast in the
graph (``_to_copy`` to bf16) rounds where it stands, as it would on chip.  Ops that are kernels of their own
(``opaque``) run on materialised tensors of their real dtypes, as eager does.

Time: one launch of the whole graph (``costs.launch_ns``: the graph is one program on the device), then every fused
kernel's simulated duration, back to back on the device clock.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import charging, costs
from ..device_state import STATE
from ..host_threads import is_serial, serial
from ..op_table import category
from ..rng import generator_overload, native_dropout
from ..tensor import NeuronTensor, wrap
from . import ops as O
from . import traced_outputs
from .fusion import _LOW, val

_CPU = torch.device("cpu")


class _Ref:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def _template(a, index):
    if isinstance(a, torch.fx.Node):
        return _Ref(index[a])
    if isinstance(a, (list, tuple)):
        return type(a)(_template(b, index) for b in a)
    if isinstance(a, dict):
        return {k: _template(v, index) for k, v in a.items()}
    if isinstance(a, torch.device) and a.type != "cpu":
        return _CPU
    return a


def _resolve(a, env):
    if a.__class__ is _Ref:
        return env[a.i]
    if isinstance(a, (list, tuple)):
        return type(a)(_resolve(b, env) for b in a)
    return a


def _up(x):
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in _LOW else x
    if isinstance(x, (list, tuple)):
        return type(x)(_up(y) for y in x)
    return x


def _round(x, v):
    """Materialise ``x`` with the dtype of its traced value ``v``."""
    if isinstance(x, torch.Tensor) and isinstance(v, torch.Tensor):
        return x.to(v.dtype) if x.dtype != v.dtype else x
    if isinstance(x, (list, tuple)) and isinstance(v, (list, tuple)):
        return type(x)(_round(a, b) for a, b in zip(x, v))
    return x


def _cast_operands(fn, args, dtype):
    """A matmul's fp32 operands rounded to ``dtype`` (neuronx-cc's auto-cast: the loading DMAs cast them), the
    product accumulated in fp32 as before; ``addmm``'s bias is not an operand of the product."""
    first = 1 if O.op_name(fn) == "addmm" else 0
    return tuple(a.to(dtype).float() if first <= j < first + 2 and isinstance(a, torch.Tensor) and
                 a.dtype == torch.float32 else a for j, a in enumerate(args))


def _keep_fp32(x):
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype in _LOW else x
    if isinstance(x, (list, tuple)):
        return type(x)(_keep_fp32(y) for y in x)
    return x


_INDEX = torch.ops.aten.index.Tensor
_INDEX_SELECT = torch.ops.aten.index_select.default._op
_INDEX_OP = _INDEX._op
_INT_INDEX = (torch.int64, torch.int32)


def _gather(src, indices):
    """``aten.index.Tensor(src, indices)`` for its commonest graph form, one integer index tensor on dim 0 of ``src``
    (a lookup table, bitsandbytes' ``code[q]``), as ``index_select``: the same values (a gather copies them), about
    3x less host time (a 10,752-entry lookup: 24 -> 8 us).  Every other form, and a negative or out-of-range index
    (which ``index_select`` refuses; ``index`` wraps a negative one or raises its own error), runs the op itself."""
    if len(indices) == 1:
        i = indices[0]
        if i.__class__ is torch.Tensor and i.dtype in _INT_INDEX and i.dim() == 1 and src.dim() >= 1:
            try:
                return _INDEX_SELECT(src, 0, i)
            except (IndexError, RuntimeError):
                pass
    return _INDEX_OP(src, indices)


_COPY = torch.ops.aten.copy.default
_COPY_OP = _COPY._op
_SLICE_SCATTER = torch.ops.aten.slice_scatter.default
_SLICE_SCATTER_OP = _SLICE_SCATTER._op
_SLICE = torch.ops.aten.slice.Tensor
_SLICE_OP = _SLICE._op


# torch splits a CPU elementwise loop over its thread pool only past at::internal::GRAIN_SIZE = 32768 elements
# (torch 2.13, aten/src/ATen/Parallel.h); below it ``copy_`` is one thread already.
_HOST_WRITE_MIN = 32768
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# value-preserving integer widenings, as numpy's "safe" casts (the same values torch's copy_ writes)
_INT_NP = {torch.uint8: "u1", torch.int8: "i1", torch.int16: "i2", torch.int32: "i4", torch.int64: "i8"}
_WIDEN = {(a, b) for a in _INT_NP for b in _INT_NP
          if a != b and np.can_cast(_INT_NP[a], _INT_NP[b], "safe")}


def _host_write(view, src):
    """``view.copy_(src)`` done by numpy on the same memory, or False where it does not apply.  The written bytes
    are the same: a copy of one dtype is a copy of its bits (both sides viewed as an integer of the element's size),
    and an integer widening (uint8 -> int32) writes the same values.  Why: a strided ``copy_`` of 2^19 elements
    (bitsandbytes' ``out[1::2] = q & 0xF``) runs on torch's thread pool, whose threads spin-wait for each other; on
    a loaded 2-core host one call took 8 ms of CPU against 0.3 ms on one thread, and numpy's loop is one thread.
    Applies to plain CPU tensors of the same shape, not sharing storage, no conj/neg bit, no autograd."""
    if view.__class__ is not torch.Tensor or src.__class__ is not torch.Tensor or view.shape != src.shape \
            or view.device.type != "cpu" or src.device.type != "cpu" or view.requires_grad or src.requires_grad \
            or view.is_conj() or view.is_neg() or src.is_conj() or src.is_neg():
        return False
    if view.untyped_storage().data_ptr() == src.untyped_storage().data_ptr():
        return False
    if view.dtype == src.dtype:
        bits = _BITS.get(view.element_size())
        if bits is None or view.is_complex():
            return False
        if view.dtype != bits:
            view, src = view.view(bits), src.view(bits)
    elif (src.dtype, view.dtype) not in _WIDEN:
        return False
    view.numpy()[...] = src.numpy()
    return True


def _write(view, src):
    """``view.copy_(src)``; a large one on the host through numpy (``_host_write``) where that writes the same
    bytes."""
    if view.numel() < _HOST_WRITE_MIN or not _host_write(view, src):
        view.copy_(src)
    return view


def _no_self_overlap(t):
    """True when no two elements of ``t`` share memory.  torch's own check answers "too hard" for any non-contiguous
    layout (a stride-2 view); this one proves it for layouts whose dims, taken by increasing stride, each step past
    the whole extent of the dims before them (every strided slice of a dense tensor), and answers False otherwise."""
    if torch._debug_has_internal_overlap(t) == 0:
        return True
    extent = 0
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1):
        if stride <= extent:
            return False
        extent += stride * (size - 1)
    return True


def _copy_fresh(dst, src, non_blocking=False):
    """The functional ``aten.copy(dst, src)`` for a result only ever read through its own view (``_shortcuts``), without
    reading ``dst``'s storage.  The op clones ``dst`` with its strides and offset (the whole storage under it:
    ``clone_preserve_strides``) and copies ``src`` in; here a storage of the same size is allocated, not filled, and
    viewed the same way, so the view holds the same values, dtype, shape, strides and offset; only the bytes outside
    the view, which ``_shortcuts`` proves no step reads, are left unwritten.  bitsandbytes' 4-bit dequantisation
    copies 2^19 nibbles into a stride-2 view of 2^20 int32: the op reads and writes all 2^20.  A ``dst`` that may
    overlap itself (the op clones it densely), or a conj or neg view, runs the op."""
    if dst.is_conj() or dst.is_neg() or not _no_self_overlap(dst):
        return _COPY_OP(dst, src, non_blocking)
    n = dst.untyped_storage().nbytes() // dst.element_size()
    out = torch.empty(n, dtype=dst.dtype).as_strided(dst.shape, dst.stride(), dst.storage_offset())
    return _write(out, src)


def _slice_scatter_into(base, src, dim=0, start=None, end=None, step=1):
    """``aten.slice_scatter(base, src, ...)`` written into ``base`` itself, for a ``base`` that nothing else reads
    (``_shortcuts`` proves it): the graph never sees ``base``'s old value again, so writing ``src`` into the
    slice of it gives the tensor ``slice_scatter`` would return, without copying the whole of ``base`` (bitsandbytes'
    ``out[1::2] = q & 0xF`` on 2^20 int32: 3.9 -> 0.55 ms).  ``src`` of another dtype or shape than the slice
    (which ``copy_`` would convert or broadcast where ``slice_scatter`` refuses) runs the op."""
    view = _SLICE_OP(base, dim, start, end, step)
    if src.__class__ is not torch.Tensor or src.dtype != base.dtype or view.shape != src.shape \
            or base.is_conj() or base.is_neg() or src.is_conj() or src.is_neg():
        return _SLICE_SCATTER_OP(base, src, dim, start, end, step)
    _write(view, src)
    return base


def _copy_into_slice(base, src, dim=0, start=None, end=None, step=1):
    """``slice_scatter(base, copy(slice(base, ...), src), ...)`` as one write: ``src`` copied (converted and
    broadcast as ``copy_`` does, the values the functional ``copy`` holds) straight into the slice of ``base``, for
    a pair ``_fused_writes`` proves is functionalisation's ``base[s] = src`` with the scatter in place: the copy's
    result, a fresh tensor of the slice's shape and dtype, is never made.  bitsandbytes' ``out[1::2] = q & 0xF``
    on 2^20 int32: one strided write instead of a 4 MB allocation and two writes."""
    _write(_SLICE_OP(base, dim, start, end, step), src)
    return base


def _payload_op(fn):
    """The callable a generated step of mode 0 (as traced) calls: ``_gather`` for ``aten.index.Tensor``, else the
    op (an OpOverload's ``_op``: its ``__call__`` is only ``self._op(*args, **kwargs)``)."""
    if fn is _INDEX:
        return _gather
    return fn._op if fn.__class__ is torch._ops.OpOverload else fn


def _serial_step(fn):
    """Whether a graph step's op computes each output element from its inputs alone, so that its numerics run on
    one host thread as the same op's do in eager (``host_threads.is_serial``)."""
    if fn.__class__ is not torch._ops.OpOverload:
        return False
    return is_serial(fn._opname, category(fn._opname))



def _gen_kw(target, kwargs):
    """Inject the device generator into a random op (as eager does), when the op takes one and none was given."""
    schema = getattr(target, "_schema", None)
    if schema is None or not any(a.name == "generator" for a in schema.arguments):
        return kwargs
    if kwargs.get("generator") is None:
        kwargs = dict(kwargs)
        kwargs["generator"] = STATE.generator
    return kwargs


def _compute(fn, args, kwargs, mode, v, cast):
    """A compute op of a fused kernel on payloads: low-precision inputs read as fp32 (a matmul's fp32 operands first
    rounded to ``cast``, the auto-cast type, when the plan names one), computed in fp32, then rounded once to the
    traced dtype (``mode`` 1: materialised) or kept in fp32 (2: stays on chip)."""
    args = _up(args)
    if cast is not None:
        args = _cast_operands(fn, args, cast)
    out = fn(*args, **{k: _up(x) for k, x in kwargs.items()})
    return _round(out, v) if mode == 1 else _keep_fp32(out)


_compute_serial = serial(_compute)


@serial
def _call_serial(fn, *args, **kwargs):
    return fn(*args, **kwargs)


class CompiledGraph:
    """A callable running one lowered aten graph on the device (``make_boxed_func`` makes it AOTAutograd's)."""

    def __init__(self, gm, plan, name):
        self.gm = gm
        self.plan = plan
        self.name = name
        nodes = list(gm.graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        mat = set(plan["materialised"])
        compute = set(plan["compute"])
        self.casts = {int(i): getattr(torch, d) for i, d in plan.get("operand_casts", {}).items()}
        self.n_env = len(nodes)
        self.placeholders = []
        self.steps = []
        self.output = None
        for i, n in enumerate(nodes):
            if n.op == "placeholder":
                self.placeholders.append(i)
            elif n.op == "get_attr":
                obj = gm
                for part in n.target.split("."):
                    obj = getattr(obj, part)
                if isinstance(obj, NeuronTensor):
                    obj = obj._p
                self.steps.append((i, None, obj, None, 3, None))
            elif n.op == "call_function":
                args = _template(tuple(n.args), index)
                kwargs = _template(dict(n.kwargs), index)
                k = O.kind(n.target)
                target = n.target
                if k == "random":
                    # rand_like & co. run as their twin taking the device generator, as in eager (backend/rng.py)
                    if target is torch.ops.aten.native_dropout.default:
                        target = native_dropout
                    elif hasattr(target, "_schema"):
                        target = generator_overload(target) or target
                    kwargs = _gen_kw(target, kwargs)
                if k == "softmax_bw" and len(args) > 3 and args[3] in _LOW:
                    args = args[:3] + (torch.float32,) + tuple(args[4:])   # computed in fp32 like eager
                if k == "custom":
                    mode = 4                            # a custom op: runs with device tensors (nki_bridge)
                elif i in compute:
                    mode = 1 if i in mat else 2       # 1: fp32 then round once; 2: fp32, stays on chip
                else:
                    mode = 0                            # as traced (views, opaque ops)
                self.steps.append((i, target, args, kwargs, mode, val(n)))
            elif n.op == "output":
                self.output = _template(n.args[0], index)
        self.total_ns = float(sum(k["ns"] for k in plan["kernels"]))
        self.has_custom = any(st[4] == 4 for st in self.steps)
        # the steps whose numerics run on one host thread (host_threads.py)
        self.serial = {st[0] for st in self.steps if st[4] in (0, 1, 2) and _serial_step(st[1])}
        self.calls = 0
        self._run = None        # the steps as one generated function (``_generate``), made on the first call
        self._traced_outputs = traced_outputs.template(self, nodes, _Ref)

    # False: every call walks the argument templates (``_interpret``); tests compare the two ways
    GENERATED = True
    # False: a graph on shape-only payloads runs its steps too (``traced_outputs.template``); tests compare the two
    TRACED_OUTPUTS = True

    def __getstate__(self):
        # copies leave the generated function out (it lives in a namespace of its own): made again on first call
        state = dict(self.__dict__)
        state["_run"] = None
        return state

    def __call__(self, *args):
        env = [None] * self.n_env
        wrappers = {}
        for i, a in zip(self.placeholders, args):
            if isinstance(a, NeuronTensor):
                wrappers[id(a._p)] = a
                a = a._p
            env[i] = a
        if CompiledGraph.GENERATED:
            run = self._run
            if run is None:
                run = self._run = _generate(self)
        else:
            run = self._interpret
        mode = _shape_only_mode(self, env)
        if mode is None:
            out = run(env, wrappers)
        else:
            with mode:
                traced = self._traced_outputs if CompiledGraph.TRACED_OUTPUTS else None
                out = run(env, wrappers) if traced is None else traced_outputs.outputs(traced, env, _Ref)
        self._charge()
        self.calls += 1
        return [self._wrap(o, wrappers) for o in out]

    def _interpret(self, env, wrappers):
        """The steps run by walking their argument templates (``_resolve``) on every call: the reference that the
        generated function (``_generate``) is tested against, so it takes none of its shortcuts (``_gather``,
        ``_direct_steps``)."""
        for i, fn, a, kw, mode, v in self.steps:
            if mode == 3:
                env[i] = a
                continue
            ra = _resolve(a, env)
            rk = {k: _resolve(x, env) for k, x in kw.items()} if kw else {}
            one = i in self.serial
            if mode == 4:
                env[i] = _custom(fn, ra, rk, wrappers)
            elif mode:
                env[i] = (_compute_serial if one else _compute)(fn, ra, rk, mode, v, self.casts.get(i))
            else:
                env[i] = _call_serial(fn, *ra, **rk) if one else fn(*ra, **rk)
        return _resolve(self.output, env)

    @staticmethod
    def _wrap(o, wrappers):
        if isinstance(o, torch.Tensor):
            w = wrappers.get(id(o))
            return w if w is not None else wrap(o)
        return o

    def _charge(self):
        launch = costs.launch_ns(STATE.target)
        if not STATE.profilers:
            STATE.now_ns += launch + self.total_ns
            return
        line = charging.caller_line()
        _row(f"neuron::graph_launch[{self.name}]", launch, 0.0, 0, line)
        for k in self.plan["kernels"]:
            if k["ns"]:
                _row(f"fused::{k['label']}", k["ns"], k["flops"], k["bytes"], line)


def _shape_only_mode(graph, env):
    """The shape-only device's fake-tensor mode when the graph runs on shape-only payloads (an input is a fake
    tensor) and calls no custom op (those run device code): its factory ops (``full``, ``empty_permuted``) then make
    fake tensors too, and so do ops on a real input (AOTAutograd restrides a tangent into a new device tensor), where
    they made real CPU tensors of full size (a Qwen3-32B layer's backward: 0.4 GB and half a second of CPU)."""
    if graph.has_custom:
        return None
    from torch._subclasses.fake_tensor import FakeTensor
    for i in graph.placeholders:
        if isinstance(env[i], FakeTensor):
            from ..shape_only import _fake_mode
            return _fake_mode()
    return None


def _generate(graph):
    """The graph's steps as one Python function ``run(env, wrappers)``, made once per graph: each step's arguments
    are written out as expressions over the environment (``e[3]``) and constants are bound once, so a call does not
    walk the argument templates again (``_resolve``).  bitsandbytes' 17-op 4-bit dequantisation graph: 148 -> 117 us
    of host CPU per call, the rest being the payload ops themselves (``aten.index`` alone 24 us).  The function does exactly what ``CompiledGraph._interpret`` does, step by step, through the same helpers; the
    names it uses (ops, constants, traced values) are bound in its own namespace, so no repr of a value is parsed."""
    names = {"_compute": _compute, "_custom": _custom, "_compute_serial": _compute_serial}
    lines = ["def run(e, W):"]
    direct = _direct_steps(graph)
    inplace, fresh = _shortcuts(graph, direct)
    fused = _fused_writes(graph, inplace, fresh)        # copy step -> its scatter
    into = set(fused.values())

    def bind(x):
        k = f"c{len(names)}"
        names[k] = x
        return k

    def has_ref(a):
        return a.__class__ is _Ref or (isinstance(a, (list, tuple)) and any(map(has_ref, a)))

    def expr(a):
        if a.__class__ is _Ref:
            return f"e[{a.i}]"
        if not has_ref(a):
            # a constant: bound once, except a plain list, which is copied per call as _resolve does (fx's
            # immutable_list and tuples cannot be changed by the op, so one object serves every call)
            return f"[*{bind(a)}]" if a.__class__ is list else bind(a)
        if a.__class__ is list:
            return "[" + "".join(expr(b) + ", " for b in a) + "]"
        if a.__class__ is tuple:
            return "(" + "".join(expr(b) + ", " for b in a) + ")"
        if isinstance(a, (list, tuple)):      # a subclass: rebuilt with its type, as _resolve does
            return f"{bind(type(a))}(" + "(" + "".join(expr(b) + ", " for b in a) + "))"
        return bind(a)

    def kwexpr(kw):
        return "{" + "".join(f"{k!r}: {expr(x)}, " for k, x in kw.items()) + "}"
    for i, fn, a, kw, mode, v in graph.steps:
        if mode == 3:
            lines.append(f"    e[{i}] = {bind(a)}")
        elif mode == 4:
            lines.append(f"    e[{i}] = _custom({bind(fn)}, {expr(a)}, {kwexpr(kw or {})}, W)")
        elif mode and i not in direct:
            cast = graph.casts.get(i)
            c = "_compute_serial" if i in graph.serial else "_compute"
            lines.append(f"    e[{i}] = {c}({bind(fn)}, {expr(a)}, {kwexpr(kw or {})}, {mode}, {bind(v)}, "
                         f"{bind(cast)})")
        elif i in fused:        # the copy's only reader writes its source itself (_copy_into_slice)
            lines.append(f"    e[{i}] = {expr(a[1])}")
        else:
            f = bind(_copy_into_slice if i in into else _slice_scatter_into if i in inplace
                     else _copy_fresh if i in fresh else serial(_payload_op(fn)) if i in graph.serial
                     else _payload_op(fn))
            parts = [expr(b) for b in a] if a.__class__ is tuple else [f"*{expr(a)}"]
            if kw:
                parts.append(f"**{kwexpr(kw)}")
            lines.append(f"    e[{i}] = {f}({', '.join(parts)})")
    lines.append(f"    return {expr(graph.output)}")
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<trnsim compiled graph {graph.name}>", "exec"), names)
    run = names["run"]
    run.source = src
    return run


def _refs(a, out):
    """The environment indices ``a`` (an argument template) reads, into ``out``."""
    if a.__class__ is _Ref:
        out.append(a.i)
    elif isinstance(a, (list, tuple)):
        for b in a:
            _refs(b, out)
    elif isinstance(a, dict):
        for b in a.values():
            _refs(b, out)
    return out


# ops whose result is a tensor of its own (no view of an input or of another value): a ``slice_scatter`` may write
# into such a result when nothing else reads it (``_shortcuts``)
_FRESH = frozenset((torch.ops.aten.empty.memory_format, torch.ops.aten.zeros.default, torch.ops.aten.full.default,
                    torch.ops.aten.empty_like.default, torch.ops.aten.zeros_like.default,
                    torch.ops.aten.full_like.default, torch.ops.aten.clone.default, _SLICE_SCATTER))


def _readers(graph):
    """For each environment index, the steps that read it, as ``(step index, op, argument template)``; the output
    reads as ``(None, None, None)``."""
    readers = {}
    for i, fn, a, kw, mode, v in graph.steps:
        if mode != 3:
            for r in _refs(kw or {}, _refs(a, [])):
                readers.setdefault(r, []).append((i, fn, a))
    for r in _refs(graph.output, []):
        readers.setdefault(r, []).append((None, None, None))
    return readers


def _only_copied_from(r, fn, before, readers):
    """Whether step ``r`` (a reader of a scatter's base) is a ``slice`` of it, run before step ``before``, whose
    result only ``copy`` steps read, before ``before`` too, as their ``dst`` (argument 0, whose values the copy's
    view never shows): functionalisation's ``base[s] = x`` is ``copy(slice(base, s), x)`` scattered back."""
    if r is None or r >= before or fn is not _SLICE:
        return False
    rs = readers.get(r, ())
    return all(c is not None and c < before and f is _COPY and x.__class__ is tuple and x[0].__class__ is _Ref
               and not any(y.__class__ is _Ref and y.i == r for y in x[1:]) for c, f, x in rs)


def _shortcuts(graph, direct):
    """The steps the generated function runs through a shortcut, as ``(scatters, copies)``; each is called as the op
    itself (mode 0, or a direct compute step) with positional arguments only.

    * ``scatters``: ``slice_scatter`` steps run in place (``_slice_scatter_into``): ``base`` made by a step of
      ``_FRESH`` (a ``slice_scatter``'s result is fresh by induction, as an in-place one returns its own fresh
      base), not read by the output, and read by no other step except, earlier, a ``slice`` that only earlier
      ``copy`` steps read as their ``dst`` (``_only_copied_from``), and ``src`` another value.  Then no view of
      ``base`` is read after the write and its old value is never read again, so overwriting it is invisible.
    * ``copies``: functional ``copy`` steps (``_copy_fresh``) whose every reader is a ``slice_scatter`` taking the
      result as its ``src`` only (which reads the values in the view), and not the output."""
    readers = _readers(graph)
    made = {i: fn for i, fn, a, kw, mode, v in graph.steps if mode != 3}
    scatters, copies = set(), set()
    for i, fn, a, kw, mode, v in graph.steps:
        if kw or mode == 4 or (mode and i not in direct) or a.__class__ is not tuple:
            continue
        if fn is _SLICE_SCATTER:
            if len(a) < 2 or a[0].__class__ is not _Ref or a[1].__class__ is not _Ref or a[0].i == a[1].i:
                continue
            b = a[0].i
            if made.get(b) in _FRESH and not any(x.__class__ is _Ref for x in a[2:]) \
                    and all(r == i or _only_copied_from(r, f, i, readers) for r, f, _ in readers.get(b, ())):
                scatters.add(i)
        elif fn is _COPY:
            rs = readers.get(i, ())
            if rs and all(f is _SLICE_SCATTER and len(x) > 1 and x[1].__class__ is _Ref and x[1].i == i
                          and not any(y.__class__ is _Ref and y.i == i for k, y in enumerate(x) if k != 1)
                          for _, f, x in rs):
                copies.add(i)
    return scatters, copies


def _slice_args(args, first):
    """``(dim, start, end, step)`` of ``slice``/``slice_scatter`` positional arguments from index ``first``, with the
    schemas' defaults filled in; None when one is an environment value (known only at run time)."""
    rest = tuple(args[first:]) + (0, None, None, 1)[len(args) - first:]
    if len(rest) != 4 or any(x.__class__ is _Ref for x in rest):
        return None
    return rest


def _fused_writes(graph, scatters, copies):
    """Pairs ``{copy step: scatter step}`` that the generated function runs as one ``_copy_into_slice``: a copy of
    ``copies`` (``_copy_fresh``) whose ``dst`` is a ``slice`` step of the base of a scatter of ``scatters`` (run in
    place), with the scatter's own dim, start, end and step, and whose one reader is that scatter.  The scatter
    then writes into the slice exactly the values the copy would have held (``src`` converted and broadcast to
    the slice's dtype and shape), and nothing else reads the copy, so it is never made: its step hands ``src`` on."""
    steps = {i: (fn, a) for i, fn, a, kw, mode, v in graph.steps}
    readers = _readers(graph)
    out = {}
    for j in scatters:
        fn, a = steps[j]
        i = a[1].i
        cfn, ca = steps.get(i, (None, None))
        if i not in copies or cfn is not _COPY or len(ca) not in (2, 3) or (len(ca) == 3 and ca[2] is not False) \
                or ca[0].__class__ is not _Ref or len(readers.get(i, ())) != 1:
            continue
        sfn, sa = steps.get(ca[0].i, (None, None))
        if sfn is not _SLICE or sa.__class__ is not tuple or not sa or sa[0].__class__ is not _Ref \
                or sa[0].i != a[0].i:
            continue
        got, want = _slice_args(sa, 1), _slice_args(a, 2)
        if got is not None and got == want:
            out[i] = j
    return out


def _direct_steps(graph):
    """The compute steps (modes 1 and 2) that ``_compute`` would leave unchanged, which the generated function calls
    directly: no operand cast, a single tensor result traced in a dtype that is not low-precision, and every tensor
    the step reads known to hold, at run time, its traced dtype, not a low-precision one.  Then ``_up`` changes no
    argument, the op returns its traced dtype, and neither ``_round`` nor ``_keep_fp32`` converts it.

    Known: a graph input (its dtype is guarded) or a constant whose dtype is not low; a step's result traced in a
    dtype that is not low when the step is rounded (mode 1), or when it read only known tensors (modes 0 and 2: the
    op then sees the dtypes it was traced with).  A value kept in fp32 on chip (mode 2 of a bf16 value), anything a
    custom op returns, tuples and non-tensor values are not known, so the steps reading them keep ``_compute``."""
    nodes = list(graph.gm.graph.nodes)

    def plain(v):
        return isinstance(v, torch.Tensor) and v.dtype not in _LOW

    known = {i for i in graph.placeholders if plain(val(nodes[i]))}
    direct = set()
    for i, fn, a, kw, mode, v in graph.steps:
        if mode == 3:
            if plain(a):
                known.add(i)
            continue
        if mode == 4 or not plain(v):
            continue
        reads_known = all(r in known for r in _refs(kw or {}, _refs(a, [])))
        if mode == 1 or reads_known:
            known.add(i)
        if mode and reads_known and graph.casts.get(i) is None:
            direct.add(i)
    return direct


def _custom(fn, args, kwargs, wrappers):
    """Run a custom op node with device tensors (its kernels run and are timed on the device, nki_bridge.py) and
    hand the graph back payloads.  Wrappers of the graph's inputs are reused, so in-place ops reach them."""
    def to_dev(x):
        if isinstance(x, torch.Tensor) and type(x) is not NeuronTensor:
            w = wrappers.get(id(x))
            if w is None:
                w = wrappers[id(x)] = wrap(x)
            return w
        if isinstance(x, (list, tuple)):
            return type(x)(to_dev(y) for y in x)
        if isinstance(x, dict):
            return {k: to_dev(v) for k, v in x.items()}
        return x

    def to_host(x):
        if type(x) is NeuronTensor:
            wrappers.setdefault(id(x._p), x)
            return x._p
        if isinstance(x, (list, tuple)):
            return type(x)(to_host(y) for y in x)
        return x
    if isinstance(fn, torch._ops.HigherOrderOperator):      # auto_functionalized(_v2): its dense implementation
        from torch._higher_order_ops import auto_functionalize as af
        fn = af.auto_functionalized_v2_dense if fn.name() == "auto_functionalized_v2" else af.auto_functionalized_dense
    return to_host(fn(*to_dev(args), **to_dev(kwargs)))


def _row(name, ns, flops, nbytes, line):
    start = STATE.now_ns
    STATE.now_ns = start + ns
    for p in STATE.profilers:
        p.add(name, (), (), start, start + ns, "compiled", nbytes, flops, line)
