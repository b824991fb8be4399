"""Per-op CPU time of an 8-element fp32 ``a + b``: CPU, neuron with the dispatcher-free operators
(trnsim/backend/operators.py), and neuron through torch's own operator (the operators uninstalled), in one process.

Usage: python benchmarks/bench_operators_ab.py.  Median of 21 alternating rounds of 2000 adds each
(time.process_time, robust to other load on a shared machine); prints both ratios against CPU.
"""
import statistics
import time

import torch

from trnsim import backend
from trnsim.backend import operators


def _per(f, n=2000):
    t = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - t) / n * 1e6


def main():
    backend.register()
    a, b = torch.randn(8), torch.randn(8)
    an, bn = a.to("neuron"), b.to("neuron")
    res = [[], [], []]
    for _ in range(21):
        res[0].append(_per(lambda: a + b))
        res[1].append(_per(lambda: an + bn))
        operators.uninstall()
        res[2].append(_per(lambda: an + bn))
        operators.install()
    m = [statistics.median(x) for x in res]
    print(f"cpu {m[0]:.2f} us  neuron, operators {m[1]:.2f} us ({m[1] / m[0]:.2f}x)  "
          f"neuron, torch's operator {m[2]:.2f} us ({m[2] / m[0]:.2f}x)")


if __name__ == "__main__":
    main()
