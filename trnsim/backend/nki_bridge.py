"""NKI kernels on ``neuron`` tensors: the bridge between ``trnsim.kernels`` and the simulated PyTorch device.

* **Eager calls.**  A ``@nki.jit`` (v2) or ``neuronxcc.nki.jit`` (legacy) kernel called with ``neuron`` tensors is
  offered to :func:`bridge` (``trnsim.kernels.hooks.add_call_bridge``).  The kernel reads the tensors' device
  payloads (views and non-contiguous tensors included), runs on simulated NeuronCores of the device's target, and
  its outputs come back as ``neuron`` tensors counted in the device's memory (the simulated OOM applies).  Writes
  into an input are copied back into that tensor and bump its autograd version counter.  The call is one operator
  on the device clock, ``nki::<kernel>``, whose profile row carries the kernel's own timeline (engines, DMA queues,
  kernel source lines; ``trnsim.profile_torch``).
* **Per-specialisation cache.**  As TorchNeuron compiles a kernel once per (input shapes, dtypes, non-tensor
  argument values), trnsim keeps per specialisation what compiling gives: the scheduled timeline of the kernel's
  instructions.  A hit runs the kernel for its numbers with instruction recording off and reuses the timeline (no
  new record, no scheduling); :func:`cache_info` (also ``torch.neuron.nki_cache_info()``) counts hits and misses.
  The kernel's Python body still runs on every call: in trnsim executing the body is how the numbers are made.
* **Custom operators.**  A ``torch.library.custom_op`` called with ``neuron`` tensors runs its implementation with
  the ``neuron`` tensors themselves (no CPU fallback), below autograd, so kernels inside it run on the device;
  the outputs are checked against the op's fake (``register_fake``): a disagreement names the op and the kernel
  line that made the output.
* **torch.compile.**  Under dynamo a kernel call becomes one node, ``trnsim_nki.kernel_call`` (a custom op whose
  fake runs the kernel shape-only to learn its outputs); dynamo does not trace the kernel body.  On ``neuron``
  tensors the node runs through the bridge; on CPU tensors (``NKI_SIMULATOR=1``, vLLM's CPU mode) it runs the
  kernel on the simulator and returns CPU tensors.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import threading

import numpy as np
import torch

from ..kernels import context, hooks, launch
from ..kernels.jit import _to_input, _to_output
from ..machine import Chip, NeuronCore, schedule
from ..memory import Tensor as _HbmTensor
from . import costs
from .device_state import STATE
from .memory import MEMORY

__all__ = ["install", "bridge", "cache_info", "cache_clear", "KernelLaunchRecord"]

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CACHE: dict = {}          # specialisation key -> _Compiled
_STATS = {"hits": 0, "misses": 0}
_local = threading.local()  # .made: {id(payload): (kernel name, "file:line")} of kernel outputs in the current op


class _Compiled:
    __slots__ = ("timeline", "ns", "flops", "nbytes")

    def __init__(self, timeline):
        self.timeline = timeline
        self.ns = float(timeline.total_ns)
        self.flops = float(sum(timeline.flops))
        self.nbytes = int(sum(timeline.hbm_bytes))


class KernelLaunchRecord:
    """One kernel call on the device as the profiler keeps it: the op row's index, the kernel's name, when its
    instructions start on the device clock (ns), its scheduled :class:`trnsim.machine.Timeline`, and whether the
    specialisation was a cache hit."""

    __slots__ = ("row", "name", "start_ns", "timeline", "hit")

    def __init__(self, row, name, start_ns, timeline, hit):
        self.row, self.name, self.start_ns, self.timeline, self.hit = row, name, start_ns, timeline, hit


def cache_info():
    """``{"hits", "misses", "entries"}`` of the per-specialisation kernel cache."""
    return {"hits": _STATS["hits"], "misses": _STATS["misses"], "entries": len(_CACHE)}


def cache_clear():
    _CACHE.clear()
    _STATS["hits"] = _STATS["misses"] = 0


def _is_neuron(x):
    from .tensor import DEVICE_TYPES
    return type(x) in DEVICE_TYPES


def _kernel_name(kernel):
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", "kernel")


def _user_line():
    """``file:line`` of the first frame outside trnsim and torch (the user's call)."""
    tdir = os.path.dirname(torch.__file__)
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG) and not fn.startswith(tdir) and not fn.startswith("<"):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return ""


def _return_line(kernel):
    """``file:line`` of the kernel's ``return`` statement (or its ``def``): the line that hands its outputs back."""
    fn = getattr(kernel, "fn", kernel)
    fn = inspect.unwrap(fn)
    try:
        file = inspect.getsourcefile(fn)
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(inspect.cleandoc("\n".join(lines)) if lines[0].startswith((" ", "\t")) else "".join(lines))
        rets = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return)]
        line = first + (max(rets) - 1 if rets else 0)
        return f"{file}:{line}"
    except (OSError, TypeError, SyntaxError, IndexError):
        code = getattr(fn, "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code else "?"


# -- the call bridge -------------------------------------------------------------------------------------------
def _scan(args, kwargs):
    """(has neuron tensor, a CPU tensor or None, has a tensor at all) over the flat arguments."""
    neuron = False
    cpu = None
    any_t = False
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            any_t = True
            if _is_neuron(a):
                neuron = True
            elif a.device.type == "cpu" and cpu is None:
                cpu = a
    return neuron, cpu, any_t


def bridge(kernel, args, kwargs):
    """``hooks`` call bridge: run ``kernel`` on the device when its arguments are ``neuron`` tensors; make it one
    graph node under dynamo; else ``NotImplemented`` (the kernel runs as on NumPy/torch CPU)."""
    if torch.compiler.is_compiling():
        if any(isinstance(a, torch.Tensor) for a in list(args) + list(kwargs.values())):
            return _traced_call(kernel, args, kwargs)
        return NotImplemented
    neuron, cpu, _ = _scan(args, kwargs)
    if not neuron:
        return NotImplemented
    if cpu is not None:
        from .tensor import DEVICE
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{DEVICE} and cpu! (when checking the arguments of NKI kernel "
                           f"{_kernel_name(kernel)}: a cpu tensor of shape {list(cpu.shape)})")
    return run_on_device(kernel, args, kwargs)


def _spec(x):
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), x.dtype)
    try:
        hash(x)
        return ("V", type(x).__name__, x)
    except TypeError:
        return ("V", type(x).__name__, repr(x))


def _fn_of(kernel):
    """The function a launch runs: a legacy kernel's body wraps arguments as v1 tiles."""
    body = getattr(kernel, "_body", None)
    return body()[0] if body is not None else kernel.fn


def _launch(kernel, payload_args, payload_kw, record):
    """Run one launch with the device's target; returns (outputs, cores, [(index or key, payload, NkiTensor)])."""
    tg = STATE.target
    grid = tuple(int(g) for g in kernel.grid) or (1,)
    nprog = 1
    for g in grid:
        nprog *= g
    chip = Chip(tg)
    cores = [NeuronCore(tg, execute=True, chip=chip, core_id=i, record=record) for i in range(nprog)]
    try:
        params = list(inspect.signature(kernel.fn).parameters)
    except (TypeError, ValueError):
        params = []
    ins = []
    wrapped = []
    for i, a in enumerate(payload_args):
        nm = params[i] if i < len(params) else f"arg{i}"
        if isinstance(a, torch.Tensor):
            t, _ = _to_input(cores[0], a.detach().clone(), nm)   # the kernel sees a copy: writes are detected
            ins.append((i, a, t))
            wrapped.append(t)
        else:
            wrapped.append(a)
    wkw = {}
    for k, v in payload_kw.items():
        if isinstance(v, torch.Tensor):
            t, _ = _to_input(cores[0], v.detach().clone(), k)
            ins.append((k, v, t))
            wkw[k] = t
        else:
            wkw[k] = v
    ctx = context.KernelContext(cores, grid)
    prev = context.push(ctx)
    try:
        out = launch.run_programs(_fn_of(kernel), wrapped, wkw, ctx, cores, kernel.options.get("strict_races"))
    finally:
        context.pop(prev)
    return out, cores, ins


def _bits_equal(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        # bitwise (NaN-safe): compare as integers of the same width
        it = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(it), b.contiguous().view(it))
    return torch.equal(a, b)


def run_on_device(kernel, args, kwargs):
    """Run ``kernel`` with ``neuron`` tensors: see the module docstring."""
    from .tensor import DEVICE_TYPES, wrap
    name = _kernel_name(kernel)
    pargs = [a._p if type(a) in DEVICE_TYPES else a for a in args]
    pkw = {k: (v._p if type(v) in DEVICE_TYPES else v) for k, v in kwargs.items()}
    key = (getattr(kernel, "fn", kernel), type(kernel).__name__, tuple(kernel.grid), STATE.target.name,
           tuple(_spec(a) for a in pargs), tuple(sorted((k, _spec(v)) for k, v in pkw.items())))
    try:
        compiled = _CACHE.get(key)
    except TypeError:           # an unhashable value inside a spec: no caching for this call
        key, compiled = None, None
    hit = compiled is not None
    out, cores, ins = _launch(kernel, pargs, pkw, record=not hit)
    if not hit:
        compiled = _Compiled(schedule(cores))
        if key is not None:
            _CACHE[key] = compiled
        _STATS["misses"] += 1
    else:
        _STATS["hits"] += 1
    # inputs the kernel wrote into: copied back into the caller's tensors (and their version counters bumped)
    by_buf = {}
    for where, payload, t in ins:
        by_buf[t.buf.id] = (where, payload)
        new = _to_output(t, "torch")
        if new is not None and not _bits_equal(new, payload):
            with torch.no_grad():
                payload.copy_(new)
            w = args[where] if isinstance(where, int) else kwargs[where]
            if type(w) in DEVICE_TYPES:
                torch.autograd.graph.increment_version(w)
    # outputs: the simulated OOM applies before anything is kept
    flat = out if isinstance(out, (tuple, list)) else (out,)
    need = 0
    for o in flat:
        if isinstance(o, _HbmTensor) and o.buf.id not in by_buf:
            need += int(np.prod(o.shape)) * o.dtype.itemsize
    if need:
        MEMORY.check(need)
    made = getattr(_local, "made", None)
    loc = None

    def convert(o):
        nonlocal loc
        if isinstance(o, _HbmTensor):
            src = by_buf.get(o.buf.id)
            if src is not None:           # the kernel returned an input (in place): the caller's tensor
                where = src[0]
                return args[where] if isinstance(where, int) else kwargs[where]
            w = wrap(_to_output(o, "torch"))
            if made is not None:
                loc = loc or _return_line(kernel)
                made[id(w._p)] = (name, loc)
            return w
        if isinstance(o, (tuple, list)):
            return type(o)(convert(x) for x in o)
        return o
    result = convert(out)
    _charge(name, compiled, hit, pargs, result)
    return result


def _charge(name, compiled, hit, pargs, result):
    launch_ns = costs.launch_ns(STATE.target)
    start = STATE.now_ns
    end = start + launch_ns + compiled.ns
    STATE.now_ns = end
    if not STATE.profilers:
        return
    ts = [a for a in pargs if isinstance(a, torch.Tensor)]
    shapes = tuple(tuple(t.shape) for t in ts)
    dtypes = tuple(str(t.dtype).replace("torch.", "") for t in ts)
    line = _user_line()
    for p in STATE.profilers:
        p.add(f"nki::{name}", shapes, dtypes, start, end, "native", compiled.nbytes, compiled.flops, line)
        add = getattr(p, "add_kernel", None)
        if add is not None:
            add(KernelLaunchRecord(len(p.rows) - 1, name, start + launch_ns, compiled.timeline, hit))


# -- custom operators on neuron tensors -------------------------------------------------------------------------
def _meta(x):
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(y) for y in x)
    return x


def _check_fake(opdef, args, kwargs, result):
    fake = getattr(opdef, "_abstract_fn", None)
    if fake is None:
        return
    try:
        want = fake(*_meta(tuple(args)), **{k: _meta(v) for k, v in kwargs.items()})
    except Exception:       # a fake that needs a fake-tensor context (data-dependent sizes): nothing to compare
        return
    got_l = result if isinstance(result, (tuple, list)) else (result,)
    want_l = want if isinstance(want, (tuple, list)) else (want,)
    made = getattr(_local, "made", None) or {}
    for i, (g, w) in enumerate(zip(got_l, want_l)):
        if not (isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor)):
            continue
        if tuple(g.shape) != tuple(w.shape) or g.dtype != w.dtype:
            p = getattr(g, "_p", g)
            kname, kline = made.get(id(p), (None, None))
            by = f" made by NKI kernel {kname} at {kline}" if kname else ""
            raise RuntimeError(
                f"custom op {opdef._qualname}: output {i} of its implementation{by} has shape {list(g.shape)} and "
                f"dtype {g.dtype}, but the op's fake (register_fake) says shape {list(w.shape)} and dtype {w.dtype}."
                f" Make the kernel's output and the fake agree.")


def _custom_op_rule(opdef):
    def rule(cls, func, types, args, kwargs):
        impl = opdef._backend_fns.get("neuron") or opdef._backend_fns.get(None)
        if impl is None:
            # no implementation for the device or for every device: the device's usual behaviour (CPU fallback)
            from .tensor import NeuronTensor
            return NeuronTensor.__torch_dispatch__.__func__(NeuronTensor, func, types, args, kwargs)
        prev = getattr(_local, "made", None)
        _local.made = {}
        try:
            out = impl(*args, **kwargs)
            _check_fake(opdef, args, kwargs, out)
        finally:
            _local.made = prev
        return out
    return rule


def _find_rule_patch():
    """Version-guarded private patch: ``torch._library.simple_registry.find_torch_dispatch_rule`` (which the
    dispatcher consults before a tensor subclass's ``__torch_dispatch__``) also answers, for ``NeuronTensor`` and
    any ``torch.library.custom_op`` op without an explicit rule, with :func:`_custom_op_rule`: the op's own
    implementation runs with the ``neuron`` tensors (no CPU fallback)."""
    from torch._library import custom_ops, simple_registry
    from . import patches
    from .tensor import DEVICE_TYPES, NeuronTensor
    orig = getattr(simple_registry, "find_torch_dispatch_rule", None)
    if orig is None or not hasattr(custom_ops, "OPDEFS"):
        import warnings
        warnings.warn(f"torch {torch.__version__}: torch._library has no find_torch_dispatch_rule/OPDEFS; custom "
                      "ops on neuron tensors take the CPU fallback", RuntimeWarning, stacklevel=2)
        return
    if getattr(orig, "_trnsim_orig", None) is not None:
        return
    patches.APPLIED.append("find_torch_dispatch_rule (nki_bridge)")
    rules = {}
    # ids of the OpOverloads of torch's own namespaces, which are never custom ops: the dispatcher asks for every
    # op on a neuron tensor, and the OPDEFS lookup (a WeakValueDictionary) would cost on each (the overloads live
    # as long as torch.ops, so their ids are stable)
    builtin = set()
    builtin_ns = frozenset(("aten", "prims", "_c10d_functional", "c10d"))
    # id of such an op -> the ``find`` of its rules holder (``simple_registry.singleton`` makes one holder per op
    # name and keeps it, and a rule registered later goes into that holder): ``orig(op, NeuronTensor)`` without
    # the name lookup, for the ops the device sees most
    holder_find = {}

    def find_torch_dispatch_rule(op, torch_dispatch_class):
        if torch_dispatch_class is NeuronTensor:
            f = holder_find.get(id(op))
            if f is not None:
                return f(NeuronTensor)
        r = orig(op, torch_dispatch_class)
        if r is not None or torch_dispatch_class not in DEVICE_TYPES or id(op) in builtin:
            return r
        if torch_dispatch_class is not NeuronTensor:
            # a device class (a Parameter subclass on neuron, backend.params) follows NeuronTensor's rules
            r = orig(op, NeuronTensor)
            if r is not None:
                return r
        if torch_dispatch_class is NeuronTensor and getattr(op, "namespace", None) in builtin_ns:
            builtin.add(id(op))
            holder_find[id(op)] = simple_registry.singleton.find(op.__qualname__).torch_dispatch_rules.find
            return None
        q = getattr(op, "__qualname__", None)
        opdef = custom_ops.OPDEFS.get(q) if q else None
        if opdef is None:
            return None
        rule = rules.get(q)
        if rule is None or rule[0] is not opdef:
            rule = rules[q] = (opdef, _custom_op_rule(opdef))
        return rule[1]
    find_torch_dispatch_rule._trnsim_orig = orig
    simple_registry.find_torch_dispatch_rule = find_torch_dispatch_rule


# -- torch.compile: a kernel call as one graph node --------------------------------------------------------------
_CALLS: dict = {}        # key -> (kernel, arg spec, kw spec, out meta, single)


def _register_call(kernel, spec, kwspec):
    """At trace time (dynamo runs this for real and keeps the result as a constant): remember the call's kernel
    and non-tensor arguments, learn its outputs by a shape-only run, and return ``(key, single output)``."""
    key = f"{_kernel_name(kernel)}#{len(_CALLS)}"
    for k, v in _CALLS.items():
        if v[0] is kernel and v[1] == spec and v[2] == kwspec:
            return k, v[4]
    meta, single = _shape_only_outputs(kernel, spec, kwspec)
    _CALLS[key] = (kernel, spec, kwspec, meta, single)
    return key, single


# torch._dynamo.assume_constant_result without importing dynamo here (importing it costs about a second)
_register_call._dynamo_marked_constant = True


def _shape_only_outputs(kernel, spec, kwspec):
    """The kernel's outputs for inputs of the traced shapes and dtypes, from a shape-only run (no data)."""
    from .charging import kdtype
    tg = STATE.target
    grid = tuple(int(g) for g in kernel.grid) or (1,)
    nprog = int(np.prod(grid))
    chip = Chip(tg)
    cores = [NeuronCore(tg, execute=False, chip=chip, core_id=i, record=False) for i in range(nprog)]

    def inp(s, name):
        if s[0] == "T":
            arr = np.empty(s[2], dtype=_np_dtype(kdtype(s[3]) if s[3] not in _EXACT else _EXACT[s[3]]))
            return _to_input(cores[0], arr, name)[0]
        return s[1]
    a = [inp(s, f"arg{i}") for i, s in enumerate(spec)]
    kw = {k: inp(s, k) for k, s in kwspec}
    ctx = context.KernelContext(cores, grid)
    prev = context.push(ctx)
    try:
        out = launch.run_programs(_fn_of(kernel), a, kw, ctx, cores, kernel.options.get("strict_races"))
    finally:
        context.pop(prev)
    single = not isinstance(out, (tuple, list))
    meta = []
    for o in ((out,) if single else out):
        if not isinstance(o, _HbmTensor):
            raise TypeError(f"NKI kernel {_kernel_name(kernel)} inside torch.compile: it returned {type(o).__name__};"
                            " only kernels returning tensors (or a tuple of them) can be graph nodes")
        meta.append((tuple(o.shape), _TORCH_DTYPE[o.dtype.name]))
    return tuple(meta), single


def _np_dtype(name):
    from ..memory import dtype_of
    return dtype_of(name).np


_EXACT = {torch.int32: "int32", torch.int64: "int32", torch.bool: "uint8"}
_TORCH_DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int8": torch.int8,
                "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32, "uint16": torch.uint16,
                "uint32": torch.uint32, "float64": torch.float64, "int64": torch.int64}


def _spec_for_trace(args, kwargs, tensors=None):
    """(arg spec, kwarg spec) of a call: ``("T", index, shape, dtype)`` per tensor (appended to ``tensors``),
    ``("V", value)`` per other value."""
    tensors = [] if tensors is None else tensors
    spec = []
    for a in args:
        if isinstance(a, torch.Tensor):
            spec.append(("T", len(tensors), tuple(a.shape), a.dtype))
            tensors.append(a)
        else:
            spec.append(("V", a))
    kwspec = []
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            kwspec.append((k, ("T", len(tensors), tuple(v.shape), v.dtype)))
            tensors.append(v)
        else:
            kwspec.append((k, ("V", v)))
    return tuple(spec), tuple(kwspec)


def _traced_call(kernel, args, kwargs):
    tensors = []
    spec, kwspec = _spec_for_trace(args, kwargs, tensors)
    key, single = _register_call(kernel, spec, kwspec)
    outs = torch.ops.trnsim_nki.kernel_call(key, tensors)
    return outs[0] if single else tuple(outs)


def _call_args(key, tensors):
    kernel, spec, kwspec = _CALLS[key][:3]

    def val(s):
        return tensors[s[1]] if s[0] == "T" else s[1]
    return kernel, [val(s) for s in spec], {k: val(s) for k, s in kwspec}


def _unknown_key(key):
    raise RuntimeError(f"trnsim_nki::kernel_call: no kernel call {key!r} was traced in this process (the graph "
                       "was made in another process or the registry was cleared); re-trace the function")


def _kernel_call_cpu(key: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    if key not in _CALLS:
        _unknown_key(key)
    kernel, a, kw = _call_args(key, tensors)
    out = kernel.run(*a, **kw).outputs
    flat = [out] if not isinstance(out, (tuple, list)) else list(out)
    return [o.clone() if any(o is t for t in tensors) else o for o in flat]


def _kernel_call_fake(key, tensors):
    if key not in _CALLS:
        _unknown_key(key)
    meta = _CALLS[key][3]
    dev = tensors[0].device if tensors else torch.device("cpu")
    return [torch.empty(s, dtype=d, device=dev) for s, d in meta]


def _kernel_call_rule(cls, func, types, args, kwargs):
    key, tensors = args[0], args[1]
    if key not in _CALLS:
        _unknown_key(key)
    kernel, a, kw = _call_args(key, tensors)
    out = run_on_device(kernel, a, kw)
    flat = [out] if not isinstance(out, (tuple, list)) else list(out)
    return [o.clone() if any(o is t for t in tensors) else o for o in flat]


_KERNEL_CALL = None


def _define_kernel_call():
    global _KERNEL_CALL
    if _KERNEL_CALL is not None:
        return _KERNEL_CALL
    op = torch.library.custom_op("trnsim_nki::kernel_call", _kernel_call_cpu, mutates_args=())
    op.register_fake(_kernel_call_fake)
    _KERNEL_CALL = op
    return op


def install_cpu():
    """The compile path for CPU tensors (no device needed): ``trnsim_nki::kernel_call`` and the call bridge."""
    _define_kernel_call()
    hooks.add_call_bridge(bridge)


def install(device_module=None):
    """Called by ``backend.register()``: the call bridge, the custom-op rule, the compile node, and
    ``torch.neuron.nki_cache_info``."""
    from .tensor import NeuronTensor
    _find_rule_patch()
    op = _define_kernel_call()
    op.register_torch_dispatch(NeuronTensor, _kernel_call_rule)
    hooks.add_call_bridge(bridge)
    if device_module is not None:
        device_module.nki_cache_info = cache_info
        device_module.nki_cache_clear = cache_clear


def auto_functionalized_on_device(tensor_type):
    """For compiled graphs (called by ``compile._ensure_patched``): a mutating custom op in an AOTAutograd graph is
    wrapped in the ``auto_functionalized`` higher-order ops; on device tensors they run their dense implementation
    (clone the mutated bases, call the op, return the clones).

    Version-guarded private patch (torch 2.13): AOTAutograd's first-call ``_AnalyzeCustomOpInputOutputMode`` answers
    these higher-order ops with NotImplemented, which makes the graph's call return NotImplemented; under that mode
    they are run as without it."""
    from torch._higher_order_ops import auto_functionalize as af
    try:
        from torch._functorch._aot_autograd.runtime_wrappers import _AnalyzeCustomOpInputOutputMode as analyze
    except ImportError:
        analyze = None
    for hop, dense in ((af.auto_functionalized, af.auto_functionalized_dense),
                       (af.auto_functionalized_v2, af.auto_functionalized_v2_dense)):
        if tensor_type not in hop.python_key_table:
            hop.py_impl(tensor_type)(dense)
        if analyze is not None and analyze not in hop.python_key_table:
            hop.py_impl(analyze)(lambda mode, *args, _hop=hop, **kwargs: _hop(*args, **kwargs))
