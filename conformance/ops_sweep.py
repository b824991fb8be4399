"""The PyTorch op sweep: every OpInfo of ``op_db`` x dtype x sample, run on the simulated ``neuron`` device and on
the CPU, compared, and classified ``native`` / ``fallback`` / ``mismatch`` / ``error`` / ``skip``.

Comparison uses ``torch.testing.assert_close``'s tolerances for the dtype (the ones PyTorch's own OpInfo tests use
by default).  When the device's result (or gradient) is outside them, the sample is also computed on the CPU in float64 from
the same inputs: if every element of the device's result is within the dtype's tolerance of that exact result, or
no farther from it than the CPU's own low-precision result, the device is right and the CPU rounds differently
(typically: the device accumulates bf16/fp16 in fp32, the CPU kernel in the low precision); the sample counts as
matched and the record says so.  No tolerance is widened.

The process running this must have the ``neuron`` device registered (``TORCHNEURON_TARGET=sim`` before torch is
imported); :mod:`conformance.runner` starts such worker processes.
"""

from __future__ import annotations

import fnmatch
import math
import signal
import time
import warnings

__all__ = ["list_ops", "op_key", "run_op", "DEFAULT_DTYPES", "RANDOM_OPS"]

DEFAULT_DTYPES = ("float32", "bfloat16", "float16", "int64", "bool")

# ops whose results are random (or uninitialised memory) by nature: their values cannot be compared
RANDOM_OPS = ("bernoulli", "multinomial", "normal", "normal.*", "rand_like", "randn_like", "randint_like",
              "randint", "uniform", "cauchy", "exponential", "geometric", "log_normal", "nn.functional.dropout*",
              "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout*", "nn.functional.rrelu",
              "*dropout*", "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
              "new_empty_strided", "nn.functional.gumbel_softmax", "randn", "rand", "torch._refs.*", "_refs.*",
              "nn.functional.multi_head_attention_forward", "nn.functional.scaled_dot_product_attention*")
# the last two draw dropout masks inside: their samples without dropout are compared (see _SEPARABLE)
_RANDOM_REASON = "random or uninitialised values by nature (not comparable sample by sample)"
_RANDOM_SAMPLE = "this sample draws random values (dropout or rrelu in training)"

# random ops whose samples can be told apart: (fnmatch pattern, the sample is deterministic)
_SEPARABLE = (
    ("nn.functional.scaled_dot_product_attention*", lambda op, s: _arg(op, s, "dropout_p", 0.0) == 0),
    ("nn.functional.multi_head_attention_forward", lambda op, s: _arg(op, s, "training", True) is False),
    ("native_dropout_backward", lambda op, s: True),      # (grad, mask, scale): no random draw
    ("nn.functional.rrelu", lambda op, s: _arg(op, s, "training", False) is False),
    ("nn.functional.*dropout*", lambda op, s: _arg(op, s, "training", True) is False or _arg(op, s, "p", 0.5) == 0),
)


def _arg(op, sample, name, default):
    """A keyword of ``sample`` or, when absent, the default in the signature of the OpInfo's function."""
    if name in sample.kwargs:
        return sample.kwargs[name]
    import inspect
    try:
        prm = inspect.signature(op.op).parameters.get(name)
    except (TypeError, ValueError):
        prm = None
    return prm.default if prm is not None and prm.default is not inspect.Parameter.empty else default


def _separable(op):
    k = op_key(op)
    return next((f for pat, f in _SEPARABLE if fnmatch.fnmatchcase(k, pat)), None)


def op_key(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _op_db():
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def list_ops(pattern=None):
    """OpInfos whose key (``name`` or ``name.variant``) matches the fnmatch ``pattern`` (comma-separated)."""
    ops = _op_db()
    if not pattern:
        return list(ops)
    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    return [o for o in ops if any(fnmatch.fnmatchcase(op_key(o), p) for p in pats)]


def _is_random(op):
    k = op_key(op)
    return getattr(op, "has_nondeterministic_output", False) or any(fnmatch.fnmatchcase(k, p) for p in RANDOM_OPS)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


# -- moving data ---------------------------------------------------------------------------------------------
def _map(x, fn):
    import torch
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        out = [_map(v, fn) for v in x]
        return type(x)(out) if not hasattr(x, "_fields") else type(x)(*out)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _moved(t, device):
    """``t`` on ``device``; a view is re-made as the same view of its moved base, so that storage offsets and
    aliasing mean on the device what they meant on the CPU (``.to()`` of a view alone copies just the view)."""
    base = t._base
    if base is not None and base.layout == t.layout:
        try:
            b = base.detach().to(device)
            return b.as_strided(t.shape, t.stride(), t.storage_offset())
        except Exception:
            pass
    return t.detach().to(device)


def _to_dev(device):
    def fn(t):
        if not hasattr(t, "_base"):        # SampleInput.transform also hands over dtypes and other leaves
            return t
        r = _moved(t, device)
        if t.requires_grad:
            r.requires_grad_(True)
        return r
    return fn


def _to_cpu(t):
    return t.detach().to("cpu")


def _tensors(x):
    import torch
    out = []
    _map(x, lambda t: out.append(t) or t)
    return [t for t in out if isinstance(t, torch.Tensor)]


def _devices(x):
    return {t.device.type for t in _tensors(x)}


# -- comparing ----------------------------------------------------------------------------------------------
def _worst(actual, expected):
    """(index, got, want) of the element farthest outside the dtype's tolerance, for the report."""
    import torch
    from torch.testing._comparison import default_tolerances
    a, e = actual, expected
    if a.shape != e.shape or a.numel() == 0:
        return None
    if a.dtype == torch.bool or e.dtype == torch.bool:
        score = (a != e).to(torch.float64)
    else:
        a64, e64 = a.to(torch.float64), e.to(torch.float64)
        rtol, atol = default_tolerances(a, e)
        score = (a64 - e64).abs() - (atol + rtol * e64.abs())
        score = torch.where(torch.isnan(a64) != torch.isnan(e64), torch.full_like(score, math.inf),
                            torch.nan_to_num(score, nan=-math.inf))
    i = int(torch.argmax(score.reshape(-1)))
    idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), a.shape)) if a.dim() else ()
    return idx, a.reshape(-1)[i].item(), e.reshape(-1)[i].item()


def _close(actual, expected):
    """``None`` if ``actual`` matches ``expected`` with the dtype's default tolerances, else a description."""
    import torch
    ta, te = _tensors(actual), _tensors(expected)
    if len(ta) != len(te):
        return f"{len(ta)} tensor outputs, expected {len(te)}"
    if not ta and actual != expected:
        try:
            if isinstance(actual, float) and isinstance(expected, float) and math.isclose(actual, expected,
                                                                                       rel_tol=1.3e-6):
                return None
        except TypeError:
            pass
        return f"got {actual!r}, expected {expected!r}"
    for i, (a, e) in enumerate(zip(ta, te)):
        try:
            torch.testing.assert_close(a, e, equal_nan=True, check_device=False, check_stride=False,
                                       check_layout=False)
        except AssertionError as err:
            w = _worst(a, e) if a.dtype == e.dtype else None
            first = str(err).strip().splitlines()[0]
            if w is not None:
                return f"output {i}: {first} worst at {list(w[0])}: got {w[1]!r}, expected {w[2]!r}"
            return f"output {i}: {first}"
    return None


def _error_text(e):
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:200] if msg else ''}"


# -- running one op ------------------------------------------------------------------------------------------
def _fallback_total():
    try:
        import trnsim.backend as b
    except ImportError:
        return 0
    return sum(b.fallback_counts().values())


def _retarget(sample, device):
    """A ``device=`` keyword that names the CPU (factory-like ops: ``full_like(..., device="cpu")``) names the
    device under test instead, as PyTorch's device-generic tests build their samples."""
    dv = sample.kwargs.get("device")
    if dv is not None and str(dv).startswith("cpu"):
        sample.kwargs = dict(sample.kwargs, device=device)
    return sample


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _float64_closer(op, sample, dev_out_cpu, cpu_out):
    """Whether the device result is at least as close to a float64 computation as the CPU's result is."""
    import torch
    s64 = sample.transform(lambda t: t.to(torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point()
                           else t)
    try:
        ref = _call(op, s64)
    except Exception:
        return False
    return _float64_closer_tensors(_tensors(dev_out_cpu), _tensors(cpu_out), _tensors(ref))


def _float64_closer_tensors(rd, rc, rr):
    import torch
    rd = [t for t in rd if t is not None]
    rc = [t for t in rc if t is not None]
    rr = [t for t in rr if t is not None]
    if not (len(rd) == len(rc) == len(rr)) or not rd:
        return False
    for d, c, r in zip(rd, rc, rr):
        if d.shape != r.shape or not d.is_floating_point():
            return False
        d64, c64, r64 = d.to(torch.float64), c.to(torch.float64), r.to(torch.float64)
        ed = (d64 - r64).abs().nan_to_num(nan=0.0)
        ec = (c64 - r64).abs().nan_to_num(nan=0.0)
        if torch.isnan(d64).ne(torch.isnan(r64)).any():
            return False
        # each element: within the dtype's own tolerance of the float64 result, or no farther from it than the CPU
        from torch.testing._comparison import default_tolerances
        rtol, atol = default_tolerances(d)
        if (ed > torch.maximum(ec, atol + rtol * r64.abs())).any():
            return False
    return True


def _sample_forward(op, sample, device):
    """``(status, detail)`` for one forward sample."""
    import torch
    try:
        cpu_out = _call(op, sample)
    except Exception as e:
        return "skip", f"the CPU raises too: {_error_text(e)}"
    dev_sample = _retarget(sample.transform(_to_dev(device)), device)
    fb0 = _fallback_total()
    try:
        dev_out = _call(op, dev_sample)
        if isinstance(dev_out, torch.Tensor) or _tensors(dev_out):
            devs = _devices(dev_out)
            ins = _devices([dev_sample.input, list(dev_sample.args), dev_sample.kwargs])
            to_host = any(str(a).startswith("cpu") for a in list(dev_sample.args) + list(dev_sample.kwargs.values())
                          if isinstance(a, (str, torch.device)))      # x.to("cpu") is meant to land on the host
            if device in ins and devs and devs != {device} and not to_host:
                return "error", f"output on {sorted(devs)}, inputs on {device}"
        dev_cpu = _map(dev_out, _to_cpu)
    except _Timeout:
        raise
    except Exception as e:
        return "error", _error_text(e)
    fell_back = _fallback_total() > fb0
    bad = _close(dev_cpu, cpu_out)
    if bad is not None:
        if _float64_closer(op, sample, dev_cpu, cpu_out):
            return ("fallback" if fell_back else "native"), "matched the float64 reference at least as well as the CPU"
        return "mismatch", bad
    return ("fallback" if fell_back else "native"), ""


def _sample_backward(op, sample, device):
    import torch
    leaves = [t for t in _tensors([sample.input, list(sample.args), sample.kwargs]) if t.requires_grad]
    if not leaves:
        return "skip", "no input requires grad"
    try:
        out = _call(op, sample)
        outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
        if not outs:
            return "skip", "no differentiable output"
        gen = torch.Generator().manual_seed(0)
        gos = [torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.dtype) for t in outs]
        cpu_grads = torch.autograd.grad(outs, leaves, gos, allow_unused=True)
    except Exception as e:
        return "skip", f"the CPU backward raises: {_error_text(e)}"
    mapping = {}

    def to_dev(t):
        if not hasattr(t, "_base"):
            return t
        r = _moved(t, device)
        if t.requires_grad:
            r.requires_grad_(True)
            mapping[id(t)] = r
        return r
    dev_sample = _retarget(sample.transform(to_dev), device)
    dev_leaves = [mapping[id(t)] for t in leaves if id(t) in mapping]
    fb0 = _fallback_total()
    try:
        dout = _call(op, dev_sample)
        douts = [t for t in _tensors(dout) if t.requires_grad and t.is_floating_point()]
        dgrads = torch.autograd.grad(douts, dev_leaves, [g.to(device) for g in gos], allow_unused=True)
        dgrads_cpu = [None if g is None else g.detach().to("cpu") for g in dgrads]
    except _Timeout:
        raise
    except Exception as e:
        return "error", _error_text(e)
    fell_back = _fallback_total() > fb0
    ok = "fallback" if fell_back else "native"
    bad = None
    for i, (g, c) in enumerate(zip(dgrads_cpu, cpu_grads)):
        if (g is None) != (c is None):
            return "mismatch", f"gradient {i}: {'missing' if g is None else 'unexpected'} on the device"
        if g is None:
            continue
        b = _close(g, c)
        if b is not None:
            bad = f"gradient of input {i}: {b}"
            break
    if bad is None:
        return ok, ""
    ref = _grads_float64(op, sample, leaves, gos)
    if ref is not None and _float64_closer_tensors(dgrads_cpu, cpu_grads, ref):
        return ok, "matched the float64 reference at least as well as the CPU"
    return "mismatch", bad


def _grads_float64(op, sample, leaves, gos):
    """Gradients of the same sample computed in float64 on the CPU (``None`` if that cannot be done)."""
    import torch
    mapping = {}

    def up(t):
        r = t.detach().to(torch.float64) if t.is_floating_point() else t.detach().clone()
        if t.requires_grad:
            r.requires_grad_(True)
            mapping[id(t)] = r
        return r
    try:
        s64 = sample.transform(up)
        leaves64 = [mapping[id(t)] for t in leaves]
        out = _call(op, s64)
        outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
        if len(outs) != len(gos):
            return None
        return torch.autograd.grad(outs, leaves64, [g.to(torch.float64) for g in gos], allow_unused=True)
    except Exception:
        return None


def _dtype(name):
    import torch
    return getattr(torch, name)


def run_op(op, dtypes=DEFAULT_DTYPES, modes=("forward", "backward"), device="neuron", max_samples=None,
           timeout_s=60.0):
    """Records (one per dtype x mode) for OpInfo ``op``."""
    import torch
    key = op_key(op)
    records = []
    separable = _separable(op)
    random_op = _is_random(op) and separable is None
    use_alarm = hasattr(signal, "SIGALRM")
    for dn in dtypes:
        dt = _dtype(dn)
        for mode in modes:
            rec = {"suite": "ops", "name": key, "dtype": dn, "mode": mode, "status": "skip",
                   "counts": {}, "samples": 0, "detail": "", "seconds": 0.0}
            records.append(rec)
            if random_op:
                rec["detail"] = _RANDOM_REASON
                continue
            if not op.supports_dtype(dt, "cpu"):
                rec["detail"] = f"the OpInfo does not list {dn} for the CPU"
                continue
            if mode == "backward":
                if not (op.supports_autograd and dt.is_floating_point):
                    rec["detail"] = "not differentiable in this dtype"
                    continue
                if dt not in op.supported_backward_dtypes("cpu"):
                    rec["detail"] = f"the OpInfo does not list {dn} for backward on the CPU"
                    continue
            t0 = time.perf_counter()
            counts = {}
            details = {}
            try:
                if use_alarm:
                    signal.signal(signal.SIGALRM, _alarm)
                    signal.setitimer(signal.ITIMER_REAL, timeout_s)
                torch.manual_seed(0)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    samples = op.sample_inputs("cpu", dt, requires_grad=(mode == "backward"))
                    compared = 0
                    for s in samples:
                        if max_samples is not None and compared >= max_samples:
                            break
                        if separable is not None and not separable(op, s):
                            st, d = "skip", _RANDOM_SAMPLE
                        else:
                            compared += 1
                            st, d = (_sample_forward if mode == "forward" else _sample_backward)(op, s, device)
                        counts[st] = counts.get(st, 0) + 1
                        if d and st not in details:
                            details[st] = d
            except _Timeout:
                counts["error"] = counts.get("error", 0) + 1
                details.setdefault("error", f"timeout after {timeout_s:.0f} s")
            except Exception as e:       # sample generation itself failed
                counts["error"] = counts.get("error", 0) + 1
                details.setdefault("error", f"sample inputs: {_error_text(e)}")
            finally:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            rec["seconds"] = round(time.perf_counter() - t0, 4)
            rec["counts"] = counts
            rec["samples"] = sum(counts.values())
            for st in ("mismatch", "error", "fallback", "native", "skip"):
                if counts.get(st):
                    rec["status"] = st
                    break
            rec["detail"] = details.get(rec["status"], "") or details.get("skip", "")
    return records
