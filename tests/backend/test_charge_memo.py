"""Non-elementwise ops are costed once per signature (``backend.charge_memo``): a repeated op is a memo hit, its
charge equals the formula's, and a different shape, dtype or scalar argument, a value-dependent cost category or a
target change is costed afresh.  (Dispatch speed for suites that run the same shapes thousands of times.)"""

import pytest
import torch

from trnsim import backend
from trnsim.backend import charge_memo, charging, native_costs
from trnsim.backend import tensor as bt
from trnsim.backend.device_module import reload_target


def _charge(fn):
    t0 = backend.simulated_time_ns()
    out = fn()
    return backend.simulated_time_ns() - t0, out


def test_repeated_matmul_and_reduction_hit_the_memo_with_the_formula_charge():
    a = torch.randn(16, 36, device="neuron")
    b = torch.randn(36, 84, device="neuron")
    charge_memo.clear()
    h0, m0 = charge_memo.stats["hits"], charge_memo.stats["misses"]
    first, c = _charge(lambda: torch.mm(a, b))
    second, c2 = _charge(lambda: torch.mm(a, b))
    s1, _ = _charge(lambda: a.sum(dim=1))
    s2, _ = _charge(lambda: a.sum(dim=1))
    assert charge_memo.stats["misses"] - m0 == 2
    assert charge_memo.stats["hits"] - h0 == 2
    # the memoised charge is the cost formula's, not a stale or zero value
    expect = charging.op_time("mm", "mm", (a.cpu(), b.cpu()), c.cpu())[0]
    assert first == pytest.approx(expect, rel=1e-12) and second == pytest.approx(expect, rel=1e-12) and expect > 0
    assert s1 == pytest.approx(s2, rel=1e-12) and s1 > 0
    torch.testing.assert_close(c2.cpu().double(), a.cpu().double() @ b.cpu().double(), rtol=1e-5, atol=1e-5)


def test_a_new_shape_dtype_or_scalar_argument_is_costed_afresh():
    x = torch.randn(64, 128, device="neuron")
    charge_memo.clear()
    m0 = charge_memo.stats["misses"]
    x.sum(dim=1)
    x.sum(dim=0)                                   # another scalar argument (and another result shape)
    x[:32].sum(dim=1)                              # another shape
    x.to(torch.bfloat16).sum(dim=1)                # another dtype
    assert charge_memo.stats["misses"] - m0 == 4
    t_rows, _ = _charge(lambda: x.sum(dim=1))
    t_cols, _ = _charge(lambda: x.sum(dim=0))
    ref_rows = charging.op_time("sum", "reduce", (x.cpu(), [1]), x.cpu().sum(dim=1))[0]
    ref_cols = charging.op_time("sum", "reduce", (x.cpu(), [0]), x.cpu().sum(dim=0))[0]
    assert (t_rows, t_cols) == (pytest.approx(ref_rows, rel=1e-12), pytest.approx(ref_cols, rel=1e-12))


def test_scalar_types_are_part_of_the_key():
    assert charge_memo._sig(1) != charge_memo._sig(1.0) != charge_memo._sig(True)
    assert charge_memo._sig([1, 2]) == charge_memo._sig((1, 2))      # an int list and tuple are the same dims


def test_value_dependent_and_view_categories_are_never_memoised():
    assert "data_dependent" in native_costs.COSTS
    charge_memo.clear()
    for cat in list(native_costs.COSTS) + ["view"]:
        assert cat in charge_memo._SKIP
    x = torch.randn(8, 8, device="neuron")
    x.t()
    x.view(64)
    assert not charge_memo._MEMO


def test_a_target_change_clears_the_memo(monkeypatch):
    a = torch.randn(16, 36, device="neuron")
    b = torch.randn(36, 84, device="neuron")
    torch.mm(a, b)
    assert charge_memo._MEMO
    reload_target()
    assert not charge_memo._MEMO


def test_memo_and_fresh_costing_agree_over_a_mixed_program(monkeypatch):
    """The same program charged with the memo and with every op costed from scratch takes the same simulated time."""
    torch.manual_seed(0)
    xc, wc = torch.randn(32, 48), torch.randn(48, 24)

    def program():
        x, w = xc.to("neuron"), wc.to("neuron")
        y = torch.softmax(x @ w, dim=-1)
        return (y.sum(dim=0).max() + torch.nn.functional.layer_norm(x, (48,)).mean()).cpu()

    times = []
    for memo in (True, False):
        if not memo:
            monkeypatch.setattr(bt.charge_memo, "op_time", charging.op_time)
        charge_memo.clear()
        program()                                       # warm: the second run is all memo hits
        t, out = _charge(program)
        times.append((t, out))
    assert times[0][0] == pytest.approx(times[1][0], rel=1e-12) and times[0][0] > 0
    assert torch.equal(times[0][1], times[1][1])
