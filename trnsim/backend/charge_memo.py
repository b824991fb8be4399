"""``charging.op_time`` remembered per op signature, for the ops dispatch charges outside the elementwise memo.

A non-elementwise op (a matmul, a reduction, a norm, an estimated op) used to be costed from scratch on every call:
``charging.op_time`` walks the arguments and evaluates the cost formulas (``costs.matmul_cost``, ...), a third of
such an op's dispatch overhead (bitsandbytes' test_modules runs the same few shapes thousands of times).  Its result
is a function of the op's name and category, of the shapes and dtypes of its tensor arguments and results, and of its
non-tensor arguments (the dim of a softmax, the dropout probability of an attention op), for the current target.  The
key holds exactly those; the memo is cleared with the other per-target charges (``tensor.clear_charges``).

Categories whose cost reads tensor values (``native_costs.COSTS``, e.g. ``data_dependent`` reads offsets) are never
memoised, nor are view ops (free, and cheaper to cost than to key).
"""

from __future__ import annotations

import torch

from . import charging, native_costs

_MEMO = {}          # (name, cat, argument signature, result signature) -> (ns, kind, flops, bytes)
_SKIP = frozenset(native_costs.COSTS) | {"view", "collective"}
# categories whose charge depends on the operands' layout, not only their shapes and dtypes: attention is priced
# with the row kernel when q and k are token rows (charging._token_rows_batch)
_LAYOUT = frozenset(("sdpa", "backward:sdpa"))
_TENSOR = torch.Tensor
_NONE = type(None)
_UNKEYED = object()
stats = {"hits": 0, "misses": 0, "unkeyed": 0}


def _sig(x):
    """A hashable signature of an argument or result: a tensor's (shape, dtype), a scalar's (type, value) (so that
    ``1``, ``1.0`` and ``True`` differ, as ``isinstance`` tests in the cost code do), a sequence's signatures."""
    c = x.__class__
    if c is _TENSOR or isinstance(x, _TENSOR):
        return (x.shape, x.dtype)
    if c is tuple or c is list or isinstance(x, (list, tuple)):
        return tuple([_sig(y) for y in x])
    return (c, x)


def op_time(name, cat, args, out):
    """``charging.op_time(name, cat, args, out)``, computed once per signature."""
    if cat in _SKIP:
        return charging.op_time(name, cat, args, out)
    try:
        # the key of _sig(args), built without a call per argument for the common flat tensors-and-scalars case
        sig = []
        for x in args:
            c = x.__class__
            if c is _TENSOR:
                sig.append((x.shape, x.dtype))
            elif c is int or c is float or c is bool or c is _NONE:
                sig.append((c, x))
            else:
                sig.append(_sig(x))
        key = (name, cat, tuple(sig), (out.shape, out.dtype) if out.__class__ is _TENSOR else _sig(out))
        if cat in _LAYOUT:          # a charge that reads the operands' strides: they are part of the key
            key += (tuple(x.stride() for x in args if isinstance(x, _TENSOR)),)
        r = _MEMO.get(key)
    except TypeError:           # an unhashable argument (a dict, ...): cost it every time
        stats["unkeyed"] += 1
        return charging.op_time(name, cat, args, out)
    if r is None:
        stats["misses"] += 1
        r = _MEMO[key] = charging.op_time(name, cat, args, out)
    else:
        stats["hits"] += 1
    return r


def clear():
    _MEMO.clear()
