"""Host CPU time of bitsandbytes' 4-bit dequantisation on ``neuron`` (its ``torch.compile``'d default kernel, run by
trnsim's compile runtime) with functionalisation's ``out[1::2] = q & 0xF`` writes joined into one write per slice
(``runtime._copy_into_slice``, chosen by ``runtime._fused_writes``) and without (a fresh copy of the slice's storage,
then the in-place scatter: two writes), in one process, alternating blocks so both see the same host load (issue 28).

Main-thread CPU (``time.thread_time``) per call; run it with ``OMP_NUM_THREADS=1`` for a figure free of torch's
intra-op threads spinning on a loaded host.  The simulated clock of one call is printed for each: the same (the
joined write changes no charge).  Needs bitsandbytes (its CPU library built) and ``TORCHNEURON_TARGET=sim``.

    python -m benchmarks.bench_bnb_dequant_writes [dim] [calls per block] [rounds]
"""

import gc
import sys
import time

import torch


def main(dim=512, calls=10, rounds=6):
    from bitsandbytes import functional as F
    from trnsim.backend.compile import runtime
    from trnsim.backend.device_state import STATE
    B = torch.randn(dim * 4, dim, dtype=torch.float16, device="neuron")
    qB, state = F.quantize_4bit(B, quant_type="nf4", compress_statistics=True, quant_storage=torch.uint8)
    F.dequantize_4bit(qB, state)                    # compiles
    graphs = []
    for o in gc.get_objects():
        try:
            if isinstance(o, runtime.CompiledGraph):
                graphs.append(o)
        except ReferenceError:                      # a dead weak proxy among the objects
            pass
    joined = runtime._fused_writes
    modes = {"joined": joined, "two writes": lambda *a: {}}
    spent, clock = dict.fromkeys(modes, 0.0), {}
    try:
        for _ in range(rounds):
            for m, pairs in modes.items():
                runtime._fused_writes = pairs
                for g in graphs:                    # generated again with (or without) the joined writes
                    g._run = None
                F.dequantize_4bit(qB, state)
                t0 = STATE.now_ns
                F.dequantize_4bit(qB, state)
                clock.setdefault(m, STATE.now_ns - t0)
                t = time.thread_time()
                for _ in range(calls):
                    F.dequantize_4bit(qB, state)
                spent[m] += time.thread_time() - t
    finally:
        runtime._fused_writes = joined
        for g in graphs:
            g._run = None
    n = rounds * calls
    print(f"dequantize_4bit nf4 [{4 * dim}, {dim}] fp16 on neuron, {len(graphs)} compiled graphs, {n} calls each, "
          f"torch threads {torch.get_num_threads()}")
    for m in modes:
        print(f"  {m:11s} {spent[m] / n * 1e3:7.2f} ms main-thread CPU per call   simulated {clock[m]:.1f} ns")
    return {m: spent[m] / n for m in modes}


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 512, int(a[1]) if len(a) > 1 else 10, int(a[2]) if len(a) > 2 else 6)
