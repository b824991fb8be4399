"""Low-precision ops that accumulate in fp32 on the device (``op_table.ACCUMULATING``: matmuls, reductions, norms).

``_accumulate_fp32`` runs such an op with its bf16/fp16/fp8 inputs upcast to fp32 and rounds each output once to the
dtype the op produces, as the engines do (fp32 accumulators, one rounding on the way out).  ``_written`` lists the
arguments an op writes (``out=``, an in-place ``self``), which get the rounded result back.
"""

from __future__ import annotations

import torch

_LOW = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
_TENSOR = torch.Tensor


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
    sig = [func]
    for a in uargs:
        sig.append(a.dtype if isinstance(a, torch.Tensor) else None)
    key = tuple(sig)
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
    up = []
    for a in uargs:
        if a.__class__ is _TENSOR:
            up.append(a.float() if a.dtype in _LOW else a)
        else:
            up.append(_up(a))
    up_args = tuple(up)
    up_kw = {k: _up(v) for k, v in ukw.items()} if ukw else ukw
    out = func._op(*up_args, **up_kw)
    written = _written(func)
    if not written:
        return _round_outputs(out, dts, {})
    # arguments the op writes (out=, an in-place self) were upcast copies: round the result once into the caller's
    # tensors, and hand those back where the op returned the copy
    back = {}
    for i, name, kwarg_only in written:
        if name in ukw:
            orig, up = ukw[name], up_kw[name]
        elif not kwarg_only and i < len(uargs):
            orig, up = uargs[i], up_args[i]
        else:
            continue
        if isinstance(orig, torch.Tensor) and up is not orig:
            if orig.shape != up.shape:
                orig.resize_(up.shape)
            orig.copy_(up)
            back[id(up)] = orig
    return _round_outputs(out, dts, back)


def _round_outputs(out, dts, back):
    """``_accumulate_fp32``'s results: each output rounded to its dtype ``dts``, or the caller's tensor (``back``)
    that an upcast written argument stood for."""
    if isinstance(out, (list, tuple)):
        return type(out)(back[id(o)] if id(o) in back else
                         o.to(d) if isinstance(o, torch.Tensor) and d is not None and o.dtype != d else o
                         for o, d in zip(out, dts + (None,) * (len(out) - len(dts))))
    if id(out) in back:
        return back[id(out)]
    d = dts[0]
    return out.to(d) if isinstance(out, torch.Tensor) and d is not None and out.dtype != d else out


_WRITES = {}   # id(OpOverload) -> ((position, name, keyword-only), ...) of the arguments the op writes


def _written(func):
    r = _WRITES.get(id(func))
    if r is None:
        r = _WRITES[id(func)] = tuple((i, a.name, a.kwarg_only) for i, a in enumerate(func._schema.arguments)
                                      if a.alias_info is not None and a.alias_info.is_write)
    return r
