"""Host CPU time of one iteration of bitsandbytes' ``test_gemv_4bit`` body (quantize_4bit, dequantize_4bit + linear,
matmul, gemv_4bit, the error statistics with their ``.item()`` reads) on ``cpu`` and on ``neuron`` in one process,
in alternating blocks so both see the same host load (issue 28: the suite on neuron within 2x of the CPU's time).

``neuron-old`` runs the neuron iteration with the compile runtime's functionalised-write shortcuts as they were
before the strided-view change (torch's own overlap check, every write through ``copy_``), for a before/after in the
same conditions.  Needs bitsandbytes installed (its CPU library built) and ``TORCHNEURON_TARGET=sim``.

    python -m benchmarks.bench_bnb_gemv_iter [dim] [rounds] [iters per block] [dtype]
"""

import math
import sys
import time

import torch


def _iteration(F, dev, dim, dtype):
    A = torch.randn(1, dim, dtype=dtype, device=dev)
    B = torch.randn(dim * 4, dim, dtype=dtype, device=dev) / math.sqrt(dim)
    qB, state = F.quantize_4bit(B, quant_type="nf4", compress_statistics=True, quant_storage=torch.uint8)
    C1 = torch.nn.functional.linear(A, F.dequantize_4bit(qB, state).to(dtype))
    C3 = torch.matmul(A, B.t())
    if dev == "cpu" and F.has_avx512bf16():
        qB, state = F._convert_weight_packed_for_cpu(qB, state)
        qB = qB.t()
    C2 = F.gemv_4bit(A, qB.t(), state=state)
    mag = torch.abs(C1).float() + 1e-5
    for e in ((C1 - C2).abs().float(), (C3 - C2).abs().float(), (C3 - C1).abs().float()):
        e.mean().item()
        e.max().item()
        (e / mag).mean().item()
    torch.isclose(C1, C2, rtol=1e-5, atol=0.01)


def main(dim=512, rounds=3, iters=5, dtype="float32"):
    from bitsandbytes import functional as F
    from trnsim.backend.compile import runtime
    dt = getattr(torch, dtype)
    new = (runtime._no_self_overlap, runtime._HOST_WRITE_MIN)
    old = (lambda t: torch._debug_has_internal_overlap(t) == 0, float("inf"))

    def use(fns):
        runtime._no_self_overlap, runtime._HOST_WRITE_MIN = fns

    modes = {"cpu": ("cpu", new), "neuron": ("neuron", new), "neuron-old": ("neuron", old)}
    spent = {m: 0.0 for m in modes}
    for m, (dev, fns) in modes.items():            # warm-up: compiles, cost memo
        use(fns)
        _iteration(F, dev, dim, dt)
    for _ in range(rounds):
        for m, (dev, fns) in modes.items():
            use(fns)
            t = time.process_time()
            for _ in range(iters):
                _iteration(F, dev, dim, dt)
            spent[m] += time.process_time() - t
    use(new)
    n = rounds * iters
    per = {m: spent[m] / n * 1e3 for m in modes}
    print(f"gemv_4bit iteration, dim={dim} {dtype}, {n} iterations each, torch threads {torch.get_num_threads()}")
    for m in modes:
        print(f"  {m:11s} {per[m]:8.1f} ms CPU per iteration   {per[m] / per['cpu']:5.2f}x cpu")
    return per


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 512, int(a[1]) if len(a) > 1 else 3, int(a[2]) if len(a) > 2 else 5,
         a[3] if len(a) > 3 else "float32")
