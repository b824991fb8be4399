"""Ops with no tensor argument never reach ``__torch_dispatch__``: register them on the PrivateUse1 key.

Each kernel runs the same op with ``device="cpu"`` (after checking the simulated capacity, so nothing huge is
allocated on the host), injects the device generator into random factories, and wraps the result on the device
index asked for (``device_index.logical_device``).
"""

from __future__ import annotations

import math

import torch

from . import charging
from .device_index import logical_device
from .device_state import STATE
from .memory import MEMORY
from .tensor import wrap

FACTORIES = [
    "empty.memory_format", "empty_strided", "zeros", "ones", "full", "arange", "arange.start", "arange.start_step",
    "eye", "eye.m", "randn", "randn.generator", "rand", "rand.generator", "randint", "randint.low",
    "randint.generator", "randint.low_generator", "randperm", "randperm.generator", "linspace", "logspace",
    "scalar_tensor", "normal.float_float", "normal.float_float_out_dummy", "tril_indices", "triu_indices",
    "empty.names_dummy", "_efficientzerotensor", "zeros.names_dummy", "full.names_dummy", "ones.names_dummy",
    "bartlett_window", "hann_window", "hamming_window", "blackman_window", "kaiser_window",
]

_lib = None


def _positions(op):
    names = [a.name for a in op._schema.arguments]
    return {n: (names.index(n) if n in names else -1) for n in ("device", "pin_memory", "generator", "size",
                                                               "dtype")}


def _nbytes(op, args, kwargs, pos):
    size = None
    if pos["size"] >= 0:
        size = args[pos["size"]] if len(args) > pos["size"] else kwargs.get("size")
    if size is None:
        return 0
    dt = None
    if pos["dtype"] >= 0:
        dt = args[pos["dtype"]] if len(args) > pos["dtype"] else kwargs.get("dtype")
    dt = dt or torch.get_default_dtype()
    item = dt.itemsize
    return math.prod(int(s) for s in size) * item


_WITH_GENERATOR = {"randn.default": "randn.generator", "rand.default": "rand.generator",
                   "randint.default": "randint.generator", "randint.low": "randint.low_generator",
                   "randperm.default": "randperm.generator"}


def _kernel(op):
    is_random = op._opname in ("randn", "rand", "randint", "randperm", "normal")
    full = f"{op._opname}.{op._overloadname}"
    if full in _WITH_GENERATOR:         # call the overload that takes the device generator
        packet, _, ov = _WITH_GENERATOR[full].partition(".")
        gop = getattr(getattr(torch.ops.aten, packet), ov)
        gpos = [a.name for a in gop._schema.arguments].index("generator")
        inner = _kernel(gop)

        def k(*args, **kwargs):
            args = list(args)
            if len(args) > gpos:   # positional arguments after the generator slot: shift them
                args.insert(gpos, STATE.generator)
            else:
                kwargs["generator"] = STATE.generator
            return inner(*args, **kwargs)
        return k
    pos = _positions(op)

    def k(*args, **kwargs):
        args = list(args)
        i = pos["device"]
        asked = args[i] if 0 <= i < len(args) else kwargs.get("device")
        dev = logical_device(torch.device(asked).index) if asked is not None else None
        for n, v in (("device", torch.device("cpu")), ("pin_memory", None)):
            i = pos[n]
            if i >= 0 and i < len(args):
                args[i] = v
            elif n in kwargs:
                kwargs[n] = v
        if is_random and pos["generator"] >= 0:
            i = pos["generator"]
            if i < len(args):
                if args[i] is None:
                    args[i] = STATE.generator
            elif kwargs.get("generator") is None:
                kwargs["generator"] = STATE.generator
        nb = _nbytes(op, args, kwargs, pos)
        if nb:
            MEMORY.check(nb)
        out = op(*args, **kwargs)
        if op._opname not in ("empty", "empty_strided") and out.numel():
            ns, kind, fl, b = charging.op_time(op._opname, "copy" if not is_random else "random", (), out)
            charging.advance(op._opname, ns, kind, fl, b, (), out)
        return wrap(out, dev)
    return k


def _copy_from(self, dst, non_blocking=False):
    # only reached for plain (non-wrapper) tensors: copy payload to payload
    src = getattr(self, "_p", self)
    d = getattr(dst, "_p", dst)
    d.copy_(src)
    return dst


def _copy_from_and_resize(self, dst):
    src = getattr(self, "_p", self)
    d = getattr(dst, "_p", dst)
    d.resize_(src.shape).copy_(src)
    return dst


def register():
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    for name in FACTORIES:
        if name.endswith("_dummy"):
            continue
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        _lib.impl(name, _kernel(op), "PrivateUse1")
    _lib.impl("_copy_from", _copy_from, "PrivateUse1")
    _lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
