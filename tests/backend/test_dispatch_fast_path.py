"""The elementwise fast path of ``NeuronTensor.__torch_dispatch__`` gives the same results, the same simulated time
and the same memory accounting as the general ``dispatch()`` it shortcuts."""

import pytest
import torch

from trnsim import backend
from trnsim.backend import tensor as bt


def _program(x, y):
    outs = [x + y, x * 2.5, (x - y).exp(), torch.where(x > y, x, y), x.relu(), torch.maximum(x, y),
            x.clone(), torch.lerp(x, y, 0.3), x.sigmoid() * y.tanh(), x.neg().abs(), x / y, x.eq(y)]
    z = x.clone()
    z.add_(y).mul_(3)
    z.clamp_(-1, 1)
    outs.append(z)
    h = x.to(torch.bfloat16)
    outs.append((h + h).float())
    return outs


@pytest.mark.parametrize("shape", [(8,), (3, 5), (2, 3, 4)])
def test_fast_path_matches_dispatch(monkeypatch, shape):
    torch.manual_seed(0)
    xc, yc = torch.randn(shape), torch.randn(shape) + 3
    results = {}
    for fast in (True, False):
        monkeypatch.setattr(bt, "FAST_PATH", fast)
        x, y = xc.to("neuron"), yc.to("neuron")
        mem0 = torch.neuron.memory_allocated()
        t0 = backend.simulated_time_ns()
        outs = _program(x, y)
        dt = backend.simulated_time_ns() - t0
        mem = torch.neuron.memory_allocated() - mem0
        results[fast] = ([o.cpu() for o in outs], [(o.shape, o.stride(), o.dtype) for o in outs], dt, mem)
        del outs
    (vf, mf, tf, memf), (vs, ms, ts, mems) = results[True], results[False]
    assert mf == ms
    for a, b in zip(vf, vs):
        assert torch.equal(a, b)
    assert tf == pytest.approx(ts, rel=1e-12) and tf > 0
    assert memf == mems > 0
    for a, b in zip(vf, _program(xc, yc)):               # and both equal the CPU
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_inplace_fast_path_returns_the_same_tensor():
    x = torch.randn(4, device="neuron")
    v = x[1:]
    assert v.add_(1) is v and x.mul_(2) is x
    torch.testing.assert_close(v.cpu(), x[1:].cpu())


def test_fast_path_is_taken_for_elementwise_ops_only(monkeypatch):
    calls = []
    orig = bt.dispatch

    def counting(func, args, kwargs):
        calls.append(func._opname)
        return orig(func, args, kwargs)
    monkeypatch.setattr(bt, "dispatch", counting)
    x = torch.randn(3, 3, device="neuron")
    y = (x + x).exp().mul_(2)
    assert calls == []
    y.sum()
    x @ x
    assert calls == ["sum", "mm"]


def test_fast_path_layouts_and_memory_as_user_code():
    """User code: elementwise results of strided, broadcast and channels-last inputs have the CPU's values, sizes and
    strides; a view of a fresh result keeps its bytes counted until the view dies."""
    torch.manual_seed(1)
    x = torch.randn(4, 6)
    y = torch.randn(6, 1)
    c = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    cases = [lambda x, y, c: x.t() + y, lambda x, y, c: x.t() * 2, lambda x, y, c: torch.where(x.t() > 0, y, x.t()),
             lambda x, y, c: torch.lerp(x.t(), y.expand(6, 4), 0.25), lambda x, y, c: c.exp(),
             lambda x, y, c: c + c[:, :, :1], lambda x, y, c: torch.addcmul(x, x, x, value=0.5),
             lambda x, y, c: 3.0 - x[::2]]
    dx, dy, dc = x.to("neuron"), y.to("neuron"), c.to("neuron")
    for f in cases:
        cpu, dev = f(x, y, c), f(dx, dy, dc)
        assert dev.device.type == "neuron"
        assert (dev.shape, dev.stride(), dev.dtype) == (cpu.shape, cpu.stride(), cpu.dtype)
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)
    base = torch.neuron.memory_allocated()
    r = dx + dx                              # 24 fp32 = 96 bytes
    assert torch.neuron.memory_allocated() - base == 96
    v = r[1:, ::2]
    del r
    assert torch.neuron.memory_allocated() - base == 96      # the view holds the storage
    s = v.untyped_storage()
    del v
    assert torch.neuron.memory_allocated() - base == 96      # so does the storage object
    del s
    assert torch.neuron.memory_allocated() - base == 0


def _operator_cases():
    torch.manual_seed(0)
    cases = []
    for dt in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        a, b = (torch.randn(3, 4) * 5).to(dt), (torch.randn(4) * 5).to(dt)
        cases += [(a, b), (a, 2), (a, 2.5), (a, True), (b, a)]
    return cases


def _run_operators():
    out = []
    for a, b in _operator_cases():
        x = a.to("neuron")
        y = b.to("neuron") if isinstance(b, torch.Tensor) else b
        for name in ("__add__", "__sub__", "__mul__", "__truediv__"):
            t0 = backend.simulated_time_ns()
            try:
                r = getattr(x, name)(y)
                got = (r.cpu(), r.dtype, r.shape, r.stride(), str(r.device))
            except Exception as e:         # e.g. bool - bool: the same error either way
                got = (type(e).__name__, str(e))
            out.append((name, backend.simulated_time_ns() - t0, got))
    return out


def test_python_operators_match_torchs_own_operator_path():
    """a + b, -, *, / on neuron tensors skip torch's C++ dispatcher when nothing can observe it (operators.py); the
    results, errors, simulated time and memory equal torch's own operator (through __torch_dispatch__)."""
    from trnsim.backend import operators
    runs = {}
    for installed in (True, False):
        (operators.install if installed else operators.uninstall)()
        bt.clear_charges()
        m0 = torch.neuron.memory_allocated()
        runs[installed] = (_run_operators(), torch.neuron.memory_allocated() - m0)
    operators.install()
    (fast, mem_f), (slow, mem_s) = runs[True], runs[False]
    assert mem_f == mem_s
    assert len(fast) == len(slow) == 80
    for (n1, t1, g1), (n2, t2, g2) in zip(fast, slow):
        assert n1 == n2 and t1 == pytest.approx(t2, rel=1e-12, abs=1e-6)
        if isinstance(g1[0], torch.Tensor):
            torch.testing.assert_close(g1[0], g2[0], rtol=0, atol=0, equal_nan=True)
            assert g1[1:] == g2[1:]
        else:
            assert g1 == g2
    kinds = {type(g[0]) for _, _, g in fast}
    assert kinds == {torch.Tensor, str}          # both results and errors were compared


def test_python_operators_keep_autograd_modes_and_profiler_as_user_code():
    """What the shortcut must not hide: gradients, dispatch modes and the torch profiler see the op exactly as for
    any other device.  (Forward-mode AD is not tested: make_dual on neuron tensors crashes the process with or
    without the shortcut; see docs/notes/backend.md#dispatch-speed.)"""
    from torch.utils._python_dispatch import TorchDispatchMode

    xc, yc = torch.randn(5), torch.randn(5)
    x, y = xc.to("neuron").requires_grad_(), yc.to("neuron")
    ((x * y + x) / 2 - y).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), (yc + 1) / 2)

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    a, b = xc.to("neuron"), yc.to("neuron")
    with Spy():
        a + b
        a * 3
    assert seen == ["aten.add.Tensor", "aten.mul.Tensor"]

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        a - b
    assert any(e.key == "aten::sub" for e in prof.key_averages())
