"""Costs of the native ops added for models (issue 12): convolution as matmul, grouped matmul, sorting, data-
dependent sizes (with their host sync), batch/group norm, linear algebra, FFT, and roofline estimates.

Each function takes ``(name, args, out, launch)`` -- the CPU payloads of the op's arguments, its CPU result and the
eager launch cost -- and returns ``(ns, kind, flops, bytes)`` like :func:`charging.op_time`.  ``kind`` is
``"native"`` when a library kernel's shape-only simulation gives the time and ``"estimated"`` otherwise.

Modelling choices (assumptions, stated where they are made):

* Convolution is charged as the matmul of its im2col form (``[N*out_spatial, Cin/g*prod(k)] @ [Cin/g*prod(k),
  Cout/g]`` per group, through ``costs.matmul_cost``); the patch gather is assumed folded into the DMA access
  pattern (no separate copy charged).  Backward: one matmul per gradient asked for (input, weight), the bias
  gradient a row reduction.
* Sorting-like ops (sort, topk, median, unique, ...) have no library kernel: a roofline estimate of
  ``n * ceil(log2 n)`` Vector Engine element operations per sorted row.
* Ops whose output size depends on the data (nonzero, masked_select, unique, repeat_interleave with a tensor of
  repeats, histc without bounds) read a count back to the host before the output can be allocated, as on
  hardware: one device-to-host transfer of 8 bytes (``costs.host_transfer_ns``) is added.
* Linear-algebra factorizations and solves: a roofline estimate of ``batch * n^3`` (``n^2 * k`` for triangular
  solves) Vector Engine operations (they are sequential in one dimension; the Tensor Engine is not credited).
* FFT: ``5 n log2 n`` flops per transform (the usual radix-2 count), Vector Engine rate.
"""

from __future__ import annotations

import math

import torch

from . import costs
from .device_state import STATE
from .kdtypes import kdtype as _kdtype


def _tensors(xs, out):
    for x in xs:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            _tensors(x, out)
    return out


def _bytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


def _io_bytes(args, out):
    return _bytes(_tensors(args, [])) + _bytes(_tensors([out], []) if out is not None else [])


def _estimate(flops, nbytes, launch, tensor_engine=False, extra_ns=0.0):
    ns = launch + costs.roofline_ns(STATE.target, flops, nbytes, tensor_engine) + extra_ns
    return ns, "estimated", float(flops), int(nbytes)


def _sync_ns():
    return costs.host_transfer_ns(STATE.target, 8)


# -- convolution -------------------------------------------------------------------------------------------
def _conv_dims(x, w, transposed, groups, out):
    """(M, K, N, groups) of the im2col matmul of one convolution."""
    ksz = math.prod(w.shape[2:])
    if not transposed:
        m = out.shape[0] * math.prod(out.shape[2:])
        k = (x.shape[1] // groups) * ksz
        n = w.shape[0] // groups
    else:                     # transposed: [N*in_spatial, Cin/g] @ [Cin/g, Cout/g*prod(k)], then col2im
        m = x.shape[0] * math.prod(x.shape[2:])
        k = x.shape[1] // groups
        n = w.shape[1] * ksz
    return m, k, n, groups


def _mm(m, k, n, dt, batch):
    return costs.matmul_cost(STATE.target, m, k, n, dt, batch)


def conv(name, args, out, launch):
    x, w = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    groups = int(args[8]) if len(args) > 8 else 1
    o = out if isinstance(out, torch.Tensor) else out[0]
    if not x.is_floating_point() or x.numel() == 0 or w.numel() == 0:
        return _estimate(o.numel(), _io_bytes(args, out), launch)
    m, k, n, g = _conv_dims(x, w, transposed, groups, o)
    ns, fl, nb = _mm(m, k, n, _kdtype(x.dtype), g)
    return launch + ns, "native", fl, nb


def conv_backward(name, args, out, launch):
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask)
    go, x, w = args[0], args[1], args[2]
    transposed = bool(args[7])
    groups = int(args[9])
    mask = list(args[10])
    if not x.is_floating_point() or go.numel() == 0:
        return _estimate(go.numel(), _io_bytes(args, out), launch)
    m, k, n, g = _conv_dims(x, w, transposed, groups, go)
    dt = _kdtype(x.dtype)
    ns = fl = nb = 0.0
    if mask[0]:               # grad input: [M, N] @ [N, K]
        a = _mm(m, n, k, dt, g)
        ns, fl, nb = ns + a[0], fl + a[1], nb + a[2]
    if mask[1]:               # grad weight: [K, M] @ [M, N]
        a = _mm(k, m, n, dt, g)
        ns, fl, nb = ns + a[0], fl + a[1], nb + a[2]
    if len(mask) > 2 and mask[2]:
        c = go.shape[1]
        r = costs.reduction_cost(STATE.target, c, max(1, go.numel() // max(c, 1)), dt, "add")
        ns, fl, nb = ns + r[0], fl + r[1], nb + r[2]
    return launch + ns, "native", fl, int(nb)


# -- grouped matmul (MoE experts) ------------------------------------------------------------------------
def grouped_mm(name, args, out, launch):
    a, b = args[0], args[1]
    offs = args[2] if len(args) > 2 and isinstance(args[2], torch.Tensor) else None
    if not a.is_floating_point():
        return _estimate(out.numel(), _io_bytes(args, out), launch)
    dt = _kdtype(a.dtype)
    ns = fl = nb = 0.0
    if a.dim() == 2 and b.dim() == 3 and offs is not None:     # rows of a split into groups, one weight each
        ends = [int(v) for v in offs.tolist()]
        start = 0
        for end in ends:
            r = _mm(end - start, a.shape[1], b.shape[2], dt, 1)
            ns, fl, nb = ns + r[0], fl + r[1], nb + r[2]
            start = end
    elif a.dim() == 3 and b.dim() == 3:
        ns, fl, nb = _mm(a.shape[1], a.shape[2], b.shape[2], dt, a.shape[0])
    else:                                                       # other layouts: the output's flops, estimated
        k = a.shape[-1]
        return _estimate(2.0 * out.numel() * k, _io_bytes(args, out), launch, tensor_engine=True)
    return launch + ns, "native", fl, int(nb)


# -- fused linear + cross entropy --------------------------------------------------------------------------
def linear_ce(name, args, out, launch):
    """The logits matmul ``[N, H] @ [H, V]`` through the matmul kernels, plus the log-softmax over V and the
    gather of the targets as a roofline estimate; the op is marked ``estimated`` (no fused kernel)."""
    x, w = args[0], args[1]
    if not x.is_floating_point() or x.numel() == 0 or w.numel() == 0:
        return _estimate(x.numel(), _io_bytes(args, out), launch)
    n = x.numel() // x.shape[-1]
    ns, fl, nb = _mm(n, x.shape[-1], w.shape[0], _kdtype(x.dtype), 1)
    rest = costs.roofline_ns(STATE.target, 5.0 * n * w.shape[0], 0)
    return launch + ns + rest, "estimated", fl + 5.0 * n * w.shape[0], int(nb)


# -- sorting and data-dependent sizes -------------------------------------------------------------------
def _sort_flops(x, dim_len=None):
    n = x.numel()
    if n == 0:
        return 0.0
    L = dim_len if dim_len is not None else (x.shape[-1] if x.dim() else 1)
    L = max(int(L), 1)
    return float(n * max(1, math.ceil(math.log2(L))) if L > 1 else n)


def sort(name, args, out, launch):
    ts = _tensors(args, [])
    x = ts[0] if ts else None
    if x is None:
        return launch, "estimated", 0.0, 0
    dim_len = None
    if x.dim():
        pos = {"topk": 2, "kthvalue": 2}.get(name, 1)      # where the dim argument sits (sort: after stable)
        d = args[pos] if len(args) > pos and isinstance(args[pos], int) and not isinstance(args[pos], bool) \
            else next((a for a in args[1:] if isinstance(a, int) and not isinstance(a, bool)), -1)
        if -x.dim() <= d < x.dim():
            dim_len = x.shape[d]
    return _estimate(_sort_flops(x, dim_len), _io_bytes(args, out), launch)


def data_dependent(name, args, out, launch):
    """An op whose output size depends on the values: its work as a scan, plus one host read of the count."""
    ts = _tensors(args, [])
    n = max((t.numel() for t in ts), default=0)
    flops = n * (max(1, math.ceil(math.log2(n))) if name.startswith(("_unique", "unique")) and n > 1 else 1)
    return _estimate(flops, _io_bytes(args, out), launch, extra_ns=_sync_ns())


def histc(name, args, out, launch):
    x = args[0]
    mn = args[2] if len(args) > 2 else 0
    mx = args[3] if len(args) > 3 else 0
    extra = _sync_ns() if mn == mx and x.numel() else 0.0     # bounds from the data: read back (as CUDA does)
    return _estimate(2 * x.numel(), _io_bytes(args, out), launch, extra_ns=extra)


# -- normalisation over channels ------------------------------------------------------------------------
def channel_norm(name, args, out, launch):
    x = args[0]
    if x.numel() == 0 or not x.is_floating_point():
        return _estimate(x.numel(), _io_bytes(args, out), launch)
    if "group_norm" in name:
        ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]     # N, C, HxW, group
        n, g = (ints[0], ints[3]) if len(ints) >= 4 else (1, 1)
        rows = n * g
        cols = max(1, x.numel() // max(rows, 1))
    else:                    # batch norm: statistics per channel over batch and space
        rows = x.shape[1] if x.dim() > 1 else 1
        cols = max(1, x.numel() // max(rows, 1))
    r = costs.norm_cost(STATE.target, rows, cols, _kdtype(x.dtype), "layer_norm")
    if r is None:
        return _estimate(8 * x.numel(), _io_bytes(args, out), launch)
    factor = 2 if name.endswith("backward") else 1        # backward: twice the forward kernel (estimated)
    kind = "estimated" if factor == 2 else "native"
    return launch + factor * r[0], kind, factor * r[1], factor * r[2]


# -- linear algebra, FFT, everything else ---------------------------------------------------------------
def linalg(name, args, out, launch):
    ts = _tensors(args, [])
    if not ts:
        return launch, "estimated", 0.0, 0
    a = ts[0]
    if a.dim() >= 2:
        n = max(a.shape[-1], a.shape[-2])
        batch = a.numel() // max(1, a.shape[-1] * a.shape[-2])
        if "triangular" in name or name.endswith("_solve") or "solve" in name:
            b = ts[1] if len(ts) > 1 else a
            k = b.shape[-1] if b.dim() >= 2 else 1
            flops = batch * n * n * k
        else:
            flops = batch * n ** 3
    else:
        flops = a.numel()
    return _estimate(flops, _io_bytes(args, out), launch)


def fft(name, args, out, launch):
    x = args[0]
    dims = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else [x.dim() - 1]
    n = math.prod(x.shape[d] for d in dims) if x.dim() else 1
    transforms = x.numel() // max(n, 1)
    flops = 5.0 * transforms * n * max(1.0, math.log2(max(n, 2)))
    return _estimate(flops, _io_bytes(args, out), launch)


def roofline(name, args, out, launch):
    ts = _tensors(args, [])
    outs = _tensors([out], []) if out is not None else []
    flops = max([t.numel() for t in ts + outs] or [0])
    return _estimate(flops, _io_bytes(args, out), launch)


COSTS = {
    "conv": conv,
    "backward:conv": conv_backward,
    "grouped_mm": grouped_mm,
    "linear_ce": linear_ce,
    "sort": sort,
    "data_dependent": data_dependent,
    "histc": histc,
    "channel_norm": channel_norm,
    "linalg": linalg,
    "fft": fft,
    "roofline": roofline,
}
