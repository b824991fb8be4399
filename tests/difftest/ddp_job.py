"""A 2-rank DDP training step on CPU (gloo), recorded per rank twice: as is, and with an error injected in one layer
on rank 1.  Usage: python ddp_job.py OUT_DIR.  Also writes OUT_DIR/loaded_rank<r>.json: the trnsim modules loaded
in each rank after recording (the recorder must load none of the simulator)."""

import contextlib
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import trnsim.difftest as dt
    from difftest_models import PerturbOp, mlp
    try:
        for run in ("base", "perturbed"):
            model = DDP(mlp(seed=0))
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(100 + rank))
            inj = PerturbOp(model.module[2], "aten.addmm.default", 1e-3) if (run == "perturbed" and rank == 1) \
                else contextlib.nullcontext()
            with inj:
                with dt.record(os.path.join(out, run), name="ddp_step", modules=True, ops=True) as rec:
                    rec.input("x", x)
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    rec.output("loss", loss)
                    rec.state(model.module)
        loaded = sorted(m for m in sys.modules if m.startswith("trnsim"))
        with open(os.path.join(out, f"loaded_rank{rank}.json"), "w") as f:
            json.dump(loaded, f)
    finally:
        dist.destroy_process_group()


def main(out):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(2, out, port), nprocs=2, join=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1])
