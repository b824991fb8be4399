"""The lean dispatch paths charge exactly what the general path charges: one model, no path that skips or changes
a charge.

* A mixed program (elementwise ops through Python's operators, kwargs, reductions, matmuls in fp32 and bf16 (fp32
  accumulation), views, in-place and ``out=`` ops, dtype conversions, lists of tensors, random ops, a factory with
  ``device=``, autograd's backward) takes the same simulated time after every statement with every shortcut on
  (the dispatcher-free operators, ``__torch_dispatch__``'s elementwise and view paths, the per-op dispatch plan,
  the charge memos) as with all of them off and a profiler recording (the path on which every op is costed by
  ``charging.op_time`` from scratch).
* Each op's charge, seen from a TorchDispatchMode around the device, is ``charging.op_time`` of that op's payloads.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trnsim import backend
from trnsim.backend import charge_memo, charging, operators
from trnsim.backend import tensor as bt
from trnsim.backend.device_state import STATE
from trnsim.backend.op_table import TABLE


def _program(x, y, w, idx, record):
    """Run the statements, calling ``record()`` after each (the simulated clock is read there)."""
    steps = [
        lambda: x + y, lambda: x * 2.0, lambda: x - y, lambda: x / (y.abs() + 1), lambda: -x,
        lambda: torch.add(x, y, alpha=0.5), lambda: x.sum(), lambda: x.sum(dim=1), lambda: x.mean(dim=0),
        lambda: torch.mm(x, w), lambda: x @ w, lambda: x.to(torch.bfloat16) @ w.to(torch.bfloat16),
        lambda: x.t(), lambda: x.view(-1), lambda: x.reshape(4, -1), lambda: x[1:3],
        lambda: x.to(torch.float16), lambda: x.float(), lambda: torch.cat([x, y]), lambda: torch.stack([x, y], 1),
        lambda: torch.softmax(x, dim=-1), lambda: torch.nn.functional.layer_norm(x, (x.shape[-1],)),
        lambda: torch.nn.functional.dropout(x, 0.25, training=True), lambda: torch.rand_like(x),
        lambda: torch.zeros(3, 5, device=x.device), lambda: torch.where(x > 0, x, y),
        lambda: torch.nn.functional.embedding(idx, w.t().contiguous()), lambda: x.index_select(0, idx),
        lambda: x.max(dim=1), lambda: x.abs().amax(), lambda: x.clone().add_(y).mul_(2),
        lambda: torch.add(x, y, out=torch.empty_like(x)), lambda: x.to(torch.int8).to(torch.float32),
        lambda: x.detach(), lambda: x.unsqueeze(0).expand(2, 6, 8), lambda: x.split(4, dim=1),
        lambda: x.t().reshape(-1),
    ]
    outs = []
    for s in steps:
        outs.append(s())
        record()
    # autograd: forward and backward of a small linear layer
    lin = w.detach().clone().requires_grad_()
    loss = torch.nn.functional.gelu(x @ lin).pow(2).mean()
    record()
    loss.backward()
    record()
    outs.append(lin.grad)
    return outs


def _run(lean, monkeypatch):
    torch.manual_seed(0)
    xc, yc, wc = torch.randn(6, 8), torch.randn(6, 8), torch.randn(8, 5)
    idx_c = torch.tensor([0, 2, 4, 1])
    with monkeypatch.context() as m:
        if not lean:
            m.setattr(bt, "FAST_PATH", False)
            m.setattr(charge_memo, "op_time", charging.op_time)
            operators.uninstall()
        bt.clear_charges()
        x, y, w, idx = (t.to("neuron") for t in (xc, yc, wc, idx_c))
        torch.neuron.manual_seed(1)
        times = []
        t0 = backend.simulated_time_ns()

        def record():
            times.append(backend.simulated_time_ns() - t0)
        try:
            if lean:
                outs = _program(x, y, w, idx, record)
            else:
                with backend.profile_torch() as prof:
                    outs = _program(x, y, w, idx, record)
                assert len(prof.rows) > 40      # the reference path charged every op through charging.advance
        finally:
            operators.install()
        vals = [o.cpu() if isinstance(o, torch.Tensor) else tuple(t.cpu() for t in o) for o in outs]
    return times, vals


def test_every_shortcut_on_or_off_gives_the_same_timeline(monkeypatch):
    lean_times, lean_vals = _run(True, monkeypatch)
    # the view ops took tensor._view (their entry is made on first dispatch)
    assert {id(torch.ops.aten.t.default), id(torch.ops.aten.split.Tensor)} <= set(bt._VIEWS)
    ref_times, ref_vals = _run(False, monkeypatch)
    assert lean_times[-1] > 0
    assert len(lean_times) == len(ref_times)
    for i, (a, b) in enumerate(zip(lean_times, ref_times)):
        assert a == pytest.approx(b, rel=1e-12), f"statement {i}: {a} ns with the shortcuts, {b} ns without"
    for a, b in zip(lean_vals, ref_vals):
        if isinstance(a, tuple):
            assert all(torch.equal(p, q) for p, q in zip(a, b))
        else:
            assert torch.equal(a, b)


class _Charges(TorchDispatchMode):
    """Records, for each aten op on device tensors, its charge and the charge ``charging.op_time`` gives its
    payloads (computed here, from scratch)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t0 = STATE.now_ns
        out = func(*args, **kwargs)
        charged = STATE.now_ns - t0
        name = func._opname
        cat = TABLE.get(name) if func.namespace == "aten" else None
        if cat is not None and cat != "random":     # (the cost formulas read the positional arguments)
            def pay(a):
                return a._p if bt.on_device(a) else a
            ua = tuple(pay(a) if not isinstance(a, (list, tuple)) else type(a)(pay(b) for b in a) for a in args)
            uo = pay(out) if not isinstance(out, (list, tuple)) else type(out)(pay(o) for o in out)
            self.rows.append((name, charged, charging.op_time(name, cat, ua, uo)[0]))
        return out


def test_each_op_is_charged_its_cost_formula():
    x = torch.randn(16, 32, device="neuron")
    w = torch.randn(32, 24, device="neuron")
    h = w.to(torch.bfloat16)
    bt.clear_charges()
    with _Charges() as mode:
        for _ in range(3):          # the second and third rounds are memo hits
            torch.mm(x, w)
            x.to(torch.bfloat16) @ h
            x.sum(dim=1)
            torch.softmax(x, dim=-1)
            x.t()
            x.view(8, 64)
            x * 3.0
            torch.add(x, x)
            x.exp()
    names = {r[0] for r in mode.rows}
    assert {"mm", "sum", "_softmax", "t", "view", "mul", "add", "exp", "_to_copy"} <= names
    assert any(r[2] > 0 for r in mode.rows)
    for name, charged, formula in mode.rows:
        assert charged == pytest.approx(formula, rel=1e-12, abs=1e-9), name
