"""Random ops draw from the device's generator (``torch.neuron.manual_seed``), never from the host's.

Eager dispatch and compiled graphs hand the device generator (``STATE.generator``) to every random aten op that
takes a ``generator`` argument.  A few random overloads take none (``rand_like``, ``randn_like``, ``randint_like``
and their ``out`` forms): run as they are on the host, they would draw from torch's CPU default generator, so that
``torch.neuron.manual_seed`` would not decide their values.  Each has a twin overload with the same arguments and a
keyword-only ``generator`` (``rand_like.generator``); both paths run the twin instead (:func:`generator_overload`).
``aten.native_dropout`` takes no generator and has no twin: both paths run :func:`native_dropout`."""

from __future__ import annotations

import torch

from .device_state import STATE

_TWINS = {}


def _signature(schema, skip_generator):
    return tuple((a.name, str(a.type), a.kwarg_only) for a in schema.arguments
                 if not (skip_generator and a.name == "generator"))


def generator_overload(func):
    """The overload of ``func``'s op that takes the same arguments plus a ``generator`` (``aten.rand_like.default``
    -> ``aten.rand_like.generator``); ``func`` itself if it takes a generator already; None if the op has no such
    twin."""
    key = id(func)
    if key in _TWINS:
        return _TWINS[key]
    schema = func._schema
    twin = None
    if any(a.name == "generator" for a in schema.arguments):
        twin = func
    else:
        want = _signature(schema, False)
        packet = func.overloadpacket
        for name in packet.overloads():
            other = getattr(packet, name)
            s = other._schema
            if any(a.name == "generator" for a in s.arguments) and _signature(s, True) == want:
                twin = other
                break
    _TWINS[key] = twin
    return twin


def native_dropout(x, p, train):
    """``aten.native_dropout`` drawing its mask from the device generator: the output and the boolean keep-mask."""
    if train is False or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
    mask = torch.empty_like(x, dtype=torch.float32).bernoulli_(1 - p, generator=STATE.generator).to(torch.bool)
    return x * mask * (1.0 / (1 - p)), mask
