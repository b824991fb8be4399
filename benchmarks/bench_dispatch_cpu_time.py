"""Per-op CPU time (time.process_time, robust to a shared machine) of an 8-element fp32 add on neuron vs CPU.

Usage: python benchmarks/bench_dispatch_cpu_time.py LABEL.  Median of 31 alternating batches of 2000 adds; prints the
ratio.  Complements bench_torch_device.py (wall time), whose ratio swings with other load on the machine.
"""
import torch, time, statistics, sys
from trnsim import backend
backend.register()
a=torch.randn(8); b=torch.randn(8)
an=a.to("neuron"); bn=b.to("neuron")
def per(f, n=2000):
    t=time.process_time()
    for _ in range(n): f()
    return (time.process_time()-t)/n*1e6
fs=[lambda: a+b, lambda: an+bn]
for f in fs:
    for _ in range(500): f()
res=[[] for _ in fs]
for r in range(31):
    for i,f in enumerate(fs): res[i].append(per(f))
m=[statistics.median(x) for x in res]
print(sys.argv[1] if len(sys.argv) > 1 else "", f"cpu {m[0]:.2f} us  neuron {m[1]:.2f} us  ratio {m[1]/m[0]:.2f}x (process CPU time, median of 31 alternating batches)")
