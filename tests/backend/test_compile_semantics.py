"""TorchNeuron's torch.compile semantics on the simulated device: dynamic=True rejected, a new shape recompiles,
other modes warn and use the default, an op that cannot be lowered fails naming the op and the user's line unless
TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (then the graph runs eagerly, with a warning)."""

import pytest
import torch

from trnsim.backend.compile import NeuronCompileWarning, compile_records


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    import torch._dynamo
    torch._dynamo.reset()
    from trnsim.backend.compile import stats
    stats.reset()
    yield
    torch._dynamo.reset()


def f(x):
    return torch.sin(x) * 2 + x


def test_dynamic_true_is_rejected():
    cf = torch.compile(f, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="dynamic=True is not supported"):
        cf(torch.randn(4, 3, device="neuron"))


def test_new_shape_recompiles_statically():
    cf = torch.compile(f, backend="neuron", fullgraph=True)
    for n in (4, 6, 8):
        x = torch.randn(n, 3, device="neuron")
        assert torch.allclose(cf(x).cpu(), f(x.cpu()))
    recs = compile_records()
    assert len(recs) == 3 and all(r.cache == "miss" for r in recs)
    # the same shape again compiles nothing
    cf(torch.randn(6, 3, device="neuron"))
    assert len(compile_records()) == 3


def test_other_mode_warns_and_uses_default():
    cf = torch.compile(f, backend="neuron", mode="max-autotune")
    x = torch.randn(4, 3, device="neuron")
    with pytest.warns(NeuronCompileWarning, match="mode='max-autotune' is not supported"):
        y = cf(x)
    assert torch.allclose(y.cpu(), f(x.cpu()))


def g(x):
    y = x * 2
    z = torch.special.bessel_j0(y)          # no device kernel for aten::special_bessel_j0
    return z + 1


G_LINE = g.__code__.co_firstlineno + 2


def test_unsupported_op_fails_naming_op_and_line():
    cf = torch.compile(g, backend="neuron", fullgraph=True)
    with pytest.raises(Exception) as ei:
        cf(torch.randn(8, device="neuron"))
    msg = str(ei.value)
    assert "aten::special_bessel_j0" in msg
    assert f"{__file__}:{G_LINE}" in msg
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0" in msg


def test_unsupported_op_runs_eagerly_under_the_switch(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    cf = torch.compile(g, backend="neuron", fullgraph=True)
    x = torch.randn(8, device="neuron")
    with pytest.warns(NeuronCompileWarning, match="Running graph .* eagerly"):
        y = cf(x)
    assert torch.allclose(y.cpu(), g(x.cpu()))
    assert compile_records()[-1].cache == "failed"


def test_fallback_execution_option_overrides_env():
    cf = torch.compile(g, backend="neuron", options={"fallback_execution": True})
    x = torch.randn(8, device="neuron")
    with pytest.warns(NeuronCompileWarning):
        y = cf(x)
    assert torch.allclose(y.cpu(), g(x.cpu()))


@pytest.fixture(autouse=True)
def _bessel_without_device_kernel(monkeypatch):
    # these tests need an op with no device kernel; special_bessel_j0 became native (issue 12), so the device is
    # given one without it for the test
    from trnsim.backend import op_table, tensor
    monkeypatch.delitem(op_table.TABLE, "special_bessel_j0", raising=False)
    monkeypatch.setattr(tensor, "_INFO", {})
