"""Distributed training jobs run on 4 ranks twice, once on the CPU with gloo and once on the simulated ``neuron``
device with the ``neuron`` backend; each rank saves what it saw (losses, gradients, updated parameters) for the
test to compare rank by rank.  Run by tests/backend/test_distributed.py under torchrun and under mp.spawn.

    torchrun --nproc-per-node 4 dist_jobs.py OUT_DIR JOB[,JOB...]
    torchrun --nproc-per-node N dist_jobs.py OUT_DIR local_rank_fsdp     (FSDP2 on neuron:LOCAL_RANK)
    torchrun --nproc-per-node 2 dist_jobs.py OUT_DIR same_core           (every rank on neuron:0: refused)
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, VOCAB, SEQ, BATCH, STEPS = 32, 4, 64, 8, 2, 3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.up = nn.Linear(D, 4 * D)
        self.down = nn.Linear(4 * D, D)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(b, s, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def _model():
    torch.manual_seed(0)
    return TinyLM()


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return idx[:, :-1], idx[:, 1:]


def _host(t):
    from torch.distributed.tensor import DTensor
    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().to("cpu").clone()


def _train(model, device, rank):
    # SGD: AdamW would turn the rounding noise of mathematically-zero gradients (the key bias) into lr-sized steps
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], []
    for step in range(STEPS):
        x, y = _batch(rank, step)
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        grads = {n: _host(p.grad) for n, p in model.named_parameters()}
        opt.step()
        losses.append(float(loss.detach().to("cpu")))
    params = {n: _host(p) for n, p in model.named_parameters()}
    return {"losses": losses, "grads": grads, "params": params}


def job_ddp(device, rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = _model().to(device)
    ddp = DDP(model, bucket_cap_mb=0.01)         # small buckets: several all-reduces per step
    out = _train(ddp, device, rank)
    return out


def job_fsdp(device, rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh(device, (world,))
    model = _model().to(device)                  # to the device first, then shard
    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, device, rank)


def job_tp(device, rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh(device, (world,))
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)).to(device)
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    g = torch.Generator().manual_seed(7)          # the same input on every rank (TP)
    x = torch.randn(BATCH * SEQ, D, generator=g).to(device)
    y = mlp(x)
    y.square().sum().backward()
    return {"out": _host(y), "grads": {n: _host(p.grad) for n, p in mlp.named_parameters()},
            "losses": [float(y.square().sum().detach().to("cpu"))], "params": {}}


JOBS = {"ddp": job_ddp, "fsdp": job_fsdp, "tp": job_tp}


def run(rank, world, out_dir, jobs, init=None):
    import trnsim
    results = {}
    for backend, device in (("gloo", "cpu"), ("neuron", "neuron")):
        if init is None:
            dist.init_process_group(backend)
        else:
            dist.init_process_group(backend, init_method=f"{init}_{backend}", rank=rank, world_size=world)
        for job in jobs:
            t0 = trnsim.backend.simulated_time_ns()
            with trnsim.profile_torch() as prof:
                res = JOBS[job](device, rank, world)
            res["collective_rows"] = sum(1 for r in prof.rows if r.kind == "collective")
            res["sim_ns"] = trnsim.backend.simulated_time_ns() - t0
            results[(job, device)] = res
        dist.destroy_process_group()
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))


def spawn_main(rank, world, out_dir, jobs, init):
    os.environ["TORCHNEURON_TARGET"] = "sim"
    run(rank, world, out_dir, jobs, init)


# -- CUDA-style launch code: each rank picks neuron:LOCAL_RANK (issue 28) ------------------------------------
MLP_D, MLP_STEPS = 16, 2


def mlp_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(MLP_D, 2 * MLP_D), nn.ReLU(), nn.Linear(2 * MLP_D, MLP_D))


def mlp_batch(rank, step):
    g = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(4, MLP_D, generator=g), torch.randn(4, MLP_D, generator=g)


def run_local_rank(out_dir, allreduce_bytes=1 << 20):
    """FSDP2 on ``neuron:LOCAL_RANK`` (set_device first, as CUDA launch code does), then one timed all-reduce of
    ``allreduce_bytes`` between synchronised clocks; saves what the rank saw."""
    import trnsim
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    local, rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.neuron.set_device(local)
    device = torch.device(f"neuron:{local}")
    dist.init_process_group("neuron")
    mesh = init_device_mesh("neuron", (world,))
    model = mlp_model().to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, seen = [], set()
    for step in range(MLP_STEPS):
        x, y = (t.to(device) for t in mlp_batch(rank, step))
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen |= {str(loss.device), str(x.device)} | {str(p.to_local().device) for p in model.parameters()} \
            | {str(p.grad.to_local().device) for p in model.parameters()}
        losses.append(float(loss.detach().cpu()))
    params = {n: _host(p) for n, p in model.named_parameters()}
    dist.barrier()
    t = torch.ones(allreduce_bytes // 4, device=device)
    dist.barrier()                                  # every clock is the latest one now
    t0 = trnsim.backend.simulated_time_ns()
    dist.all_reduce(t)
    ar_ns = trnsim.backend.simulated_time_ns() - t0
    out = {"local": local, "rank": rank, "group_rank": int(os.environ.get("GROUP_RANK", 0)), "losses": losses,
           "params": params, "devices": sorted(seen), "current": torch.neuron.current_device(),
           "count": torch.neuron.device_count(), "allreduce_ns": ar_ns, "sum": float(t[0].cpu())}
    dist.destroy_process_group()
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))


def run_same_core(out_dir):
    """Every rank picks neuron:0 of one instance: its first collective must refuse, on every rank."""
    import json
    torch.neuron.set_device(0)
    dist.init_process_group("neuron")
    rank = dist.get_rank()
    try:
        dist.all_reduce(torch.ones(4, device="neuron"))
        out = {"ok": True}
    except Exception as e:      # noqa: BLE001
        out = {"ok": False, "type": type(e).__name__, "msg": str(e)}
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    if sys.argv[2] == "local_rank_fsdp":
        run_local_rank(sys.argv[1])
    elif sys.argv[2] == "same_core":
        run_same_core(sys.argv[1])
    else:
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[1], sys.argv[2].split(","))
