"""torch.compile(backend="neuron") against eager on the simulated device, in the same run.

Usage: python benchmarks/bench_compile.py [--layers N] [--dim D] [--seq S] [--repeats R]

A small decoder-only transformer (embedding, causal attention, SiLU MLP, RMSNorm, tied head; the test suite's
tiny_decoder) runs one training step (forward, cross-entropy, backward) eager and compiled.  Printed: simulated step
time, device launches (eager: one per op; compiled: one per graph plus the eager ops outside it), HBM bytes moved by
kernels, host wall time per step (median of --repeats after warm-up), compile host time and the estimated Neuron
compiler time (a model, see trnsim/backend/compile/stats.py), and the ratios compiled/eager.  Never part of the
test pass/fail.
"""

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from trnsim import backend

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "backend"))
from conftest import tiny_decoder  # noqa: E402


def _step(fn, idx, tgt):
    logits = fn(idx)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1))
    loss.backward()
    return loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    os.environ.setdefault("TORCH_NEURONX_NEFF_CACHE_DIR", tempfile.mkdtemp(prefix="trnsim-bench-cache-"))
    backend.register()
    from trnsim.backend.compile import compile_records
    base = tiny_decoder(vocab=256, dim=a.dim, heads=4, layers=a.layers, seq=a.seq)
    eager = copy.deepcopy(base).to("neuron")
    comp = copy.deepcopy(base).to("neuron")
    cfn = torch.compile(comp, backend="neuron", fullgraph=True)
    idx = torch.randint(0, 256, (a.batch, a.seq), generator=torch.Generator().manual_seed(0)).to("neuron")
    tgt = torch.roll(idx, -1, 1)
    t0 = time.perf_counter()
    _step(cfn, idx, tgt)
    first = time.perf_counter() - t0
    res = {}
    for name, fn, model in (("eager", eager, eager), ("compiled", cfn, comp)):
        model.zero_grad(set_to_none=True)
        with backend.profile_torch() as p:
            loss = _step(fn, idx, tgt)
        walls = []
        for _ in range(a.repeats):
            model.zero_grad(set_to_none=True)
            t = time.perf_counter()
            _step(fn, idx, tgt)
            walls.append(time.perf_counter() - t)
        launches = sum(1 for r in p.rows if r.kind != "compiled" or r.op.startswith("neuron::graph_launch"))
        res[name] = dict(sim_us=p.total_ns / 1e3, launches=launches, bytes=sum(r.bytes for r in p.rows),
                         wall_ms=1e3 * statistics.median(walls), loss=loss.item())
    print(f"decoder: layers={a.layers} dim={a.dim} seq={a.seq} batch={a.batch}, one training step, "
          f"target {backend.device_state.STATE.target.name if hasattr(backend, 'device_state') else ''}")
    print(f"{'':<10} {'sim step (us)':>14} {'launches':>9} {'kernel bytes':>13} {'host ms/step':>13} {'loss':>10}")
    for name, r in res.items():
        print(f"{name:<10} {r['sim_us']:>14.1f} {r['launches']:>9} {r['bytes']:>13} {r['wall_ms']:>13.1f} "
              f"{r['loss']:>10.5f}")
    e, c = res["eager"], res["compiled"]
    print(f"compiled/eager: simulated time {c['sim_us'] / e['sim_us']:.3f}x, launches {c['launches'] / e['launches']:.3f}x, "
          f"kernel bytes {c['bytes'] / e['bytes']:.3f}x, host time {c['wall_ms'] / e['wall_ms']:.2f}x")
    recs = compile_records()
    print(f"first compiled step (trace + compile) {first:.2f} s host; lowering {sum(r.host_s for r in recs):.2f} s "
          f"host over {len(recs)} graphs; estimated Neuron compiler {sum(r.est_hw_compile_s for r in recs):.0f} s "
          "(model, an assumption)")


if __name__ == "__main__":
    main()
