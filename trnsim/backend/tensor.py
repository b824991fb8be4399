"""The ``neuron`` tensor: a wrapper subclass on a ``neuron`` device whose data is a plain CPU tensor (the payload).

Every aten op that reaches ``__torch_dispatch__`` is unwrapped, run on the payloads (natively, with the device's
numerics, or as a counted CPU fallback), charged simulated time, and rewrapped.  An output that is an input's
payload comes back as that input's wrapper, which covers in-place ops and ``out=``.

Device indices: every wrapper is ``neuron:0`` to C++ (torch's Python device guard reports one device, so its
autograd engine has one device queue and would refuse any other index); the index Python sees (``t.device``,
``t.get_device()``) is the wrapper's ``_dev``: the class default (the process's home device, which
``torch.neuron.set_device`` moves while no device tensor is alive) or, for a tensor on another index, its own.
Once a process holds tensors on two indices (``MULTI``), ops take the slow path, which puts results on their
inputs' index and refuses inputs on different indices, as CUDA does (``device_index.py``, with ``Tensor.to``).
A factory or a host tensor's ``.to()`` asking for ``neuron:0`` is indistinguishable from torch's own requests for a
wrapper's C++ device, so it means the current device (select ``neuron:0`` with ``torch.neuron.device(0)`` in a
process whose current device is another); a device tensor's ``.to("neuron:i")`` (parsed in Python; under autograd
its gradient goes back to the source index) and requests naming another index are exact.
"""

from __future__ import annotations

import copy
import threading
import warnings
from collections import OrderedDict

import torch
import torch.autograd.forward_ad as _fwad

from . import charge_memo, charging
from .accumulate import _accumulate_fp32, _is_low, _written
from .device_state import STATE
from .errors import NeuronFallbackError, NeuronFallbackWarning
from .host_threads import is_serial, serial
from .memory import MEMORY
from .native_impls import IMPLS as NATIVE_IMPLS
from .op_table import ACCUMULATING, TABLE, TRANSFER
from .rng import generator_overload, native_dropout
from .tensor_attrs import _HIDDEN, _REAL_DICT, _Attrs, _get_dict, _set_dict  # noqa: F401  (_HIDDEN, _Attrs: params.py)

DEVICE = torch.device("privateuseone", 0)   # replaced by torch.device("neuron", 0) at registration
CURRENT = DEVICE    # the current device (torch.neuron.set_device); the home device while MULTI is False
MULTI = False       # some tensor is on an index other than the home device (see the module text)
dispatch_multi = None   # device_index.dispatch_multi (the slow path's device rules while MULTI), set at registration
_make = torch.Tensor._make_wrapper_subclass


class NeuronTensor(torch.Tensor):
    """A tensor on the simulated ``neuron`` device."""

    __torch_function__ = torch._C._disabled_torch_function_impl
    _dev = DEVICE         # the device Python sees (the module text)
    __dict__ = property(_get_dict, _set_dict, doc="The tensor's attributes (without the wrapper's own, _HIDDEN).")

    @staticmethod
    def __new__(cls, payload):
        return wrap(payload)

    @property
    def device(self):
        return self._dev

    def get_device(self):
        return self._dev.index

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        try:
            ew = _EWOPS.get(id(func), _UNSEEN)
            if ew is _UNSEEN:
                ew = _ew_entry(func)
            if ew is not None and not kwargs and FAST_PATH and not STATE.profilers and not MULTI:
                name, fn, costs = ew
                # fast path: an elementwise op on wrappers and Python scalars (the per-op overhead is most of a
                # small op's wall time; this is dispatch() below for that case, without its generality)
                if len(args) == 2:          # binary ops, unrolled (most calls)
                    a0, a1 = args
                    if a0.__class__ is NeuronTensor:
                        u0 = a0._p
                    elif a0.__class__ in _SCALARS:
                        u0 = a0
                    else:
                        return dispatch(func, args, {})
                    if a1.__class__ is NeuronTensor:
                        u1 = a1._p
                    elif a1.__class__ in _SCALARS:
                        u1 = a1
                    else:
                        return dispatch(func, args, {})
                    ua = (u0, u1)
                    out = fn(u0, u1) if not _tf_modes() else func._op(u0, u1)
                    if out is u0:
                        found = a0
                    elif out is u1:
                        found = a1
                    else:
                        found = None
                else:
                    ua = []
                    for a in args:
                        if a.__class__ is NeuronTensor:
                            ua.append(a._p)
                        elif a.__class__ in _SCALARS:
                            ua.append(a)
                        else:
                            return dispatch(func, args, {})
                    # torch's binding would re-enter an active TorchFunctionMode (torch.device(...) as a context,
                    # set_default_device): then call the OpOverload, which does not
                    out = fn(*ua) if not _tf_modes() else func._op(*ua)
                    found = None
                    for a, u in zip(args, ua):
                        if u is out:
                            found = a
                            break
                if out.__class__ is _TENSOR:
                    if found is None:
                        return _fresh_result(name, costs, ua, out)
                    STATE.now_ns += _memo_charge(name, costs, ua, out)[0]
                    return found
                ns, kind, flops, nbytes = charging.op_time(name, TABLE[name], ua, out)
                if ns:
                    charging.advance(name, ns, kind, flops, nbytes, ua, out)
                return _rewrap_flat(out, args, ua)
            if FAST_PATH and not MULTI and not STATE.profilers:
                if not kwargs:
                    view = _VIEWS.get(id(func))
                    if view is not None:
                        out = _view(view, args)
                        if out is not None:
                            return out
                elif func is _TO_COPY and len(kwargs) == 1 and "dtype" in kwargs and len(args) == 1 \
                        and args[0].__class__ is NeuronTensor:
                    # a dtype conversion on the device (x.float(), x.to(torch.bfloat16)): dispatch()'s charge (the
                    # elementwise memo of the "copy" category) and a fresh wrapper, without its generality
                    p = args[0]._p
                    out = _TO_COPY_SERIAL(p, dtype=kwargs["dtype"])
                    STATE.now_ns += _fast_charge("_to_copy", (p,), out)
                    return wrap(out)
            return dispatch(func, args, kwargs or {})
        except Exception as e:
            if not _in_autograd_engine():
                raise
            # inside autograd's engine an exception out of here aborts the process (torch 2.13): record it for
            # backward()/grad() to raise on the caller, and hand autograd a placeholder of the right shape
            PENDING.append(e)
            return _placeholder(func, args, kwargs or {}, e)

    # -- Python-level behaviour a device tensor needs ------------------------------------------------
    def __repr__(self, *, tensor_contents=None):
        p = self._p
        body = repr(p)
        if body.endswith(")"):
            body = body[:-1] + f", device='{self.device}')"
        return body

    def __format__(self, spec):
        if self.dim() == 0:
            return self._p.__format__(spec)
        return object.__format__(self, spec)

    def tolist(self):
        return self._p.tolist()

    def numpy(self, *, force=False):
        if force:
            return self._p.detach().numpy(force=True)
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")

    def data_ptr(self):
        return self._p.data_ptr()

    def untyped_storage(self):
        # the payload's storage (counted as device memory, so its ``.device`` is neuron:0): libraries that test
        # aliasing by storage pointer see views share one storage, as on CUDA
        return self._p.untyped_storage()

    def __reduce_ex__(self, proto):
        # torch.save: the ordinary tensor rebuild on the payload's storage, which torch tags "neuron:0" (its device);
        # torch.load then restores it through ``storage.to("neuron")`` unless map_location says otherwise, and
        # ``weights_only=True`` allows it (only torch._utils rebuild functions are named in the pickle)
        if self.requires_grad and not self.is_leaf:
            raise RuntimeError("Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
                               "does not support crossing process boundaries.  If you just want to transfer the "
                               "data, call detach() on the tensor before serializing (e.g., putting it on the "
                               "queue).")
        if _REAL_DICT.__get__(self).get("_is_param"):
            return (torch._utils._rebuild_parameter, (_plain(self), self.requires_grad, OrderedDict()))
        p = self._p
        if p.is_conj() or p.is_neg():
            p = p.resolve_conj().resolve_neg()
        st = p.untyped_storage()
        MEMORY.track(st)
        storage = torch.storage.TypedStorage(wrap_storage=st, dtype=self.dtype, _internal=True)
        return (torch._utils._rebuild_tensor_v2,
                (storage, p.storage_offset(), tuple(p.size()), p.stride(), self.requires_grad, OrderedDict()))

    def __deepcopy__(self, memo):
        # the payload is deep-copied with the same memo, so wrappers sharing a storage share one new storage (ties
        # and views kept), and no storage is shared with the original
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        with torch.no_grad():
            new = wrap(copy.deepcopy(self._p, memo))
            if self.requires_grad:
                new.requires_grad_()
            if self.grad is not None:
                new.grad = copy.deepcopy(self.grad, memo)
        state = {k: v for k, v in _REAL_DICT.__get__(self).items() if k != "_p"}
        if state:
            new.__dict__.update(copy.deepcopy(state, memo))
        memo[id(self)] = new
        return new

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        return self

    @property
    def data(self):
        return _TB_DATA.__get__(self)

    @data.setter
    def data(self, value):
        from .params import set_data
        set_data(self, value)


def _place(t, dev):
    """Put the wrapper ``t`` on ``dev`` (another index than the home device makes the process MULTI)."""
    global MULTI
    if dev != NeuronTensor._dev:
        t._dev = dev
        MULTI = True
    elif "_dev" in _REAL_DICT.__get__(t):
        del t._dev


_TB_DATA = torch._C.TensorBase.data
# The classes whose instances are neuron tensors: NeuronTensor, and for each nn.Parameter subclass that reached the
# device (bitsandbytes' Int8Params, ...) its device class (params.device_class): hot paths test ``x.__class__ is
# NeuronTensor`` first and this set only after.
DEVICE_TYPES = {NeuronTensor}


def on_device(x):
    """Whether ``x`` is a neuron tensor (a NeuronTensor or a Parameter subclass's device class)."""
    return x.__class__ in DEVICE_TYPES


def _plain(t):
    """``t`` as a wrapper without Parameter-ness, sharing its payload (for pickling a Parameter's data)."""
    w = wrap(t._p)
    return w


def wrap(p, dev=None, cls=NeuronTensor):
    """A wrapper of class ``cls`` (NeuronTensor or a device class, see ``DEVICE_TYPES``) around payload ``p``, on
    ``dev`` (default: the current device)."""
    if p.layout is not _STRIDED:
        _unsupported_layout(p)
    t = _make(cls, p.size(), p.stride(), p.storage_offset(), None, p.dtype, device=DEVICE,
              storage_size=_WRAPPER_STORAGE)
    t._p = p
    if dev is not None or MULTI:
        _place(t, dev if dev is not None else CURRENT)
    if p.is_conj():
        torch._C._set_conj(t, True)
    if p.is_neg():
        torch._C._set_neg(t, True)
    st = p.untyped_storage()
    if id(st) not in _LIVE:
        MEMORY.track(st)
    return t


_STRIDED = torch.strided
# The wrapper's own storage holds no data (an "invalid python storage"): only its size is checked, when an in-place
# op (set_, resize_, as_strided_) gives the wrapper the payload's new metadata.  1 PiB: larger than any simulated HBM.
_WRAPPER_STORAGE = 1 << 50
_LIVE = MEMORY._live
_track = MEMORY.track
_track_new = MEMORY.track_new


def _unsupported_layout(p):
    raise NotImplementedError(
        f"the neuron device holds only dense (strided) tensors; an op produced a {p.layout} tensor. Sparse "
        "tensors (for example the gradient of nn.Embedding(sparse=True) or nn.EmbeddingBag(sparse=True)) are not "
        "supported: use sparse=False")


class _Ctx:
    __slots__ = ("map", "cpu", "neuron")

    def __init__(self):
        self.map = {}
        self.cpu = None
        self.neuron = False


def _unwrap(x, ctx):
    if x.__class__ in DEVICE_TYPES:
        p = x._p
        ctx.map[id(p)] = x
        ctx.neuron = True
        return p
    if isinstance(x, torch.Tensor):
        ctx.map[id(x)] = x
        if x.dim() > 0 and x.device.type == "cpu":
            ctx.cpu = x
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(y, ctx) for y in x) if x else x
    return x


_CPU = torch.device("cpu")
_META = torch.device("meta")
_SCALARS = {int, float, bool, type(None), str, torch.dtype, torch.memory_format, torch.layout}


def _rewrap(o, ctx):
    if isinstance(o, torch.Tensor):
        w = ctx.map.get(id(o))
        if w is not None:
            return w
        return wrap(o)
    if isinstance(o, (list, tuple)):
        return type(o)(_rewrap(y, ctx) for y in o)
    return o


ENGINE = threading.local()     # ENGINE.depth: backward()/grad() calls running on this thread (patches.py)


def _in_autograd_engine():
    """True inside autograd's engine: on the thread that called backward()/grad() while it runs (the device's
    backward runs there, patches.py), or on an autograd device thread of a backward another thread started."""
    return getattr(ENGINE, "depth", 0) > 0 or threading.current_thread().__class__ is threading._DummyThread


PENDING = []   # errors raised inside autograd's engine, re-raised when backward returns (see patches.py)


def _raise(exc):
    """Raise ``exc``, or inside autograd's engine (where an exception out of __torch_dispatch__ aborts the process
    on torch 2.13) record it for ``backward``/``grad`` to raise when they return."""
    if _in_autograd_engine():
        PENDING.append(exc)
        return
    raise exc


def _sync_meta(w):
    """After an in-place view op (``squeeze_``, ``t_``, ``as_strided_``...) changed the payload's shape, give the
    wrapper the same sizes, strides and offset (its metadata is its own, set at creation)."""
    p = w._p
    if w.shape != p.shape or w.stride() != p.stride() or w.storage_offset() != p.storage_offset():
        from torch.utils._mode_utils import no_dispatch
        with no_dispatch():
            torch.ops.aten.as_strided_.default(w, p.size(), p.stride(), p.storage_offset())


def _placeholder(func, args, kwargs, exc):
    """Zeros shaped like ``func``'s result (found by running it on the meta device), so that a backward whose op
    failed inside autograd's engine unwinds normally; the recorded error is raised when backward returns."""
    def to_meta(x):
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return x
    try:
        m_args, m_kwargs = torch.utils._pytree.tree_map(to_meta, (args, kwargs))
        m_out = func(*m_args, **m_kwargs)
    except Exception:
        raise exc from None
    return torch.utils._pytree.tree_map(
        lambda t: wrap(torch.zeros(t.shape, dtype=t.dtype)) if isinstance(t, torch.Tensor) else t, m_out)


def _cross_device(func, ctx):
    _raise(RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                       f"{DEVICE} and cpu! (when checking argument for {func._schema.name}, "
                       f"a cpu tensor of shape {list(ctx.cpu.shape)})"))


def _device_kw(kwargs, uargs=()):
    """Rewrite a ``device=`` kwarg: neuron -> cpu (outputs wrapped), or -> meta when a payload among ``uargs`` is a
    meta tensor (a shape-only run with meta payloads, ``shape_only.meta_payloads``); returns whether outputs stay
    on the host."""
    d = kwargs.get("device")
    if d is None:
        return False
    d = torch.device(d) if not isinstance(d, torch.device) else d
    if d.type == DEVICE.type:
        kwargs["device"] = _META if any(a.__class__ is _TENSOR and a.is_meta for a in uargs) else _CPU
        return False
    return True


def _sync_written(func, args, kwargs):
    """An op that wrote an argument may have resized it (``out=`` of the wrong size): give its wrapper the payload's
    sizes and strides, and account the storage's new size."""
    for i, name, kwarg_only in _written(func):
        w = kwargs.get(name) if name in kwargs else (args[i] if not kwarg_only and i < len(args) else None)
        if w.__class__ in DEVICE_TYPES and w.shape != w._p.shape:
            _sync_meta(w)
            MEMORY.resized(w._p.untyped_storage())


_GEN_CACHE = {}


def _generator_index(func):
    idx = _GEN_CACHE.get(func)
    if idx is None:
        idx = -1
        for i, a in enumerate(func._schema.arguments):
            if a.name == "generator":
                idx = i
                break
        _GEN_CACHE[func] = idx
    return idx


_EW = {"copy", "unary", "binary"}
_FAST = {}   # (op, numel, dtype) -> charge of a single-output elementwise op (dispatch())
_FAST_OPS = []   # the fast path's per-op memos {dtype: {numel: (ns, result bytes)}} (cleared with _FAST: clear_charges)
_TENSOR = torch.Tensor


def _memo_charge(name, costs, ua, out):
    """``(ns, result bytes)`` of an elementwise op's result ``out``, memoised per op (``costs``), dtype, then numel
    (no tuple built per call)."""
    by_numel = costs.get(out.dtype)
    if by_numel is None:
        by_numel = costs[out.dtype] = {}
    n = out.numel()
    r = by_numel.get(n)
    if r is None:
        r = by_numel[n] = (_fast_charge(name, ua, out), n * out.element_size())
    return r


def _fresh_result(name, costs, ua, out):
    """Charge an elementwise op whose result ``out`` is a fresh dense CPU tensor (never an input, a conj or a neg
    view) and wrap it: ``wrap()`` without those checks, the storage tracked with its memoised byte count.  Shared by
    ``__torch_dispatch__``'s fast path and the dispatcher-free operators (``operators.py``)."""
    r = _memo_charge(name, costs, ua, out)
    STATE.now_ns += r[0]
    t = _make(NeuronTensor, out.size(), out.stride(), out.storage_offset(), None, out.dtype,
              device=DEVICE, storage_size=_WRAPPER_STORAGE)
    t._p = out
    st = out.untyped_storage()
    if id(st) not in _LIVE:
        if st.nbytes() == r[1]:     # a storage of its own (the usual case): bytes known
            _track_new(st, r[1])
        else:
            _track(st)
    return t


def _fast_charge(name, ua, out):
    """The simulated ns of a single-output elementwise op; the same memo as dispatch()'s (``_FAST``)."""
    key = (name, out.numel(), out.dtype)
    r = _FAST.get(key)
    if r is None:
        r = _FAST[key] = charging.op_time(name, TABLE[name], ua, out)
    return r[0]


def clear_charges():
    """Forget every memoised charge (the target or the cost model changed)."""
    _FAST.clear()
    for d in _FAST_OPS:
        d.clear()
    charge_memo.clear()


_INFO = {}   # OpOverload -> (name, category, is a transfer op, accumulates in fp32)
# The namespaces whose op names the op table holds (aten, the c10d functional collectives distributed.py adds, and
# trnsim's own attention ops, window_attention.py); an op of any other namespace (a library's torch.library op) runs
# as a CPU fallback named "namespace::op".
_TABLE_NAMESPACES = frozenset(("aten", "_c10d_functional", "trnsim_attn"))
_DEVICE_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
_KERNEL_FOR_DEVICE = set()   # ids of the library ops whose PrivateUse1 kernel the device runs (see _info)
_DECOMPOSE = set()           # ids of the aten ops run as their CompositeImplicitAutograd decomposition (see _info)


def _ew_entry(func):
    """``(aten name, callable)`` if the fast path of ``__torch_dispatch__`` may take ``func`` (an elementwise op with
    no special handling), else None; remembered in ``_EWOPS``, keyed by id (OpOverload's ``__hash__`` is Python code;
    the overload objects live as long as torch.ops, and ``_KEEP`` holds them too).

    The callable is torch's Python binding of the same op (``torch.add``, ``Tensor.add_``) for the ``default`` and
    ``Tensor`` overloads whose arguments before the keyword-only ones are all tensors (so the binding can only pick
    that overload): it is about 0.5 us faster per call than the OpOverload.  Otherwise the OpOverload itself."""
    name = func._opname
    cat = TABLE.get(name) if func.namespace in _TABLE_NAMESPACES else None   # a custom op may share an aten name
    schema = func._schema
    ok = (cat in _EW and name != "native_dropout" and name not in ACCUMULATING and name not in TRANSFER
          and not any(a.kwarg_only and a.name == "device" for a in schema.arguments))
    entry = None
    if ok:
        fn = func._op
        positional = [a for a in schema.arguments if not a.kwarg_only]
        if (func._overloadname in ("default", "Tensor") and positional
                and all(str(a.type) == "Tensor" for a in positional)):
            bound = getattr(torch._C._VariableFunctions, name, None) or getattr(torch._C.TensorBase, name, None)
            if bound is not None:
                fn = bound
        entry = (name, serial(fn) if is_serial(name, cat) else fn, {})   # (host_threads.py)
        _FAST_OPS.append(entry[2])
    _KEEP.append(func)
    _EWOPS[id(func)] = entry
    return entry


_tf_modes = torch._C._len_torch_function_stack
_TO_COPY = torch.ops.aten._to_copy.default
_TO_COPY_SERIAL = serial(_TO_COPY._op)
# The elementwise fast path of __torch_dispatch__; False sends every op through dispatch() (tests that plant a wrong
# kernel there, and comparisons of the two paths, turn it off).
FAST_PATH = True
_UNSEEN = object()
_KEEP = []
_EWOPS = {}


def _rewrap_flat(out, args, ua):
    ctx = _Ctx()
    for a, u in zip(args, ua):
        if type(a) is NeuronTensor:
            ctx.map[id(u)] = a
    return _rewrap(out, ctx)


def _info(func):
    """The op's dispatch plan, built once per OpOverload and kept in ``_INFO`` (keyed by id; ``_KEEP`` holds the
    overload): ``(name, category, is a transfer op, accumulates in fp32, the argument check to run first or None,
    the arguments it writes (``_written``), its generator argument's position or -1, the device's own
    implementation or None, the callable that runs it on payloads)``.  Everything here is a function of the op alone,
    so ``_dispatch`` does per call only what depends on the arguments."""
    name = func._opname
    _KEEP.append(func)
    if func.namespace not in _TABLE_NAMESPACES:
        # a torch.library op (bitsandbytes::gemm_4bit, ...): the kernel a PrivateUse1 device gets from the dispatcher
        # (its own, or a CompositeExplicitAutograd "default" kernel) runs on the neuron tensors, its aten ops native
        # as on a real device (listed in _KERNEL_FOR_DEVICE); with only other devices' kernels, a CPU fallback named
        # "namespace::op".  (A CPU kernel may assume a CPU-only layout: bitsandbytes' gemv_4bit on CPU expects its
        # weights repacked for AVX512, so the device must not borrow it when a generic kernel exists.)
        qual = f"{func.namespace}::{name}"
        if torch._C._dispatch_has_computed_kernel_for_dispatch_key(func.name(), "PrivateUse1"):
            _KERNEL_FOR_DEVICE.add(id(func))
        r = _INFO[id(func)] = (qual, None, False, False, None, _written(func), -1, None, func._op)
        return r
    cat = TABLE.get(name)
    if cat is None and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        # an aten op that is a composition of others (``aten::to``, ``__and__``): the dispatcher decomposes it before
        # any backend sees it, except under the Python dispatcher (a torch.library kernel run by dynamo's
        # ``func_no_dynamo``, as bitsandbytes' are); then it runs as its decomposition, whose ops the device runs
        _DECOMPOSE.add(id(func))
    check = _CHECKS.get(name)
    gen = _generator_index(func) if cat == "random" else -1
    runner = func._op
    if cat == "random" and gen < 0:
        twin = generator_overload(func)      # rand_like & co.: their twin taking the device generator (rng.py)
        if twin is not None:
            gen, runner = _generator_index(twin), twin._op
    if is_serial(name, cat):
        runner = serial(runner)             # its numerics on one host thread (host_threads.py)
    impl = _native_dropout if name == "native_dropout" else NATIVE_IMPLS.get(name)
    # the name charged and profiled: trnsim's own ops keep their namespace (an aten op's is added by the profiler)
    shown = name if func.namespace != "trnsim_attn" else f"trnsim_attn::{name}"
    r = _INFO[id(func)] = (shown, cat, name in TRANSFER, name in ACCUMULATING, check, _written(func), gen, impl,
                           runner)
    if cat == "view" and name[-1] != "_" and check is None and not r[5]:
        _VIEWS[id(func)] = runner
    return r


# id(OpOverload) -> its callable, for the view ops ``_view`` may run (not in-place, no argument written or checked;
# filled by ``_info`` on an op's first dispatch)
_VIEWS = {}


def _view(call, args):
    """A view op (``t``, ``view``, ``detach``, ``expand``...) of one wrapper with sizes, dims or scalars, as
    ``_dispatch`` runs it without its generality: the op on the payload, no charge (a view moves no data:
    ``charging.op_time`` gives 0 for the category) and the result wrapped (the input's own wrapper if the op returned
    the payload).  None when another argument is not a scalar or a list of ints (``_dispatch`` then runs it)."""
    a0 = args[0]
    if a0.__class__ is not NeuronTensor:
        return None
    for a in args[1:]:
        c = a.__class__
        if c not in _SCALARS and not ((c is list or c is tuple) and _all_ints(a)):
            return None
    p = a0._p
    out = call(p, *args[1:])
    if out.__class__ is _TENSOR:
        return a0 if out is p else wrap(out)
    return _rewrap_flat(out, args, (p,) + tuple(args[1:]))


_SPARSE_GRAD_OPS = ("embedding", "_embedding_bag", "_embedding_bag_forward_only")


def _check_sparse_grad(func, name, args, kwargs):
    """``nn.Embedding(sparse=True)`` / ``EmbeddingBag(sparse=True)``: refused in the forward, on the calling thread.
    Their backward makes a sparse COO gradient, which the device does not hold, and an error raised inside
    autograd's engine would end the process (torch 2.13)."""
    names = [a.name for a in func._schema.arguments]
    i = names.index("sparse")
    sparse = args[i] if len(args) > i else kwargs.get("sparse", False)
    if sparse and isinstance(args[0], torch.Tensor) and args[0].requires_grad and torch.is_grad_enabled():
        raise NotImplementedError(
            f"aten::{name} with sparse=True: sparse gradients are not supported on the {DEVICE.type} device (the "
            f"weight's gradient would be a sparse COO tensor). Use sparse=False (nn.Embedding(..., sparse=False)), "
            "or keep this module on the CPU.")


def dispatch(func, args, kwargs):
    if MULTI:
        return dispatch_multi(func, args, kwargs)
    return _dispatch(func, args, kwargs)


def _check_forward_ad(func, name, args, kwargs):
    """make_dual's check (``_has_same_storage_numel``): forward-mode AD on device tensors ends in a segfault inside
    torch's CPU kernels for some ops (a dual tensor times a plain one); refuse it where it starts, with a Python
    error."""
    if _fwad._current_level >= 0:
        raise NotImplementedError(
            "forward-mode AD (torch.autograd.forward_ad.make_dual) is not supported on the neuron device yet; "
            "use reverse mode (backward / torch.autograd.grad), or run the forward-AD part on the CPU")


def _check_set_storage(func, name, args, kwargs):
    """``set_`` to a storage: only a device storage may back a device tensor."""
    if len(args) > 1 and isinstance(args[1], torch.UntypedStorage) and not MEMORY.is_device_storage(args[1]):
        raise RuntimeError(f"Attempted to set the storage of a tensor on device \"{DEVICE}\" to a storage on "
                           f"different device \"{args[1].device}\".  This is no longer allowed; the new storage must "
                           "be on the same device (make it with torch.UntypedStorage(n, device=...) or take it "
                           "from a tensor on that device).")


# the ops whose arguments are checked before they run (by name; see _info)
_CHECKS = {**{n: _check_sparse_grad for n in _SPARSE_GRAD_OPS}, "_has_same_storage_numel": _check_forward_ad,
           "set_": _check_set_storage}


def _native_dropout(func, uargs, ukw):
    return native_dropout(*uargs, **ukw)


def _dispatch(func, args, kwargs):
    name, cat, transfer, accumulating, check, written, gen, impl, call = _INFO.get(id(func)) or _info(func)
    if check is not None:
        check(func, name, args, kwargs)
    ctx = _Ctx()
    cmap = ctx.map
    # fast path for the common flat case (a tuple of wrappers and scalars, or of int lists such as sizes and dims);
    # pytree would cost more than the op
    ua = []
    for a in args:
        c = a.__class__
        if c is NeuronTensor:
            p = a._p
            cmap[id(p)] = a
            ctx.neuron = True
            ua.append(p)
        elif c in _SCALARS:
            ua.append(a)
        elif (c is list or c is tuple) and _all_ints(a):
            ua.append(a)
        else:
            ua.append(_unwrap(a, ctx))
    uargs = tuple(ua)
    if kwargs:
        ukw = {k: _unwrap(v, ctx) for k, v in kwargs.items()}
        host_out = _device_kw(ukw, uargs) if "device" in ukw else False
    else:
        ukw = kwargs
        host_out = False
    if ctx.cpu is not None and ctx.neuron and not transfer:
        _cross_device(func, ctx)
    if cat is None:
        if id(func) in _KERNEL_FOR_DEVICE:      # a library op with a kernel any backend may run (_info)
            return func.redispatch(_DEVICE_KEYS, *args, **kwargs)
        if id(func) in _DECOMPOSE:
            out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = _fallback(func, name, uargs, ukw, ctx, host_out)
        if written:
            _sync_written(func, args, kwargs)
        return out
    if gen >= 0:
        if (len(uargs) <= gen or uargs[gen] is None) and ukw.get("generator") is None:
            if len(uargs) > gen:
                uargs = uargs[:gen] + (STATE.generator,) + uargs[gen + 1:]
            else:
                if ukw is kwargs:
                    ukw = {}
                ukw["generator"] = STATE.generator
    if impl is not None:                # the device's own implementation (native_impls.py, dropout)
        out = impl(func, uargs, ukw)
    elif accumulating and any(map(_is_low, uargs)):
        out = _accumulate_fp32(func, uargs, ukw)
    else:
        out = call(*uargs, **ukw)
        if cat == "view" and name[-1] == "_" and args and args[0].__class__ in DEVICE_TYPES:
            _sync_meta(args[0])
            if name in ("set_", "resize_"):
                MEMORY.resized(args[0]._p.untyped_storage())
    if written:
        _sync_written(func, args, kwargs)
    if cat in _EW and out.__class__ is _TENSOR:
        key = (name, out.numel(), out.dtype)
        r = _FAST.get(key)
        if r is None:
            r = _FAST[key] = charging.op_time(name, cat, uargs, out)
        if not STATE.profilers:
            STATE.now_ns += r[0]
            if host_out:
                return out
            w = cmap.get(id(out))
            return w if w is not None else wrap(out)
        ns, kind, flops, nbytes = r
    else:
        ns, kind, flops, nbytes = charge_memo.op_time(name, cat, uargs, out)
    if ns:
        charging.advance(name, ns, kind, flops, nbytes, uargs, out)
    if host_out:
        return out
    if out.__class__ is _TENSOR:        # one result (most ops): _rewrap without its type tests
        w = cmap.get(id(out))
        return w if w is not None else wrap(out)
    return _rewrap(out, ctx)


def _all_ints(seq):
    for y in seq:
        if y.__class__ is not int:
            return False
    return True


def _fallback(func, name, uargs, ukw, ctx, host_out):
    qual = name if "::" in name else f"aten::{name}"     # custom ops' names carry their namespace (_info)
    if STATE.fallback_mode == "error":
        _raise(NeuronFallbackError(f"{qual} is not implemented for the neuron device (TORCHNEURON_FALLBACK=error "
                                   "makes a CPU fallback an error)"))
    STATE.fallback_counts[qual] = STATE.fallback_counts.get(qual, 0) + 1
    if qual not in STATE.warned:
        STATE.warned.add(qual)
        warnings.warn(f"{qual} is not implemented for the neuron device and ran on the CPU; on hardware this copies "
                      "to the host", NeuronFallbackWarning, stacklevel=charging.user_stacklevel())
    out = func(*uargs, **ukw)
    ns, kind, flops, nbytes = charging.fallback_time(uargs, out)
    charging.advance(qual, ns, kind, flops, nbytes, uargs, out)
    if host_out:
        return out
    return _rewrap(out, ctx)
