"""Turn one dispatched aten op into simulated time on the device clock (and a profile row when profiling)."""

from __future__ import annotations

import math
import os
import sys

import torch

from . import costs, native_costs
from .device_state import STATE
from .kdtypes import kdtype


_UNARY_ACT = {"exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "sigmoid": "sigmoid",
              "relu": "relu", "gelu": "gelu", "silu": "silu", "softplus": "softplus", "erf": "erf", "sin": "sin",
              "cos": "cos", "abs": "abs", "neg": "negative", "reciprocal": "reciprocal", "square": "square"}


def _first_tensor(xs):
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(x, (list, tuple)) and x and isinstance(x[0], torch.Tensor):
            return x[0]
    return None


def _tensors(xs, out):
    for x in xs:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            _tensors(x, out)
    return out


def _numel_bytes(ts):
    n = b = 0
    for t in ts:
        k = t.numel()
        n += k
        b += k * t.element_size()
    return n, b


def _main_out(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)) and out:
        return _main_out(out[0])
    return None


_FEW = 8      # reductions of at most this many values per output are costed as elementwise combines


def op_time(name, cat, args, out):
    """(ns, kind, flops, bytes) for a native op; ``args`` are the CPU payloads, ``out`` the CPU result."""
    tg = STATE.target
    if cat in ("view", "collective"):     # collectives: the process group charges them (distributed.py)
        return 0.0, "native", 0.0, 0
    if cat in ("sync",):
        return costs.host_transfer_ns(tg, 8), "native", 0.0, 8
    launch = costs.launch_ns(tg)
    if cat in native_costs.COSTS:         # ops added for models (issue 12): their costs live in native_costs.py
        return native_costs.COSTS[cat](name, args, out, launch)
    if cat in ("sdpa", "backward:sdpa"):
        return _sdpa_time(name, args, launch, backward=cat == "backward:sdpa")
    if cat.startswith("backward:"):
        r = op_time(name, cat.split(":", 1)[1], args, out if cat != "backward:sdpa" else None)
        if r[1] == "estimated":
            # no kernel: the roofline of the backward op's own operands (gradients in, gradients out) is already
            # the backward's traffic; doubling it would count it twice
            return r
        return launch + 2 * (r[0] - launch), "estimated", 2 * r[2], 2 * r[3]
    if cat in ("mm", "addmm", "bmm", "baddbmm"):
        ts = _tensors(args, [])
        if name == "linear":      # (input, weight [N, K], bias): reaches the device when called below autograd
            x, w = ts[0], ts[1]
            if not x.is_floating_point() or w.dim() != 2 or x.dim() == 0:
                return _estimate(args, out, launch, tensor_engine=x.is_floating_point())
            K, N = w.shape[1], w.shape[0]
            ns, fl, nb = costs.matmul_cost(tg, x.numel() // max(K, 1), K, N, kdtype(x.dtype))
            return launch + ns, "native", fl, nb
        if cat in ("addmm", "baddbmm"):
            ts = ts[1:]
        a, b = ts[0], ts[1]
        dt = kdtype(a.dtype)
        if not a.is_floating_point():       # the Tensor Engine takes no integers: an estimate, not its kernel
            return _estimate(args, out, launch, tensor_engine=False)
        if a.dim() == 1 or b.dim() == 1:
            return _estimate(args, out, launch, tensor_engine=True)
        batch = a.shape[0] if cat in ("bmm", "baddbmm") else 1
        M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
        ns, fl, nb = costs.matmul_cost(tg, M, K, N, dt, batch)
        return launch + ns, "native", fl, nb
    o = _main_out(out)
    if cat in ("copy", "unary", "binary", "random"):
        if o is None:
            x = _first_tensor(args)
            if x is None:
                return launch, "native", 0.0, 0
            o = x
        if isinstance(out, (list, tuple)) and len(out) > 1 and name.startswith("_foreach"):
            numel = sum(t.numel() for t in out if isinstance(t, torch.Tensor))
        elif out is None and name.startswith("_foreach"):
            numel = sum(t.numel() for t in args[0]) if isinstance(args[0], (list, tuple)) else o.numel()
        else:
            numel = o.numel()
        if numel == 0:
            return launch, "native", 0.0, 0
        dt = kdtype(o.dtype)
        if cat == "unary":
            ns, fl, nb = costs.elementwise_cost(tg, numel, dt, "unary", _UNARY_ACT.get(name.rstrip("_"), "copy"))
        elif cat == "binary":
            ns, fl, nb = costs.elementwise_cost(tg, numel, dt, "binary", "add")
        else:
            ns, fl, nb = costs.elementwise_cost(tg, numel, dt, "copy")
        return launch + ns, "native", fl, nb
    if cat in ("reduce", "reduce_max"):
        x = _first_tensor(args)
        if x is None or x.numel() == 0:
            return launch, "native", 0.0, 0
        if name.startswith("_foreach"):
            return _estimate(args, out, launch)
        on = o.numel() if o is not None else 1
        rows = max(on, 1)
        cols = max(1, x.numel() // rows)
        few = cols <= _FEW and rows >= 128 * _FEW
        lead = cols > 1 and name in ("sum", "mean") and _leading_dims(args, x)
        if few or lead:
            # a few values per output (a sum over a short outer dimension, e.g. the backward of
            # repeat_interleave), or any sum over leading dimensions (a broadcast's backward: the position
            # embedding's gradient summed over the batch): (cols - 1) elementwise combines of output-sized
            # slices, not a row reduction of short rows; over leading dimensions the cheaper of the two plans
            ns, fl, nb = costs.elementwise_cost(tg, rows, kdtype(x.dtype), "binary", "add")
            k = cols - 1 if cols > 1 else 1
            comb = (launch + k * ns, "native", k * fl, k * nb)
            if few:
                return comb
            r = costs.reduction_cost(tg, rows, cols, kdtype(x.dtype), "add")
            return comb if comb[0] <= launch + r[0] else (launch + r[0], "native", r[1], r[2])
        ns, fl, nb = costs.reduction_cost(tg, rows, cols, kdtype(x.dtype),
                                          "maximum" if cat == "reduce_max" else "add")
        return launch + ns, "native", fl, nb
    if cat in ("softmax", "log_softmax", "layer_norm", "rms_norm"):
        x = _first_tensor(args)
        if cat in ("softmax", "log_softmax"):
            d = args[1] if len(args) > 1 and isinstance(args[1], int) else -1
            cols = x.shape[d] if x.dim() else 1
        else:
            cols = math.prod(args[1]) if len(args) > 1 and isinstance(args[1], (list, tuple)) else x.shape[-1]
        rows = max(1, x.numel() // max(cols, 1))
        dt = kdtype(x.dtype)
        if cat in ("softmax", "log_softmax"):
            r = costs.softmax_cost(tg, rows, cols, dt, log=cat == "log_softmax")
        else:
            r = costs.norm_cost(tg, rows, cols, dt, cat)
        if r is None:
            return _estimate(args, out, launch)
        return launch + r[0], "native", r[1], r[2]
    if cat == "gather" and name in _GATHERS:
        return _gather_time(name, args, out, launch)
    return _estimate(args, out, launch)


# gathers whose memory traffic is what they pick, not their whole source (an embedding table, the logits)
_GATHERS = ("embedding", "index_select", "nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward",
            "nll_loss2d_backward")


def _gather_time(name, args, out, launch):
    """A gather as a roofline estimate of the bytes it moves: the indices read, and

    * ``embedding`` / ``index_select``: the picked rows read and written (twice the output), not the table;
    * ``nll_loss_forward``: one value per target read (and the loss written);
    * ``nll_loss_backward``: the dense input gradient written once (zeros but at the targets), the output
      gradient read."""
    ts = _tensors(args, [])
    outs = _tensors([out], []) if out is not None else []
    n_out, b_out = _numel_bytes(outs)
    b_idx = sum(t.numel() * t.element_size() for t in ts if not t.is_floating_point())
    if name in ("embedding", "index_select"):
        moved = 2 * b_out + b_idx
    elif name.endswith("_forward"):
        x = next((t for t in ts if t.is_floating_point()), None)
        picked = sum(t.numel() for t in ts if not t.is_floating_point()) * (x.element_size() if x is not None else 4)
        moved = picked + b_idx + b_out
    else:
        grad = ts[0].numel() * ts[0].element_size() if ts and ts[0].is_floating_point() else 0
        moved = b_out + b_idx + grad
    flops = float(n_out)
    return launch + costs.roofline_ns(STATE.target, flops, moved), "estimated", flops, moved


def _leading_dims(args, x):
    """True when a reduction's ``dim`` argument (``args[1]``) names leading dimensions of ``x`` only (``[0]``,
    ``[0, 1]``, ...), leaving at least one."""
    d = args[1] if len(args) > 1 else None
    d = [d] if isinstance(d, int) else d
    if not isinstance(d, (list, tuple)) or not d or not all(isinstance(i, int) for i in d) or x.dim() == 0:
        return False
    s = sorted({i % x.dim() for i in d})
    return s == list(range(len(s))) and len(s) < x.dim()


# where the dropout probability sits in the arguments of the attention ops that take one
_SDPA_DROPOUT_ARG = {"_scaled_dot_product_flash_attention_for_cpu": 3,
                     "_scaled_dot_product_flash_attention_for_cpu_backward": 6,
                     "_scaled_dot_product_attention_math": 4}
# is_causal follows the dropout probability in each of them (native_functions.yaml, torch 2.13)


def _sdpa_time(name, args, launch, backward=False):
    """Scaled dot-product attention (and its backward): the fused attention kernel over every (batch x head) in one
    launch (``costs.attention_cost``; the backward ``costs.attention_backward_cost``).  The flash backward's
    arguments start with the output gradient, then q, k, v."""
    tg = STATE.target
    ts = _tensors(args, [])
    if name.endswith("_for_cpu_backward") or name.endswith("sliding_window_attention_backward"):
        ts = ts[1:]
    if len(ts) < 3 or not ts[0].is_floating_point() or ts[0].dim() < 2:
        return _estimate(args, None, launch, tensor_engine=True)
    q, k = ts[0], ts[1]
    dt = kdtype(q.dtype)
    L, D, S = q.shape[-2], q.shape[-1], k.shape[-2]
    heads = q.numel() // max(1, L * D)
    i = _SDPA_DROPOUT_ARG.get(name)
    drop = args[i] if i is not None and len(args) > i and isinstance(args[i], float) else 0.0
    causal = i is not None and len(args) > i + 1 and args[i + 1] is True
    window = None
    if "sliding_window_attention" in name:     # trnsim_attn's (q, k, v, window), (grad, q, k, v, window): causal
        causal, window = True, int(args[-1])
    r = (costs.attention_backward_cost if backward else costs.attention_cost)(tg, heads, L, S, D, dt, drop,
                                                                              _token_rows_batch(q, k), causal, window)
    kind = "estimated" if backward else "native"
    if r is None:       # a head wider than one PSUM bank: the two products as matmul kernels, the softmax as its own
        ns1, f1, b1 = costs.matmul_cost(tg, L, D, S, dt, heads)
        ns2, f2, b2 = costs.matmul_cost(tg, L, S, D, dt, heads)
        sm = costs.softmax_cost(tg, heads * L, S, "float32") or (costs.roofline_ns(tg, 5 * heads * L * S, 0), 0, 0)
        m = costs.ATTN_BWD_RATIO if backward else 1.0
        r = (m * (ns1 + ns2 + sm[0]), m * (f1 + f2 + 5 * heads * L * S), m * (b1 + b2 + sm[2]))
    return launch + r[0], kind, r[1], r[2]


def _token_rows_batch(q, k):
    """The batch of ``q[B, H, L, D]`` when it and ``k`` are stored as token rows with the heads side by side (the
    view ``[B, L, H, D] -> [B, H, L, D]`` of a projection's output: ``stride(1) == D``, ``stride(2) == H x D``),
    the layout ``costs.attention_cost`` prices with the row kernel; None otherwise."""
    if q.dim() != 4 or k.dim() != 4 or k.shape[1] != q.shape[1]:
        return None
    for t in (q, k):
        B, H, L, D = t.shape
        if t.stride(3) != 1 or (H > 1 and t.stride(1) != D) or (L > 1 and t.stride(2) != H * D):
            return None
    return int(q.shape[0])


def _estimate(args, out, launch, tensor_engine=False):
    ins = _tensors(args, [])
    outs = _tensors([out], []) if out is not None else []
    n_in, b_in = _numel_bytes(ins)
    n_out, b_out = _numel_bytes(outs)
    flops = float(max(n_in, n_out))
    nbytes = b_in + b_out
    return launch + costs.roofline_ns(STATE.target, flops, nbytes, tensor_engine), "estimated", flops, nbytes


def fallback_time(args, out):
    """A CPU fallback: every device input copied to the host, every output copied back."""
    tg = STATE.target
    ins = [t for t in _tensors(args, [])]
    outs = _tensors([out], []) if out is not None else []
    _, b_in = _numel_bytes(ins)
    _, b_out = _numel_bytes(outs)
    ns = 0.0
    if ins:
        ns += costs.host_transfer_ns(tg, b_in)
    if outs:
        ns += costs.host_transfer_ns(tg, b_out)
    return ns, "fallback", 0.0, b_in + b_out


_SKIP = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))


def caller_line():
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP) and not fn.startswith("<"):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return ""


def user_stacklevel():
    """The ``stacklevel`` for ``warnings.warn`` called from the dispatch that points at the user's line."""
    f = sys._getframe(2)
    level = 2
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_SKIP) and fn != "<frozen importlib._bootstrap>":
            return level
        f = f.f_back
        level += 1
    return 2


def advance(name, ns, kind, flops, nbytes, args=None, out=None):
    start = STATE.now_ns
    STATE.now_ns = start + ns
    if STATE.profilers:
        ts = _tensors(args or (), [])
        shapes = tuple(tuple(t.shape) for t in ts)
        dtypes = tuple(str(t.dtype).replace("torch.", "") for t in ts)
        line = caller_line()
        if "::" not in name:        # an aten op's bare name (other namespaces come qualified)
            name = "aten::" + name
        for p in STATE.profilers:
            p.add(name, shapes, dtypes, start, start + ns, kind, nbytes, flops, line)
