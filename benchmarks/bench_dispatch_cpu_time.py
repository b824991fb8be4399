"""Per-op CPU time (time.process_time, robust to a shared machine) of small eager ops on neuron vs CPU.

Usage: python benchmarks/bench_dispatch_cpu_time.py [LABEL] [--ops add,sum,...]

For each op: the median of 15 alternating batches of 1000 calls on CPU tensors and on neuron tensors; prints both and
the ratio.  The ops are the kinds a test suite of small layers repeats (bitsandbytes' test_modules runs ~100 device
ops per training iteration): an elementwise add through Python's operator and through ``torch.add``, a reduction, an
fp32 and a bf16 matmul (the bf16 one takes the fp32-accumulation path), a transpose and a view (free view ops), a dtype
conversion, a matmul of a tensor that requires grad (autograd records the op), and one call of a small compiled
function (``compiled``: bitsandbytes' 4-bit dequantisation shape, unpack two nibbles, look up, scale, cast; compiled
with ``backend="neuron"`` on the device, run eagerly on CPU as a CPU user of bitsandbytes' default kernels would): the
host cost of a compiled call (dynamo's guards, AOTAutograd's wrapper, trnsim's graph runtime and payload ops).  Complements
bench_torch_device.py (wall time), whose ratio swings with other load on the machine.
"""
import statistics
import sys
import time

import torch

from trnsim import backend

backend.register()

a, b = torch.randn(8), torch.randn(8)
m = torch.randn(16, 16)
h = m.to(torch.bfloat16)
w = torch.randn(16, 16, requires_grad=True)
an, bn, mn, hn = (t.to("neuron") for t in (a, b, m, h))
wn = w.detach().to("neuron").requires_grad_()

q = torch.randint(0, 256, (2048,), dtype=torch.uint8)
code, scale = torch.linspace(-1, 1, 16), torch.rand(64) + 0.5
qn, coden, scalen = (t.to("neuron") for t in (q, code, scale))


def _dequant(a, c, s):
    idx = torch.stack([a >> 4, a & 0xF], dim=1).reshape(-1).long()
    return (c[idx].view(-1, 64) * s.view(-1, 1)).reshape(-1).to(torch.bfloat16)


_dequant_neuron = torch.compile(_dequant, backend="neuron", dynamic=False)

OPS = {
    "add": (lambda: a + b, lambda: an + bn),
    "torch.add": (lambda: torch.add(a, b), lambda: torch.add(an, bn)),
    "sum": (lambda: a.sum(), lambda: an.sum()),
    "mm": (lambda: torch.mm(m, m), lambda: torch.mm(mn, mn)),
    "mm_bf16": (lambda: h @ h, lambda: hn @ hn),
    "t": (lambda: m.t(), lambda: mn.t()),
    "view": (lambda: m.view(256), lambda: mn.view(256)),
    "to_bf16": (lambda: m.to(torch.bfloat16), lambda: mn.to(torch.bfloat16)),
    "mm_grad": (lambda: w @ m, lambda: wn @ mn),
    "compiled": (lambda: _dequant(q, code, scale), lambda: _dequant_neuron(qn, coden, scalen)),
}


def per_call_us(f, n=1000):
    t = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - t) / n * 1e6


def main(argv):
    label = argv[0] if argv and not argv[0].startswith("--") else ""
    names = list(OPS)
    if "--ops" in argv:
        names = argv[argv.index("--ops") + 1].split(",")
        unknown = [n for n in names if n not in OPS]
        if unknown:
            raise SystemExit(f"unknown op(s) {unknown}; choose from {sorted(OPS)}")
    for name in names:
        cpu, dev = OPS[name]
        for f in (cpu, dev):
            per_call_us(f, 200)             # warm: memos filled, lazy imports done
        rc, rn = [], []
        for _ in range(15):
            rc.append(per_call_us(cpu))
            rn.append(per_call_us(dev))
        c, n = statistics.median(rc), statistics.median(rn)
        print(f"{label} {name:<10} cpu {c:6.2f} us  neuron {n:6.2f} us  ratio {n / c:5.2f}x")
    print("(process CPU time per call, median of 15 alternating batches of 1000)")


if __name__ == "__main__":
    main(sys.argv[1:])
