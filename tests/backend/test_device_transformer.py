"""A small decoder-only transformer trained 5 AdamW steps on neuron matches the same run on CPU."""

import copy

import pytest
import torch
import torch.nn.functional as F

from trnsim import backend

from conftest import tiny_decoder


def _train(model, device, autocast_dtype, idx, tgt, steps=5):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, foreach=True)
    grads, losses = [], []
    for _ in range(steps):
        with torch.autocast(device, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            logits = model(idx.to(device))
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1).to(device))
        loss.backward()
        grads.append({n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()})
        losses.append(loss.item())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, grads, {n: p.detach().cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype,rtol,atol", [(None, 1e-4, 1e-5), (torch.bfloat16, 0.08, 0.02)])
def test_decoder_matches_cpu(dtype, rtol, atol):
    backend.reset_fallback_counts()
    cpu_model = tiny_decoder()
    dev_model = copy.deepcopy(cpu_model).to("neuron")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 64, (2, 16), generator=g)
    tgt = torch.roll(idx, -1, 1)
    l_cpu, g_cpu, p_cpu = _train(cpu_model, "cpu", dtype, idx, tgt)
    l_dev, g_dev, p_dev = _train(dev_model, "neuron", dtype, idx, tgt)
    assert l_dev == pytest.approx(l_cpu, rel=rtol * 10 if dtype else 1e-5)
    for step, (gc, gd) in enumerate(zip(g_cpu, g_dev)):
        assert gc.keys() == gd.keys() and len(gc) == sum(1 for _ in cpu_model.parameters())
        for n in gc:
            scale = gc[n].abs().max().item() + 1e-12
            assert torch.allclose(gd[n], gc[n], rtol=rtol, atol=atol * scale), (step, n)
    for n in p_cpu:
        assert torch.allclose(p_dev[n], p_cpu[n], rtol=rtol, atol=atol), n
    assert backend.fallback_counts() == {}      # the whole training step runs natively
