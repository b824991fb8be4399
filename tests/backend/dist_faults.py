"""Worker of tests/backend/test_distributed.py: the ``neuron`` backend's clock and fault cases on 4 ranks.  Each
rank writes what happened to ``OUT/rank{r}.json``."""

import json
import os
import time


def _outcome(fn):
    t0 = time.monotonic()
    try:
        fn()
        return {"ok": True, "secs": time.monotonic() - t0}
    except Exception as e:     # noqa: BLE001 -- the test inspects the type and message
        return {"ok": False, "type": type(e).__name__, "msg": str(e), "secs": time.monotonic() - t0}


def scenario(rank, world, out_dir, init, case):
    os.environ["TORCHNEURON_TARGET"] = "sim"
    os.environ["TRNSIM_DIST_TIMEOUT"] = "10"   # generous: a loaded 2-core machine runs 4 ranks
    import warnings
    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist
    import trnsim
    from trnsim.backend.device_state import STATE

    dist.init_process_group("neuron", init_method=init, rank=rank, world_size=world)
    res = {}
    if case == "clock_and_mismatch":
        # imbalance: rank 0 arrives late; the collective ends at the latest arrival + its simulated time
        x = torch.ones(1024, device="neuron")
        if rank == 0:
            for _ in range(20):
                x = x + 1
        before = STATE.now_ns
        with trnsim.profile_torch() as prof:
            dist.all_reduce(x)
        res["arrive_ns"] = before
        res["after_ns"] = STATE.now_ns
        res["rows"] = [(r.op, r.start_ns, r.end_ns, r.kind, r.bytes) for r in prof.rows]
        res["value"] = float(x[0].to("cpu"))
        # shapes differ on rank 2
        n = 8 if rank != 2 else 9
        res["shape"] = _outcome(lambda: dist.all_reduce(torch.ones(n, device="neuron")))
        # dtypes differ on rank 1
        dt = torch.float32 if rank != 1 else torch.bfloat16
        res["dtype"] = _outcome(lambda: dist.all_reduce(torch.ones(8, device="neuron", dtype=dt)))
        # ranks 0 and 1 issue an all-reduce, ranks 2 and 3 an all-gather
        if rank < 2:
            res["subset"] = _outcome(lambda: dist.all_reduce(torch.ones(8, device="neuron")))
        else:
            res["subset"] = _outcome(lambda: dist.all_gather_into_tensor(torch.empty(32, device="neuron"),
                                                                         torch.ones(8, device="neuron")))
        # still usable afterwards
        y = torch.full((4,), float(rank), device="neuron")
        dist.all_reduce(y)
        res["after_faults"] = float(y[0].to("cpu"))
        # point to point: the receiver's clock ends no earlier than the sender's arrival plus the transfer
        if rank == 0:
            dist.send(torch.full((5,), 7.0, device="neuron"), 1)
        elif rank == 1:
            t = torch.empty(5, device="neuron")
            dist.recv(t, 0)
            res["recv"] = t.to("cpu").tolist()
        dist.barrier()
        # rank 3 never issues this one: the others time out naming it
        if rank != 3:
            res["missing"] = _outcome(lambda: dist.all_reduce(torch.ones(8, device="neuron")))
        else:
            time.sleep(15)
    elif case == "rank_dies":
        dist.all_reduce(torch.ones(4, device="neuron"))
        if rank == 3:
            os._exit(0)      # dies without a word
        res["dead"] = _outcome(lambda: dist.all_reduce(torch.ones(8, device="neuron")))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(res, f)
    os._exit(0)              # the group is broken on purpose: skip destroy_process_group
