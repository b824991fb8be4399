"""Turning recorded values into host tensors: flattening nested outputs, NumPy and ml_dtypes arrays, complex."""

from __future__ import annotations

import numpy as np
import torch

from .device import to_host

# NumPy dtype names (ml_dtypes included) that torch holds natively: viewed through an unsigned type of their width
_NP_VIEW = {"bfloat16": (torch.uint16, torch.bfloat16), "float8_e4m3fn": (torch.uint8, torch.float8_e4m3fn),
            "float8_e5m2": (torch.uint8, torch.float8_e5m2)}


def leaves(prefix: str, value, out=None):
    """``[(name, tensor or ndarray)]`` of every tensor in a nested value (tuples, lists, dicts, objects with
    ``to_tuple``/``items`` such as Hugging Face model outputs); other leaves are ignored."""
    out = [] if out is None else out
    if isinstance(value, (torch.Tensor, np.ndarray)):
        out.append((prefix, value))
    elif isinstance(value, dict) or (hasattr(value, "items") and hasattr(value, "keys")
                                      and not isinstance(value, type)):
        for k, v in value.items():
            leaves(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            leaves(f"{prefix}.{i}" if prefix else str(i), v, out)
    return out


def host_tensor(value):
    """``(stored CPU tensor, logical dtype name, original device type, notes)`` for a tensor or NumPy array, or
    ``None`` for one that holds no values (meta/fake tensors)."""
    notes = {}
    if isinstance(value, np.ndarray):
        arr = value.copy(order="C")
        name = arr.dtype.name
        if name in _NP_VIEW:
            raw, dt = _NP_VIEW[name]
            t = torch.from_numpy(arr.view(np.dtype(f"u{arr.dtype.itemsize}")).copy()).view(dt)
        elif arr.dtype.kind in "biufc":
            t = torch.from_numpy(arr.copy())
        elif arr.dtype.kind == "V" or name.startswith("float"):     # an ml_dtypes float torch lacks (fp8 e4m3, ...)
            t = torch.from_numpy(arr.astype(np.float32))
            notes["stored_as"] = "float32 (exact: every value of the narrow type is a float32)"
        else:
            raise TypeError(f"cannot record a NumPy array of dtype {arr.dtype}")
        return t.contiguous(), name, "host", notes
    t = value
    if t.device.type == "meta" or (hasattr(torch._subclasses, "FakeTensor")
                                   and isinstance(t, torch._subclasses.FakeTensor)):
        return None
    dev = t.device.type
    h = to_host(t)
    if h.layout != torch.strided:
        h = h.to_dense()
    logical = str(t.dtype).replace("torch.", "")
    if h.is_complex():
        h = torch.view_as_real(h).contiguous()
        notes["stored_as"] = "view_as_real"
    if h.is_quantized:
        h = h.dequantize()
        notes["stored_as"] = "dequantized float32"
    return h.contiguous(), logical, dev, notes
