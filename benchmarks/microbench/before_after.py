"""The same kernels timed by trnsim before and after a timing-model change: the library kernels and the demo's
kernel on one core, and multi-core launches (SPMD programs on one chip, where the chip's HBM is shared).

Uses only trnsim's public API, so it runs against an older tree too:

    python -m benchmarks.microbench.before_after                       # this tree
    PYTHONPATH=<old tree>:<this tree's benchmarks parent> python -m benchmarks.microbench.before_after

(with the old tree first on the path, ``trnsim`` is the old one).  Prints one line per kernel: simulated total
ns, DMA engines' busy ns, and the Timeline's findings (if the tree has ``trnsim.profiler.findings``).
``--out FILE`` writes them; ``--compare BEFORE`` reads such a file from the old tree and prints the before / after
table (``before_after.md`` in this directory is that table for the last timing-model change).
"""

from __future__ import annotations

import sys
import warnings

import ml_dtypes
import numpy as np

import trnsim
from trnsim.kernels.jit import run_kernel
from trnsim.machine import schedule

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def split_stream(x):
    """Each program loads its share of the rows, scales them, and stores them (the team kernels' scale_lnc shape:
    DMA-bound, one load and one store per 128 rows)."""
    R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = R // nl.num_programs(0)
    base = nl.program_id(0) * rows
    for i in range(rows // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[base + i * 128: base + (i + 1) * 128, :])
        nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(out[base + i * 128: base + (i + 1) * 128, :], t)
    return out


def split_copy(x):
    """Each program copies its share of the rows HBM to HBM in [128, C] blocks (no compute)."""
    R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = R // nl.num_programs(0)
    base = nl.program_id(0) * rows
    for i in range(rows // 128):
        nisa.dma_copy(out[base + i * 128: base + (i + 1) * 128, :], x[base + i * 128: base + (i + 1) * 128, :])
    return out


def stream_named(x, mode=None, engine=None, store_engine=None):
    """split_stream on one program with every transfer's DGE mode and trigger engine named (``dge_mode``,
    ``engine``): one DMA queue for all loads and stores when ``engine`` is given (isa/dma_dge.py); the stores on
    the queue of ``store_engine`` when that is given (two queues)."""
    R, C = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(R // 128):
        t = nl.ndarray((128, C), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[i * 128:(i + 1) * 128, :], dge_mode=mode, engine=engine)
        nisa.tensor_scalar(t, t, nl.multiply, 2.0)
        nisa.dma_copy(out[i * 128:(i + 1) * 128, :], t, dge_mode=mode, engine=store_engine or engine)
    return out


def gather_rows(table, idx):
    """An embedding lookup: 128 rows of ``table`` at ``idx`` (not evenly spaced: an indirect gather, one
    dma_copy per row), scaled and stored."""
    ix = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(ix, idx)
    t = nl.ndarray((128, table.shape[1]), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, table.ap(pattern=[[table.shape[1], 128], [1, table.shape[1]]], offset=0, vector_offset=ix,
                              indirect_dim=0))
    nisa.tensor_scalar(t, t, nl.multiply, 2.0)
    out = nl.ndarray((128, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(out, t)
    return out


def cases():
    from trnsim.kernels.library import elementwise, normalization, reduction, softmax
    from trnsim.kernels.library.matmul import tensor_add, tiled_matmul
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    b = lambda *s: r.standard_normal(s).astype(ml_dtypes.bfloat16)  # noqa: E731
    out = {
        "demo tiled_matmul 256x512x1024 bf16 (trnsim demo defaults)": (tiled_matmul, (b(512, 256), b(512, 1024)),
                                                                       (1,), "trn2"),
        "tiled_matmul 1024^3 bf16": (tiled_matmul, (b(1024, 1024), b(1024, 1024)), (1,), "trn2"),
        "tensor_add 4096x512": (tensor_add, (f(4096, 512), f(4096, 512)), (1,), "trn2"),
        "unary 4096x512": (elementwise.unary, (f(4096, 512),), (1,), "trn2"),
        "rms_norm 4096x512": (normalization.rms_norm, (f(4096, 512), f(4096, 512)), (1,), "trn2"),
        "layer_norm 4096x512": (normalization.layer_norm, (f(4096, 512), f(4096, 512), f(4096, 512)), (1,), "trn2"),
        "row_reduce 4096x512": (reduction.row_reduce, (f(4096, 512),), (1,), "trn2"),
        "row_softmax 4096x512": (softmax.row_softmax, (f(4096, 512),), (1,), "trn2"),
    }
    # the same library kernels on trn1 (no Vector performance mode: tensor_tensor's fast path shows) in bf16
    lib = [(k, v) for k, v in out.items() if "4096x512" in k]
    for k, (fn, args, grid, _) in lib:
        out[k + " bf16, trn1"] = (fn, tuple(a.astype(ml_dtypes.bfloat16) for a in args), grid, "trn1")
        out[k + " fp32, trn1"] = (fn, args, grid, "trn1")
    for g in (2, 4, 8):
        out[f"split_stream 8192x2048 fp32, {g} programs, trn2"] = (split_stream, (f(8192, 2048),), (g,), "trn2")
    for g in (2, 4, 8):
        out[f"split_copy 8192x2048 fp32 HBM->HBM, {g} programs, trn2"] = (split_copy, (f(8192, 2048),), (g,), "trn2")
    out["split_copy 4096x2048 fp32 HBM->HBM, 2 programs, trn1"] = (split_copy, (f(4096, 2048),), (2,), "trn1")
    # DGE modes and a named trigger engine (one DMA queue), as nki-library kernels name them
    x = f(4096, 512)
    for mode in ("none", "hwdge", "swdge"):
        out[f"stream 4096x512 fp32, dge_mode={mode}, trn2"] = (
            lambda a, m=mode: stream_named(a, getattr(nisa.dge_mode, m)), (x,), (1,), "trn2")
    out["stream 4096x512 fp32, every transfer engine=sync (one queue), trn2"] = (
        lambda a: stream_named(a, engine=nisa.engine.sync), (x,), (1,), "trn2")
    # loads and stores on two queues (the DMA engines serve them round robin on trn1/trn2, dma_share)
    for tg in ("trn2", "trn1"):
        out[f"stream 4096x512 fp32, loads engine=sync, stores engine=scalar (two queues), {tg}"] = (
            lambda a: stream_named(a, engine=nisa.engine.sync, store_engine=nisa.engine.scalar), (x,), (1,), tg)
    idx = r.permutation(4096)[:128].astype(np.int32).reshape(128, 1)
    out["gather_rows 128 of 4096x512 fp32 (indirect, dge_mode unknown), trn2"] = (
        gather_rows, (f(4096, 512), idx), (1,), "trn2", True)
    return out


def run():
    """``[(name, total ns, DMA engines' busy ns, findings)]`` of every case on the trnsim being imported."""
    try:
        from trnsim.profiler.findings import findings
    except ImportError:
        findings = None
    out = []
    for name, (fn, args, grid, tg, *ex) in cases().items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:     # shape-only, but a gather needs its indices' values (execute)
                res = run_kernel(fn, args, {}, grid, tg, execute=bool(ex and ex[0]))
            except Exception as exc:         # a kernel that does not take this dtype or target
                out.append((name, None, f"refused: {type(exc).__name__}", []))
                continue
            tl = schedule(res.cores)
        dma = sum(w * q for e, w, q in zip(tl.engine, tl.work, tl.nqueues) if e == "dma")
        out.append((name, tl.total_ns, dma, findings(tl, limit=3) if findings is not None else []))
    return out


def render(rows):
    lines = []
    for name, tot, dma, fs in rows:
        lines.append(f"| {name} | refused | {dma} |" if tot is None else f"| {name} | {tot:.1f} | {dma:.1f} |")
        lines += [f"|   | finding: {f} | |" for f in fs]
    return lines


def parse(text):
    """The rows of an earlier run's output (``render``'s lines): ``{name: (total or None, [findings])}``."""
    out = {}
    name = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        if cells[0] == "" and cells[1].startswith("finding: ") and name is not None:
            out[name][1].append(cells[1][len("finding: "):])
        elif cells[0]:
            name = cells[0]
            try:
                out[name] = (float(cells[1]), [])
            except ValueError:
                out[name] = (None, [])
    return out


def compare(before, rows):
    """Markdown: each kernel's total before and after, the change, the findings after, and the findings of before
    that are gone."""
    lines = ["| kernel | before ns | after ns | change |", "|---|---|---|---|"]
    for name, tot, _, fs in rows:
        b, bfs = before.get(name, (None, []))
        if tot is None or b is None:
            lines.append(f"| {name} | {b if b is not None else '-'} | {tot if tot is not None else 'refused'} | |")
        else:
            lines.append(f"| {name} | {b:.1f} | {tot:.1f} | {100 * (tot - b) / b:+.1f}% |")
        lines += [f"|   | after: {f} | | |" for f in fs]
        lines += [f"|   | before only: {f} | | |" for f in bfs if f not in fs]
    return lines


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m benchmarks.microbench.before_after")
    ap.add_argument("--out", metavar="FILE", help="also write this run's lines to FILE")
    ap.add_argument("--compare", metavar="BEFORE", help="a file an earlier run wrote with --out: print the "
                    "before / after table instead")
    ap.add_argument("--title", default="", help="a first line for the --out file (with --compare)")
    a = ap.parse_args(argv)
    print(f"trnsim from {trnsim.__file__}")
    rows = run()
    if a.compare:
        with open(a.compare) as f:
            lines = compare(parse(f.read()), rows)
        if a.title:
            lines = [a.title, ""] + lines
    else:
        lines = render(rows)
    print("\n".join(lines))
    sys.stdout.flush()
    if a.out:
        from trnsim.fileio import atomic_write
        with atomic_write(a.out) as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
