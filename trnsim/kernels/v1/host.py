"""Legacy NKI language functions called outside a kernel, on host arrays (``nl.static_cast(np_array, dtype)``, as
tests use to prepare inputs): the host-side conversion, with trnsim's write rules."""

from __future__ import annotations

import numpy as np

from ...isa.errors import NkiValidationError, caller_location
from ...memory import dtype_of, round_to
from ..context import NoKernelError, current


def _in_kernel():
    try:
        current()
    except NoKernelError:
        return False
    return True


def _host_cast(x, dtype):
    dt = dtype_of(dtype)
    if dt.packed:
        raise NkiValidationError(f"nl.static_cast outside a kernel: no host conversion to the packed format {dt.name}",
                                 "static_cast", "dtype", dt.name, "not packed", caller_location())
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().float().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "biuf" and a.dtype.name not in ("bfloat16",) and not a.dtype.name.startswith("float8"):
        raise NkiValidationError(f"nl.static_cast outside a kernel takes a numeric host array, got {a.dtype}",
                                 "static_cast", "input_data", str(a.dtype), "numeric", caller_location())
    if dt.is_float:
        return a.astype(dt.np)
    return np.asarray(round_to(dt, a.astype(np.float64) if a.dtype.kind != "b" else a)).astype(dt.np)
