"""Registration, torch.neuron, tensors, views, in-place ops, printing, RNG, memory, save/load."""

import io
import os
import subprocess
import sys

import pytest
import torch

from trnsim import backend


def test_device_and_moves():
    d = torch.device("neuron")
    x = torch.arange(6.0).reshape(2, 3)
    for y in (x.to("neuron"), x.neuron(), x.to(d)):
        assert y.device == torch.device("neuron", 0) and y.is_neuron
        assert torch.equal(y.cpu(), x)
    m = torch.nn.Linear(3, 2).to("neuron")
    assert m.weight.device.type == "neuron"
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.is_available()
    torch.accelerator.synchronize()


def test_torch_neuron_module():
    n = torch.neuron
    # trn2.48xlarge: 16 chips x 8 physical cores / LNC 2 (trnsim/collectives/topology.py, targets.py)
    assert n.is_available() and n.device_count() == 64 and n.current_device() == 0
    n.set_device(0)
    with pytest.raises(RuntimeError, match=r"neuron:64 does not exist: .* 64 logical NeuronCores"):
        n.set_device(64)
    assert n.get_device_name() == "Trainium2 (simulated)"
    n.synchronize()
    s = n.current_stream()
    with n.stream(n.Stream()):
        pass
    assert s.query()


def _env_without_sim(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHNEURON_TARGET", "TORCHNEURON_FALLBACK")}
    env.update(extra)
    return env


def test_env_unset_registers_nothing_and_refuses_a_real_backend():
    code = ("import torch, sys\nprint(hasattr(torch, 'neuron'), torch._C._get_privateuse1_backend_name())\n"
            "torch.utils.rename_privateuse1_backend('neuron')   # as a real Neuron backend would\n"
            "import trnsim.backend as b\ntry:\n    b.register()\nexcept b.NeuronBackendConflict as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_env_without_sim(), capture_output=True, text=True,
                         check=True)
    first, rest = out.stdout.split("\n", 1)
    assert first.split() == ["False", "privateuseone"]
    assert "refused: trnsim cannot register" in rest and "already registered as 'neuron'" in rest


def test_env_sim_registers_at_import_torch():
    code = "import torch\nx = torch.ones(2, device='neuron'); print(x.device, torch.neuron.get_device_name())\n"
    out = subprocess.run([sys.executable, "-c", code], env=_env_without_sim(TORCHNEURON_TARGET="sim"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "neuron:0 Trainium2 (simulated)"


def test_fallback_error_env(monkeypatch):
    from trnsim.backend.device_state import DeviceState
    monkeypatch.setenv("TORCHNEURON_FALLBACK", "error")
    assert DeviceState().fallback_mode == "error"
    monkeypatch.delenv("TORCHNEURON_FALLBACK")
    assert DeviceState().fallback_mode == "warn"


def test_printing_and_host_access():
    x = torch.tensor([1.5, 2.0], device="neuron")
    assert repr(x) == "tensor([1.5000, 2.0000], device='neuron:0')"
    assert x.tolist() == [1.5, 2.0]
    assert f"{x[0]:.1f}" == "1.5"
    assert x.sum().item() == 3.5
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        x.numpy()


def test_views_and_inplace():
    x = torch.zeros(3, 4, device="neuron")
    v = x.view(4, 3)
    x[1].add_(2)
    x.t()[0].fill_(5)
    ref = torch.zeros(3, 4)
    ref[1].add_(2)
    ref.t()[0].fill_(5)
    assert torch.equal(x.cpu(), ref) and torch.equal(v.cpu(), ref.view(4, 3))
    out = torch.empty(3, 4, device="neuron")
    r = torch.add(x, 1, out=out)
    assert r is out and torch.equal(out.cpu(), ref + 1)
    parts = torch.split(x, 2, dim=1)
    assert torch.equal(torch.cat(parts, 1).cpu(), ref)
    assert torch.equal(torch.stack([x, x]).cpu(), torch.stack([ref, ref]))


def test_gather_scatter_index():
    src = torch.randn(5, 4)
    idx = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 3], [0, 0]])
    s, i = src.to("neuron"), idx.to("neuron")
    assert torch.equal(torch.gather(s, 1, i).cpu(), torch.gather(src, 1, idx))
    assert torch.equal(s.index_select(0, i[:, 0]).cpu(), src.index_select(0, idx[:, 0]))
    z = torch.zeros(5, 4, device="neuron").scatter_(1, i, 1.0)
    assert torch.equal(z.cpu(), torch.zeros(5, 4).scatter_(1, idx, 1.0))
    w = torch.zeros(5, 4, device="neuron")
    w[i[:, 0], i[:, 1]] = 7.0
    ref = torch.zeros(5, 4)
    ref[idx[:, 0], idx[:, 1]] = 7.0
    assert torch.equal(w.cpu(), ref)
    assert backend.fallback_counts() == {}


def test_cross_device_error():
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    assert torch.equal((a + torch.tensor(1.0)).cpu(), torch.full((3,), 2.0))   # 0-dim CPU scalars are allowed


def test_seeded_determinism_and_rng_state():
    torch.neuron.manual_seed(123)
    a = torch.randn(4, device="neuron")
    st = torch.neuron.get_rng_state()
    b = torch.rand(4, device="neuron")
    torch.neuron.manual_seed(123)
    assert torch.equal(torch.randn(4, device="neuron").cpu(), a.cpu())
    torch.neuron.set_rng_state(st)
    assert torch.equal(torch.rand(4, device="neuron").cpu(), b.cpu())
    assert torch.neuron.initial_seed() == 123
    torch.manual_seed(7)       # torch's global seed reaches the device generator too
    d1 = torch.nn.functional.dropout(torch.ones(64, device="neuron"), 0.5)
    torch.manual_seed(7)
    d2 = torch.nn.functional.dropout(torch.ones(64, device="neuron"), 0.5)
    assert torch.equal(d1.cpu(), d2.cpu()) and set(d1.cpu().unique().tolist()) <= {0.0, 2.0}


def test_memory_accounting_and_oom():
    n = torch.neuron
    base = n.memory_allocated()
    x = torch.empty(1024, 256, device="neuron")          # 1 MiB
    assert n.memory_allocated() - base == 1024 * 256 * 4
    v = x.view(-1)                                        # views share the storage: counted once
    assert n.memory_allocated() - base == 1024 * 256 * 4
    n.reset_peak_memory_stats()
    del x, v
    assert n.memory_allocated() == base
    assert n.max_memory_allocated() >= base + 1024 * 256 * 4
    assert n.memory_stats()["capacity_bytes"] == 24 * 1024 ** 3     # trn2: 96 GiB / 4 logical cores (LNC=2)
    with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 1\.00 TiB|Tried to allocate 1024\.00 GiB"):
        torch.empty(1024 ** 4, dtype=torch.uint8, device="neuron")    # refused before any host allocation
    try:
        n.set_per_process_memory_fraction(2 ** -20)      # 24 KiB
        with pytest.raises(torch.OutOfMemoryError) as ei:
            torch.ones(64, 1024, device="neuron")
        msg = str(ei.value)
        assert "neuron out of memory" in msg and "total capacity" in msg and "peak" in msg
    finally:
        n.set_per_process_memory_fraction(1.0)


def test_save_load_weights_only():
    m = torch.nn.Linear(3, 2).to("neuron")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    assert sd["weight"].device.type == "neuron"
    assert torch.equal(sd["weight"].cpu(), m.weight.detach().cpu())
    m2 = torch.nn.Linear(3, 2).to("neuron")
    m2.load_state_dict(sd)
    assert torch.equal(m2.bias.detach().cpu(), m.bias.detach().cpu())


def test_autocast_bf16_and_dtype_cast():
    m = torch.nn.Linear(8, 4).to("neuron")
    x = torch.randn(2, 8, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = m(x)
        ls = torch.log_softmax(y, -1)
    assert y.dtype == torch.bfloat16 and ls.dtype == torch.float32
    m.to(torch.bfloat16)
    assert m.weight.dtype == torch.bfloat16 and m.weight.device.type == "neuron"


def test_adamw_takes_the_foreach_path():
    from torch.optim.optimizer import _default_to_fused_or_foreach
    p = [torch.nn.Parameter(torch.ones(3, device="neuron"))]
    assert _default_to_fused_or_foreach(p, differentiable=False, use_fused=False) == (False, True)
