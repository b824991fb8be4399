"""The ``neuron`` tensor: a wrapper subclass on device ``neuron:0`` whose data is a plain CPU tensor (the payload).

Every aten op that reaches ``__torch_dispatch__`` is unwrapped, run on the payloads (natively, with the device's
numerics, or as a counted CPU fallback), charged simulated time, and rewrapped.  An output that is an input's
payload comes back as that input's wrapper, which covers in-place ops and ``out=``.
"""

from __future__ import annotations

import threading
import warnings

import torch

from . import charging
from .device_state import STATE
from .errors import NeuronFallbackError, NeuronFallbackWarning
from .memory import MEMORY
from .native_impls import IMPLS as NATIVE_IMPLS
from .op_table import ACCUMULATING, TABLE, TRANSFER

DEVICE = torch.device("privateuseone", 0)   # replaced by torch.device("neuron", 0) at registration
_make = torch.Tensor._make_wrapper_subclass
_LOW = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)


class NeuronTensor(torch.Tensor):
    """A tensor on the simulated ``neuron`` device."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, payload):
        return wrap(payload)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        try:
            return dispatch(func, args, kwargs or {})
        except Exception as e:
            if not _on_autograd_worker():
                raise
            # on autograd's device thread an exception out of here aborts the process (torch 2.13): record it for
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
        return self._p.untyped_storage()

    def __reduce_ex__(self, proto):
        # torch's own rebuild for storage-less device tensors: allowed under torch.load(weights_only=True)
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (self._p.detach().clone(), self.dtype, str(self.device), self.requires_grad))

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        return self

    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, value):
        torch.Tensor.data.__set__(self, value)
        if isinstance(value, NeuronTensor):
            self._p = value._p


def wrap(p):
    t = _make(NeuronTensor, p.size(), strides=p.stride(), storage_offset=p.storage_offset(), dtype=p.dtype,
              device=DEVICE)
    t._p = p
    if p.is_conj():
        torch._C._set_conj(t, True)
    if p.is_neg():
        torch._C._set_neg(t, True)
    MEMORY.track(t, p)
    return t


class _Ctx:
    __slots__ = ("map", "cpu", "neuron")

    def __init__(self):
        self.map = {}
        self.cpu = None
        self.neuron = False


def _unwrap(x, ctx):
    if type(x) is NeuronTensor:
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


def _on_autograd_worker():
    return threading.current_thread().__class__ is threading._DummyThread


PENDING = []   # errors raised on autograd's device thread, re-raised when backward returns (see patches.py)


def _raise(exc):
    """Raise ``exc``, or on autograd's neuron worker thread (where an exception out of __torch_dispatch__ aborts the
    process on torch 2.13) record it for ``backward``/``grad`` to raise on the calling thread."""
    if _on_autograd_worker():
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
    failed on the worker thread unwinds normally; the recorded error is raised when backward returns."""
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


def _device_kw(kwargs):
    """Rewrite a ``device=`` kwarg: neuron -> cpu (outputs wrapped); returns whether outputs stay on the host."""
    d = kwargs.get("device")
    if d is None:
        return False
    d = torch.device(d) if not isinstance(d, torch.device) else d
    if d.type == DEVICE.type:
        kwargs["device"] = _CPU
        return False
    return True


def _is_low(x):
    return isinstance(x, torch.Tensor) and x.dtype in _LOW


def _up(x):
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.float()
    if isinstance(x, torch.dtype) and x in _LOW:     # e.g. _softmax_backward_data's input_dtype, sum's dtype=
        return torch.float32
    if isinstance(x, (list, tuple)):
        return type(x)(_up(y) for y in x)
    return x


_OUT_DTYPES = {}


def _accumulate_fp32(func, uargs, ukw):
    """Run ``func`` with low-precision float inputs upcast to fp32 and round each output once to the dtype the op
    produces (looked up once per op and input dtypes on the meta device)."""
    key = (func, tuple(a.dtype if isinstance(a, torch.Tensor) else None for a in uargs))
    dts = _OUT_DTYPES.get(key)
    if dts is None:
        try:
            meta = func(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in uargs],
                        **{k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in ukw.items()})
            ms = meta if isinstance(meta, (list, tuple)) else (meta,)
            dts = tuple(m.dtype if isinstance(m, torch.Tensor) else None for m in ms)
        except Exception:
            low = next(a.dtype for a in uargs if _is_low(a))
            dts = (low,)
        _OUT_DTYPES[key] = dts
    out = func(*_up(uargs), **{k: _up(v) for k, v in ukw.items()})
    if isinstance(out, (list, tuple)):
        return type(out)(o.to(d) if isinstance(o, torch.Tensor) and d is not None and o.dtype != d else o
                         for o, d in zip(out, dts + (None,) * (len(out) - len(dts))))
    d = dts[0]
    return out.to(d) if isinstance(out, torch.Tensor) and d is not None and out.dtype != d else out


def _dropout(x, p, train):
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    mask = torch.empty_like(x, dtype=torch.float32).bernoulli_(1 - p, generator=STATE.generator).to(torch.bool)
    return x * mask * (1.0 / (1 - p)), mask


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
_FAST = {}   # (op, numel, dtype) -> charge of a single-output elementwise op


_INFO = {}   # OpOverload -> (name, category, is a transfer op, accumulates in fp32)


def _info(func):
    name = func._opname
    r = _INFO[func] = (name, TABLE.get(name), name in TRANSFER, name in ACCUMULATING)
    return r


def dispatch(func, args, kwargs):
    info = _INFO.get(func) or _info(func)
    name, cat, transfer, accumulating = info
    ctx = _Ctx()
    # fast path for the common flat case (a tuple of wrappers and scalars); pytree would cost more than the op
    ua = []
    for a in args:
        if type(a) is NeuronTensor:
            p = a._p
            ctx.map[id(p)] = a
            ctx.neuron = True
            ua.append(p)
        elif a.__class__ in _SCALARS:
            ua.append(a)
        else:
            ua.append(_unwrap(a, ctx))
    uargs = tuple(ua)
    ukw = {k: _unwrap(v, ctx) for k, v in kwargs.items()} if kwargs else {}
    host_out = _device_kw(ukw) if "device" in ukw else False
    if ctx.cpu is not None and ctx.neuron and not transfer:
        _cross_device(func, ctx)
    if cat is None:
        return _fallback(func, name, uargs, ukw, ctx, host_out)
    if cat == "random" and _generator_index(func) >= 0:
        gi = _generator_index(func)
        if (len(uargs) <= gi or uargs[gi] is None) and ukw.get("generator") is None:
            if len(uargs) > gi:
                uargs = uargs[:gi] + (STATE.generator,) + uargs[gi + 1:]
            else:
                ukw["generator"] = STATE.generator
    if name == "native_dropout":
        out = _dropout(*uargs, **ukw)
    elif name in NATIVE_IMPLS:          # the device's own implementation (native_impls.py)
        out = NATIVE_IMPLS[name](func, uargs, ukw)
    elif accumulating and any(_is_low(a) for a in uargs):
        out = _accumulate_fp32(func, uargs, ukw)
    else:
        out = func(*uargs, **ukw)
        if cat == "view" and name[-1] == "_" and args and type(args[0]) is NeuronTensor:
            _sync_meta(args[0])
    if cat in _EW and type(out) is torch.Tensor:
        key = (name, out.numel(), out.dtype)
        r = _FAST.get(key)
        if r is None:
            r = _FAST[key] = charging.op_time(name, cat, uargs, out)
        if not STATE.profilers:
            STATE.now_ns += r[0]
            if host_out:
                return out
            w = ctx.map.get(id(out))
            return w if w is not None else wrap(out)
        ns, kind, flops, nbytes = r
    else:
        ns, kind, flops, nbytes = charging.op_time(name, cat, uargs, out)
    if ns:
        charging.advance(name, ns, kind, flops, nbytes, uargs, out)
    if host_out:
        return out
    return _rewrap(out, ctx)


def _fallback(func, name, uargs, ukw, ctx, host_out):
    qual = f"aten::{name}"
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
