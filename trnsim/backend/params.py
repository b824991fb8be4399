"""Parameters and ``.data`` on the ``neuron`` device: moving a tensor's content between host and device in place, and
keeping ``nn.Parameter`` subclasses (bitsandbytes' ``Int8Params`` and ``Params4bit``, ...) what they are there.

On CUDA a Parameter subclass is an ordinary tensor whose TensorImpl lives on the GPU: ``param.data = x`` and
``Module._apply`` move it in place, and ``torch.Tensor._make_subclass(cls, cuda_tensor)`` gives a ``cls`` on the
GPU, with its class, methods and ``__dict__`` attributes.  A neuron tensor is a Python wrapper (``NeuronTensor``)
instead, so a Parameter subclass gets a *device class* here: ``class Int8Params(Int8Params, NeuronTensor)``, made
once per subclass (``device_class``).  Its instances are neuron tensors (``tensor.DEVICE_TYPES``: dispatch unwraps
them, in-place ops return them) and instances of the subclass (``isinstance``, its methods and properties, its
``__torch_function__`` if it defines one).  Three doors lead there:

* ``torch.Tensor._make_subclass(cls, neuron_tensor, ...)`` (what ``Parameter.__new__`` and most subclasses' own
  ``__new__`` call) returns a ``device_class(cls)`` wrapper sharing the tensor's payload, detached, as torch does;
* ``nn.Parameter.__new__`` for a subclass given a neuron tensor takes the same path as for a plain tensor (torch's
  own path for other tensor types returns ``data.detach()`` flagged ``_is_param``, which loses the subclass);
  ``nn.Parameter(neuron_tensor)`` itself keeps torch's behaviour (a ``NeuronTensor`` flagged ``_is_param``);
* ``self.data = value`` between host and device (``set_data``) swaps the tensor's content in place, keeping identity
  and ``__dict__``; a Parameter subclass's object becomes (or stops being) an instance of its device class.
"""

from __future__ import annotations

import torch
from torch.nn import Parameter

from . import tensor as _t
from .tensor import _HIDDEN, _TB_DATA, DEVICE_TYPES, NeuronTensor, _place, wrap

_DEVICE_CLASS = {}   # host class (a Parameter subclass) -> its device class
_HOST_CLASS = {}     # device class -> host class


def device_class(cls):
    """The class of a ``cls`` instance on the neuron device (``cls`` a Parameter subclass); made once per class."""
    if cls in DEVICE_TYPES:
        return cls
    dc = _DEVICE_CLASS.get(cls)
    if dc is None:
        def __getstate__(self):
            # the payload is the device data (pickled through .data), never a separate attribute; object's own
            # __getstate__ reads the real dictionary, not ``__dict__`` (tensor._Attrs)
            get = getattr(super(dc, self), "__getstate__", None)
            state = get() if get is not None else self.__dict__
            if isinstance(state, dict) and not _HIDDEN.isdisjoint(state):
                state = {k: v for k, v in state.items() if k not in _HIDDEN}
            return state
        ns = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__getstate__": __getstate__,
              "__doc__": cls.__doc__, "_trnsim_host_class": cls}
        dc = type(cls)(cls.__name__, (cls, NeuronTensor), ns)
        _DEVICE_CLASS[cls] = dc
        _HOST_CLASS[dc] = cls
        DEVICE_TYPES.add(dc)
        from . import patches
        patches.foreach_supported(dc)     # the optimizers' exact-type allow-lists, as for NeuronTensor
        if "dynamo_wrap_tensor" in patches.APPLIED:
            patches.dynamo_wrap_tensor(dc)    # dynamo traces it as a tensor, as it does NeuronTensor
    return dc


def host_class(cls):
    """The host class of a device class (``cls`` itself for any other class)."""
    return _HOST_CLASS.get(cls, cls)


def make_subclass(orig):
    """``torch.Tensor._make_subclass`` that, given a neuron tensor, returns an instance of ``cls``'s device class
    sharing the tensor's payload (``cls`` given a host tensor: torch's own, with a device class mapped back to its host
    class)."""
    # the signature of dynamo's polyfill for this function (dynamo compares them when it installs the polyfill);
    # torch's own spelling of the flag, ``require_grad=``, is accepted too
    def _make_subclass(cls, data, requires_grad=False, **kwargs):
        require_grad = kwargs.pop("require_grad", requires_grad)
        if data.__class__ in DEVICE_TYPES and issubclass(cls, torch.Tensor):
            if kwargs:
                raise NotImplementedError(
                    f"torch.Tensor._make_subclass({cls.__name__}, <neuron tensor>, ...) with dispatch options "
                    f"{kwargs}: the neuron device makes a subclass of its own wrapper, which takes none")
            if not isinstance(require_grad, bool):
                raise TypeError(f"_make_subclass(): argument 'require_grad' must be bool, not "
                                f"{type(require_grad).__name__}")
            if require_grad and not (data.dtype.is_floating_point or data.dtype.is_complex):
                raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
            out = wrap(data._p, data._dev, cls=device_class(cls) if cls is not NeuronTensor else NeuronTensor)
            if require_grad:
                out.requires_grad_(True)
            return out
        return orig(host_class(cls), data, require_grad, **kwargs)
    _make_subclass._trnsim_orig = orig
    return _make_subclass


def parameter_new(orig):
    """``nn.Parameter.__new__``: a Parameter *subclass* given a neuron tensor is made by ``_make_subclass``, as for a
    plain tensor (so it stays an instance of the subclass, on the device); everything else is torch's own."""
    def __new__(cls, data=None, requires_grad=True):
        if cls is not Parameter and data is not None and data.__class__ in DEVICE_TYPES:
            return torch.Tensor._make_subclass(cls, data, requires_grad)
        return orig(cls, data, requires_grad)
    __new__._trnsim_orig = orig
    return __new__


def _is_device(t):
    # type(t), not t.__class__: dynamo traces this setter inside compiled modules (bitsandbytes' ``self.weight.data =
    # ...`` in forward) and refuses ``__class__`` on tensor subclasses, while it answers ``type()`` of a tensor
    return type(t) in DEVICE_TYPES


def set_data(self, value):
    """``self.data = value``, also across devices: a host tensor given a neuron tensor (and the reverse) takes its
    content in place, keeping its Python identity, class-level Parameter-ness (its Parameter subclass), attributes and
    ``.grad`` (moved to the new device and dtype), as ``param.data = x`` does between CPU and CUDA."""
    s_dev = _is_device(self)
    v_dev = _is_device(value)
    if s_dev and v_dev:
        _TB_DATA.__set__(self, value)
        self._p = value._p
        if self._dev != value._dev:              # the device index (neuron:i) follows the data
            _place(self, value._dev)
        return
    if s_dev == v_dev or not isinstance(value, torch.Tensor) or not swappable(value if s_dev else self):
        _TB_DATA.__set__(self, value)     # torch's own rules and errors
        return
    _swap_in(self, value)


def swappable(t):
    """A dense CPU tensor, Parameter or Parameter subclass (with torch's own ``__torch_dispatch__``): the host tensors
    moved in place to and from the device."""
    c = t.__class__
    return ((c is torch.Tensor or c is Parameter
             or (issubclass(c, Parameter) and c.__torch_dispatch__ is torch.Tensor.__torch_dispatch__))
            and t.layout is torch.strided and t.device.type == "cpu")


def _swap_in(self, value):
    cls = self.__class__
    is_param = isinstance(self, Parameter)
    sub = issubclass(host_class(cls), Parameter) and host_class(cls) is not Parameter
    with torch.no_grad():
        if _is_device(value):
            new = wrap(value._p, value._dev, cls=device_class(cls) if sub else NeuronTensor)
        else:
            new = value.detach()
            if sub:
                new = _make_subclass_orig(host_class(cls), new, False)
            elif is_param:
                new = Parameter(new, requires_grad=False)
    if self.requires_grad:
        new.requires_grad_(True)
    grad = self.grad
    attrs = {k: v for k, v in self.__dict__.items() if k not in ("_p", "_is_param")}
    if grad is not None:
        self.grad = None
    try:
        torch.utils.swap_tensors(self, new)
    except RuntimeError as e:
        if grad is not None:
            self.grad = grad
        raise RuntimeError(f"cannot move this tensor's data between cpu and {_t.DEVICE} in place ({e}); on the "
                           "neuron device a host tensor takes a device tensor's data by swapping its content, which "
                           "needs the tensor to be referenced from nowhere but Python (no live autograd graph using "
                           "it, no weakref)") from e
    self.__dict__.update(attrs)
    if is_param and self.__class__ is NeuronTensor:
        self._is_param = True
    if grad is not None:
        if grad.shape == self.shape:
            with torch.no_grad():
                moved = grad.to(device=self.device, dtype=self.dtype)
            if _is_device(moved) != _is_device(grad):
                set_data(grad, moved)       # the same grad object, on the new device
            else:
                grad = moved
        self.grad = grad


def _make_subclass_orig(cls, data, require_grad):
    f = torch.Tensor._make_subclass
    return getattr(f, "_trnsim_orig", f)(cls, data, require_grad)


def compatible_shallow_copy_type(orig):
    """``torch._has_compatible_shallow_copy_type`` that also pairs a dense CPU tensor with a neuron tensor, as torch
    pairs CPU with CUDA: ``Module._apply`` then moves parameters with ``param.data = ...`` (identity and ties kept)
    unless ``torch.__future__`` says to overwrite or swap them."""
    # same parameter names as torch's (dynamo checks them when it installs its polyfill for this function)
    def _has_compatible_shallow_copy_type(input: torch.Tensor, from_: torch.Tensor) -> bool:
        da, db = input.__class__ in DEVICE_TYPES, from_.__class__ in DEVICE_TYPES
        if da != db:
            return swappable(from_ if da else input)
        return orig(input, from_)
    _has_compatible_shallow_copy_type._trnsim_orig = orig
    return _has_compatible_shallow_copy_type
