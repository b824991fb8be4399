"""Module and tensor semantics of the ``neuron`` device, written as user code and compared with the same code on
the CPU (or, where the CPU has no device move to compare with, with what torch documents for CUDA): parameter
identity and ties through ``Module.to``, ``torch.__future__`` conversion flags, ``param.data`` across devices,
``copy.deepcopy``, ``torch.save``/``torch.load`` with every ``map_location`` form, storage APIs and gradient device
checks of custom autograd Functions."""

import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


class TiedLM(nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, idx):
        h = self.embed(idx)
        h = h + torch.tanh(self.mlp(self.norm(h)))
        return self.lm_head(h)


def _tied(seed=0):
    torch.manual_seed(seed)
    return TiedLM()


def _train(model, device, steps=3, opt=None):
    """A few AdamW steps; returns the losses and the gradients of the last step (on the CPU)."""
    torch.manual_seed(1)
    data = torch.randint(0, 32, (4, 8))
    opt = opt or torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        idx = data.to(device)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    return losses, grads


def test_to_device_keeps_parameter_identity_and_ties():
    m = _tied()
    before = {n: p for n, p in m.named_parameters()}
    n_before = sum(1 for _ in m.parameters())
    m.to("neuron")
    assert m.lm_head.weight is m.embed.weight
    assert sum(1 for _ in m.parameters()) == n_before
    for n, p in m.named_parameters():
        assert p is before[n], n
        assert p.device.type == "neuron" and isinstance(p, nn.Parameter) and p.requires_grad
    # the same code on the CPU (a dtype move) keeps identity and ties too
    c = _tied()
    w = c.embed.weight
    c.to(torch.float64)
    assert c.embed.weight is w and c.lm_head.weight is c.embed.weight


def test_tied_model_trains_like_cpu_with_an_optimizer_built_before_the_move():
    cpu = _tied()
    dev = _tied()
    opt = torch.optim.AdamW(dev.parameters(), lr=1e-2)      # built on the CPU parameters
    dev.to("neuron")
    l_cpu, g_cpu = _train(cpu, "cpu")
    l_dev, g_dev = _train(dev, "neuron", opt=opt)
    torch.testing.assert_close(torch.tensor(l_dev), torch.tensor(l_cpu), rtol=1e-5, atol=1e-5)
    assert g_dev.keys() == g_cpu.keys()
    for n in g_cpu:
        torch.testing.assert_close(g_dev[n], g_cpu[n], rtol=1e-4, atol=1e-5, msg=n)
    for (n, p), (_, q) in zip(dev.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5, msg=n)
    assert dev.lm_head.weight is dev.embed.weight


def test_dtype_move_after_device_move_keeps_ties_and_back_to_cpu():
    m = _tied().to("neuron")
    w = m.embed.weight
    m.to(torch.float64)
    assert m.embed.weight is w and m.lm_head.weight is w and w.dtype == torch.float64 and w.device.type == "neuron"
    m.to("cpu")
    assert m.embed.weight is w and m.lm_head.weight is w and w.device.type == "cpu"
    assert type(w) is nn.Parameter
    ref = _tied().to(torch.float64)
    torch.testing.assert_close(w.detach(), ref.embed.weight.detach())


def test_grad_moves_with_the_module():
    cpu = _tied()
    _train(cpu, "cpu", steps=1)
    g = {n: p.grad.clone() for n, p in cpu.named_parameters()}
    cpu.to("neuron")
    for n, p in cpu.named_parameters():
        assert p.grad is not None and p.grad.device.type == "neuron", n
        torch.testing.assert_close(p.grad.cpu(), g[n])


@pytest.mark.parametrize("flag", ["overwrite", "swap"])
def test_future_conversion_flags_behave_as_for_a_cpu_dtype_move(flag):
    setter = {"overwrite": torch.__future__.set_overwrite_module_params_on_conversion,
              "swap": torch.__future__.set_swap_module_params_on_conversion}[flag]
    getter = {"overwrite": torch.__future__.get_overwrite_module_params_on_conversion,
              "swap": torch.__future__.get_swap_module_params_on_conversion}[flag]
    prev = getter()
    setter(True)
    try:
        outcome = []
        for move in (lambda m: m.to(torch.float64), lambda m: m.to("neuron")):
            m = _tied()
            w = m.embed.weight
            move(m)
            outcome.append((m.embed.weight is w, m.lm_head.weight is m.embed.weight,
                            sum(1 for _ in m.parameters())))
        assert outcome[1] == outcome[0]
        if flag == "swap":
            assert outcome[1] == (True, True, sum(1 for _ in _tied().parameters()))
        else:
            assert outcome[1][0] is False          # overwrite: new Parameter objects, as torch documents
    finally:
        setter(prev)


def test_param_data_across_devices_and_dtypes():
    p = nn.Parameter(torch.randn(3, 4))
    p.custom_tag = "kept"
    x = torch.randn(3, 4, dtype=torch.float64).to("neuron")
    p.data = x
    assert p.device.type == "neuron" and p.dtype == torch.float64 and isinstance(p, nn.Parameter)
    assert p.custom_tag == "kept" and p.requires_grad
    torch.testing.assert_close(p.detach().cpu(), x.cpu())
    x.add_(1)                                   # p.data = x shares x's data, as on any device
    torch.testing.assert_close(p.detach().cpu(), x.cpu())
    y = torch.randn(2, 2)
    p.data = y                                 # back to the CPU
    assert p.device.type == "cpu" and type(p) is nn.Parameter and p.shape == (2, 2)
    y.mul_(2)
    torch.testing.assert_close(p.detach(), y)
    # plain tensors too; and the value used afterwards in a graph trains on the new device
    t = torch.zeros(2)
    t.data = torch.ones(2, device="neuron")
    assert t.device.type == "neuron" and t.cpu().tolist() == [1.0, 1.0]
    q = nn.Parameter(torch.randn(4))
    q.data = q.data.to("neuron")
    (q * q).sum().backward()
    assert q.grad.device.type == "neuron"
    torch.testing.assert_close(q.grad.cpu(), 2 * q.detach().cpu())


def test_deepcopy_of_tensors_and_modules():
    a = torch.randn(4, 3, device="neuron", requires_grad=True)
    v = a.detach()[1:]                       # a view of a's storage
    a.grad = torch.ones(4, 3, device="neuron")
    memo = {}
    a2, v2, a3 = copy.deepcopy([a, v, a], memo)
    assert a3 is a2                          # memo kept
    assert a2.device.type == "neuron" and a2.requires_grad and a2.is_leaf
    torch.testing.assert_close(a2.detach().cpu(), a.detach().cpu())
    torch.testing.assert_close(a2.grad.cpu(), a.grad.cpu())
    assert a2.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()     # storage not shared
    assert v2.untyped_storage().data_ptr() == a2.untyped_storage().data_ptr()    # views stay views
    assert v2.storage_offset() == v.storage_offset() == 3
    with torch.no_grad():
        a2.add_(1)
    torch.testing.assert_close(v2.cpu(), a2.detach()[1:].cpu())
    assert not torch.equal(a2.detach().cpu(), a.detach().cpu())

    m = _tied().to("neuron")
    c = _tied()
    m2, c2 = copy.deepcopy(m), copy.deepcopy(c)
    for mm, orig in ((m2, m), (c2, c)):
        assert mm.lm_head.weight is mm.embed.weight
        assert sum(1 for _ in mm.parameters()) == sum(1 for _ in orig.parameters())
        assert mm.embed.weight is not orig.embed.weight
        assert mm.embed.weight.untyped_storage().data_ptr() != orig.embed.weight.untyped_storage().data_ptr()
    assert isinstance(m2.embed.weight, nn.Parameter) and m2.embed.weight.device.type == "neuron"
    _, g_m = _train(m2, "neuron", steps=2)
    _, g_c = _train(c2, "cpu", steps=2)
    for n in g_c:
        torch.testing.assert_close(g_m[n], g_c[n], rtol=1e-4, atol=1e-5, msg=n)


def _checkpoint():
    torch.manual_seed(3)
    base = torch.randn(6)
    return {"w": base, "view": base[2:], "i": torch.arange(5), "nested": [torch.randn(2, 2)], "step": 7}


MAP_LOCATIONS = {      # built when used: the device exists once the fixture has registered it
    "none": lambda: None,
    "str": lambda: "neuron",
    "str_index": lambda: "neuron:0",
    "device": lambda: torch.device("neuron"),
    "dict": lambda: {"cpu": "neuron"},
    "callable_storage_method": lambda: (lambda storage, loc: storage.neuron()),
    "callable_to": lambda: (lambda storage, loc: storage.to(device="neuron")),
    "callable_none": lambda: (lambda storage, loc: None),
}


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("where", sorted(MAP_LOCATIONS))
def test_load_a_cpu_checkpoint_with_every_map_location(where, weights_only):
    ck = _checkpoint()
    buf = io.BytesIO()
    torch.save(ck, buf)
    buf.seek(0)
    got = torch.load(buf, map_location=MAP_LOCATIONS[where](), weights_only=weights_only)
    want = "cpu" if where in ("none", "callable_none") else "neuron"
    for k in ("w", "view", "i"):
        assert got[k].device.type == want, k
        assert torch.equal(got[k].cpu(), ck[k])
    assert got["nested"][0].device.type == want and torch.equal(got["nested"][0].cpu(), ck["nested"][0])
    assert got["step"] == 7
    # the view is still a view of the same storage (as a CPU load gives)
    assert got["view"].untyped_storage().data_ptr() == got["w"].untyped_storage().data_ptr()
    assert got["view"].storage_offset() == 2


@pytest.mark.parametrize("weights_only", [True, False])
def test_save_on_device_and_load_with_map_locations(weights_only):
    m = _tied().to("neuron")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    ref = _tied().state_dict()
    for ml, want in ((None, "neuron"), ("cpu", "cpu"), ({"neuron:0": "cpu"}, "cpu"),
                     (torch.device("cpu"), "cpu"), (lambda s, loc: s.cpu(), "cpu"), ("neuron", "neuron")):
        buf.seek(0)
        sd = torch.load(buf, map_location=ml, weights_only=weights_only)
        assert sd.keys() == ref.keys()
        for k, v in sd.items():
            assert v.device.type == want, (ml, k)
            torch.testing.assert_close(v.cpu(), ref[k], rtol=0, atol=0)
        # the tie is one storage in the file, as on CUDA
        assert sd["lm_head.weight"].untyped_storage().data_ptr() == sd["embed.weight"].untyped_storage().data_ptr()
        fresh = _tied(seed=5).to(want)
        fresh.load_state_dict(sd)
        assert fresh.lm_head.weight is fresh.embed.weight
        torch.testing.assert_close(fresh.embed.weight.detach().cpu(), ref["embed.weight"])


def test_whole_module_pickle_roundtrip_keeps_parameters_on_device():
    m = _tied().to("neuron")
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    m2 = torch.load(buf, weights_only=False)
    assert isinstance(m2.embed.weight, nn.Parameter) and m2.embed.weight.device.type == "neuron"
    assert m2.lm_head.weight is m2.embed.weight
    torch.testing.assert_close(m2.embed.weight.detach().cpu(), m.embed.weight.detach().cpu())


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_storage_apis_match_cpu():
    for dev in ("cpu", "neuron"):
        x = torch.arange(12.0, device=dev)
        v = x.view(3, 4)[1:, 1:]
        assert v.storage_offset() == 5
        assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert x.untyped_storage().nbytes() == 48
        assert x.untyped_storage().device.type == dev
        assert x.clone().untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        # set_ onto another tensor's storage, then resize_
        y = torch.empty(0, device=dev)
        if dev != "cpu":
            with pytest.raises(RuntimeError, match="Attempted to set the storage of a tensor on device"):
                y.set_(torch.arange(3.0).untyped_storage())         # a host storage, refused as on CUDA
        y.set_(x.untyped_storage(), 2, (2, 3), (3, 1))
        assert y.shape == (2, 3) and y.storage_offset() == 2
        assert y.cpu().tolist() == [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]
        y.add_(100)
        assert x[2].item() == 102.0
        z = torch.ones(3, device=dev)
        z.resize_(2, 4)
        assert z.shape == (2, 4) and z.cpu().flatten()[:3].tolist() == [1.0, 1.0, 1.0]
        w = torch.randn(4, device=dev)
        assert w.share_memory_() is w
        s = torch.UntypedStorage(16, device=dev)
        assert s.device.type == dev and s.nbytes() == 16
        t = torch.empty(0, dtype=torch.int32, device=dev).set_(s, 0, (4,), (1,))
        t.fill_(7)
        assert t.device.type == dev and t.cpu().tolist() == [7, 7, 7, 7]
        assert s.cpu().device.type == "cpu" and bytes(s.cpu())[:4] == (7).to_bytes(4, "little")
        ts = torch.TypedStorage(3, dtype=torch.float64, device=dev)
        assert ts.device.type == dev and ts.size() == 3


def test_device_storage_counts_as_device_memory():
    before = torch.neuron.memory_allocated()
    s = torch.UntypedStorage(1 << 20, device="neuron")
    assert torch.neuron.memory_allocated() == before + (1 << 20)
    del s
    assert torch.neuron.memory_allocated() == before
    x = torch.empty(1000, device="neuron")
    v = x[10:]
    after = torch.neuron.memory_allocated()
    assert after == before + 4000
    del x
    assert torch.neuron.memory_allocated() == after          # the view keeps the storage alive
    del v
    assert torch.neuron.memory_allocated() == before


class _BadBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return (g * 2).cpu()          # a host gradient, whatever the input's device


class _ScalarHostBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sum()

    @staticmethod
    def backward(ctx, g):
        return g.cpu()                # 0-dim: the engine moves it


def test_custom_function_returning_a_host_gradient_is_refused():
    x_cpu = torch.randn(3, requires_grad=True)
    _BadBackward.apply(x_cpu).sum().backward()         # fine on the CPU: the gradient is where the input is
    assert x_cpu.grad.device.type == "cpu"
    x = torch.randn(3, device="neuron", requires_grad=True)
    with pytest.raises(RuntimeError, match=r"returned an invalid gradient at index 0 - expected device neuron:0 "
                                           r"but got cpu"):
        _BadBackward.apply(x).sum().backward()
    assert x.grad is None
    # a non-leaf input: the same error, no gradient reaches the leaf
    y = torch.randn(3, device="neuron", requires_grad=True)
    with pytest.raises(RuntimeError, match="invalid gradient"):
        _BadBackward.apply(y * 1).sum().backward()
    assert y.grad is None
    # a 0-dim host gradient for a 0-dim input is moved, as the engine does for CUDA
    s = torch.tensor(2.0, device="neuron", requires_grad=True)
    _ScalarHostBackward.apply(s).backward()
    assert s.grad.device.type == "neuron" and s.grad.item() == 1.0


def test_sparse_embedding_gradient_is_a_clear_error():
    emb = nn.Embedding(10, 4, sparse=True).to("neuron")
    idx = torch.tensor([1, 2, 2], device="neuron")
    with pytest.raises(NotImplementedError, match="sparse=True"):
        emb(idx)
    with torch.no_grad():                              # inference needs no sparse gradient
        out = emb(idx)
    torch.testing.assert_close(out.cpu(), emb.weight.detach().cpu()[[1, 2, 2]])


def test_transformers_tied_causal_lm_keeps_tie_and_matches_cpu_gradients():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(cfg).eval()
    dev = copy.deepcopy(cpu)
    n_params = sum(1 for _ in cpu.parameters())
    assert cpu.lm_head.weight is cpu.model.embed_tokens.weight
    dev.to("neuron")
    assert dev.lm_head.weight is dev.model.embed_tokens.weight
    assert sum(1 for _ in dev.parameters()) == n_params
    ids = torch.randint(0, 64, (2, 10))
    out_c = cpu(input_ids=ids, labels=ids)
    out_d = dev(input_ids=ids.to("neuron"), labels=ids.to("neuron"))
    out_c.loss.backward()
    out_d.loss.backward()
    torch.testing.assert_close(out_d.logits.detach().cpu(), out_c.logits.detach(), rtol=1e-4, atol=1e-5)
    for (n, p), (_, q) in zip(dev.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_torch_function_mode_sees_each_op_once_as_on_cpu():
    from torch.overrides import TorchFunctionMode

    class Log(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    seen = {}
    for dev in ("cpu", "neuron"):
        a = torch.randn(3, device=dev)
        with Log() as log:
            b = (a + a).exp()
            b.add_(1)
        seen[dev] = log.calls
    assert seen["neuron"] == seen["cpu"]
