"""The ``__dict__`` a ``neuron`` tensor shows to Python code: its attributes without the wrapper's own.

A wrapper keeps its payload (``_p``), its device index (``_dev``) and torch's Parameter flag (``_is_param``) in its
instance dictionary; a tensor on CUDA has none of them, so code that copies or pickles a tensor subclass's
attributes (bitsandbytes' ``Params4bit.__getstate__``) must not see them.  ``tensor.NeuronTensor.__dict__`` is the
property made of ``_get_dict`` and ``_set_dict`` here.
"""

from __future__ import annotations

import torch

_REAL_DICT = torch.Tensor.__dict__["__dict__"]      # the instance-dictionary descriptor of tensor objects
# the wrapper's own attributes, which a tensor on CUDA does not have: its payload, its device index, and torch's
# flag for a Parameter made of a non-Tensor type (``nn.Parameter(t)`` sets it on a wrapper, never on a CUDA tensor)
_HIDDEN = frozenset(("_p", "_dev", "_is_param"))


class _Attrs(dict):
    """A neuron tensor's ``__dict__`` as Python code sees it: its attributes without the wrapper's own (``_HIDDEN``),
    so that ``vars(t)``, ``t.__dict__.copy()``, pickling and deep copies of tensor subclasses (bitsandbytes'
    ``Params4bit.__getstate__``) see what they see on CUDA.  A snapshot for reading; every write goes through to the
    real dictionary too."""

    __slots__ = ("_real",)

    def __init__(self, real):
        super().__init__((k, v) for k, v in real.items() if k not in _HIDDEN)
        self._real = real

    def __setitem__(self, k, v):
        self._real[k] = v
        super().__setitem__(k, v)

    def __delitem__(self, k):
        del self._real[k]
        super().__delitem__(k)

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __ior__(self, other):
        self.update(other)
        return self

    def setdefault(self, k, default=None):
        if k not in self:
            self[k] = default
        return self[k]

    _MISSING = object()

    def pop(self, k, default=_MISSING):
        if k in self:
            self._real.pop(k)
        return super().pop(k) if default is _Attrs._MISSING else super().pop(k, default)

    def popitem(self):
        k, v = super().popitem()
        self._real.pop(k)
        return k, v

    def clear(self):
        for k in list(self):
            self._real.pop(k)
        super().clear()


def _get_dict(self):
    return _Attrs(_REAL_DICT.__get__(self))


def _set_dict(self, value):
    # torch.utils.swap_tensors exchanges two tensors' dictionaries through ``__dict__``: the real ones move
    _REAL_DICT.__set__(self, value._real if type(value) is _Attrs else value)
