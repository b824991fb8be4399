"""Dispatch overhead of the simulated ``neuron`` PyTorch device against CPU torch, in the same run.

Usage: python benchmarks/bench_torch_device.py [--repeats N]

  1. an 8-element fp32 add (``a + b``): per-op wall time on neuron vs on CPU (aim: at most 5x, issue 12)
  2. a 1024x1024 fp32 matmul: wall time on neuron vs on CPU (aim: at most 1.2x)

Each figure is the median of ``--repeats`` timed batches (CPU and neuron batches alternate) after a warm-up (the warm-up also fills the per-shape
cost memo, so the first-shape simulation of the library kernel is not in the figure).  Also printed: the simulated
device time of each op.  Never part of the test pass/fail.
"""

import argparse
import statistics
import time

import torch

from trnsim import backend


def _per_call(fns, n, repeats):
    """Median per-call wall time of each function; batches of the functions alternate, so a change in machine load
    hits both sides alike."""
    for fn in fns:
        for _ in range(max(3, n // 10)):
            fn()
    out = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            out[i].append((time.perf_counter() - t) / n)
    return [statistics.median(o) for o in out]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    backend.register()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, device {torch.neuron.get_device_name()}")

    a, b = torch.randn(8), torch.randn(8)
    an, bn = a.to("neuron"), b.to("neuron")
    cpu, dev = _per_call([lambda: a + b, lambda: an + bn], 5000, args.repeats)
    t0 = backend.simulated_time_ns()
    an + bn
    sim_add = backend.simulated_time_ns() - t0
    print(f"8-element add      cpu {cpu * 1e6:8.2f} us   neuron {dev * 1e6:8.2f} us   ratio {dev / cpu:5.2f}x "
          f"(aim <= 5x)   simulated {sim_add / 1e3:.2f} us")

    x, w = torch.randn(1024, 1024), torch.randn(1024, 1024)
    xn, wn = x.to("neuron"), w.to("neuron")
    cpu, dev = _per_call([lambda: x @ w, lambda: xn @ wn], 10, args.repeats)
    t0 = backend.simulated_time_ns()
    xn @ wn
    sim_mm = backend.simulated_time_ns() - t0
    print(f"1024^3 fp32 matmul cpu {cpu * 1e3:8.3f} ms   neuron {dev * 1e3:8.3f} ms   ratio {dev / cpu:5.2f}x "
          f"(aim <= 1.2x)   simulated {sim_mm / 1e3:.1f} us")


if __name__ == "__main__":
    main()
