"""Microbenchmarks: the Neuron documents' own micro-architectural statements, reproduced as the simulator's output.

Each benchmark is a small NKI kernel run through ``trnsim.profile`` in shape-only mode (timing only); it returns
rows of ``Claim(name, document, simulated, unit, tolerance, source)``.  ``python -m benchmarks.microbench`` prints
the table (document figure, trnsim figure, error); ``tests/machine/test_microbench.py`` asserts each claim
within its tolerance.  The documents' figures come from docs/hardware.md, which quotes them with sources.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import trnsim
from trnsim.kernels.nki import isa as nisa
from trnsim.kernels.nki import language as nl
from trnsim.targets import get_target

__all__ = ["Claim", "all_claims", "table"]


@dataclasses.dataclass(frozen=True)
class Claim:
    name: str
    document: float       # the figure the document states (or reads off its plot)
    simulated: float      # trnsim's figure for the same experiment
    unit: str
    tolerance: float      # relative error allowed (the plot's reading accuracy, or the text's "about")
    source: str

    @property
    def error(self) -> float:
        return (self.simulated - self.document) / self.document if self.document else float("inf")

    @property
    def ok(self) -> bool:
        return abs(self.error) <= self.tolerance


def _profile(kernel, *shapes_dtypes, target="trn2"):
    args = [np.empty(s, dtype=d) for s, d in shapes_dtypes]
    return trnsim.profile(kernel, target=target, execute=False)(*args)


# -- DMA -----------------------------------------------------------------------------------------------
def _stream_loads(src, ntransfers):
    """``ntransfers`` independent HBM->SBUF loads of [128, F] (fresh tiles: all in flight at once)."""
    P, F = 128, src.shape[1] // ntransfers
    for i in range(ntransfers):
        t = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, src[:, i * F:(i + 1) * F])
    return None


# DMA throughput against bytes per partition, 128 partitions, % of the 32 KiB point (docs/hardware.md "DMA in detail":
# the plot of nki-dma-overview, read to about +-2 points)
DMA_CURVE = {32: 1.4, 64: 2.6, 128: 5.0, 256: 10, 512: 21, 1024: 42, 2048: 81, 4096: 97, 8192: 98, 16384: 99,
             32768: 100}


def dma_throughput(bytes_per_partition, target="trn2", ntransfers=64):
    """Sustained HBM->SBUF bytes per ns of a stream of [128, b] fp32 loads (after the first transfer's fixed
    cost, which the later ones overlap)."""
    F = bytes_per_partition // 4
    p = _profile(lambda s: _stream_loads(s, ntransfers), ((128, F * ntransfers), np.float32), target=target)
    tl = p.timeline
    first = min(tl.data_start)
    last = max(tl.end)
    return 128 * bytes_per_partition * ntransfers / (last - first)


def dma_curve_claims(target="trn2"):
    ref = dma_throughput(32768, target)
    out = []
    for b, pct in DMA_CURVE.items():
        sim = 100.0 * dma_throughput(b, target) / ref
        # the plot is read to about +-2%; the smallest values (a few % of the scale) to about +-10%
        out.append(Claim(f"DMA throughput at {b} B/partition (% of 32 KiB)", pct, sim, "%",
                         0.10 if pct < 5 else 0.05, "nki-dma-overview plot (docs/hardware.md, DMA in detail)"))
    return out


def _one_load(src):
    t = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, src)
    return None


def dma_example1_claim(target="trn2"):
    """Example 1 of the DMA overview: 4 partitions x 8 KiB HBM->SBUF, one DMA engine busy 1,416 ns."""
    p = _profile(_one_load, ((4, 2048), np.float32), target=target)
    r = next(p.timeline.rows())
    return Claim("one engine: 4 partitions x 8 KiB busy time", 1416.0, r.work, "ns", 0.03,
                 "nki-dma-overview Example 1 (docs/hardware.md)")


def dma_fixed_cost_claim(target="trn2"):
    """A tiny transfer costs its semaphore-to-start latency, about 1,300 ns."""
    p = _profile(_one_load, ((1, 1), np.float32), target=target)
    return Claim("tiny transfer (1 element) latency", 1300.0, p.total_ns, "ns", 0.10,
                 "nki-dma-bandwidth-guide: ~1300 ns semaphore-to-start (docs/hardware.md)")


def dma_rate_claims():
    """Large transfers reach the practical rate of 16 engines: 272 / 368 / 528 GB/s per core."""
    out = []
    for tg, gbps in (("trn1", 272.0), ("trn2", 368.0), ("trn3", 528.0)):
        sim = dma_throughput(32768, tg)
        out.append(Claim(f"{tg}: 16-engine practical rate", gbps, sim, "GB/s", 0.03,
                         "nki-dma-bandwidth-guide practical rates (docs/hardware.md)"))
    return out


# -- HBM shared over time by the transfers in flight on a chip ------------------------------------------
def _stream_per_program(src, ntransfers, hbm_to_hbm, active):
    """Each of the launch's programs (cores) streams its own block of ``src`` in ``ntransfers`` loads of
    [128, F] (to SBUF, or to an HBM output when ``hbm_to_hbm``); only programs below ``active`` move data."""
    pid = nl.program_id(0)
    if pid >= active:
        t = nl.ndarray((128, 1), dtype=src.dtype, buffer=nl.sbuf)
        nisa.memset(t, 0.0)
        return None
    P = 128
    F = src.shape[1] // (nl.num_programs() * ntransfers)
    for i in range(ntransfers):
        c0 = (pid * ntransfers + i) * F
        dst = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.private_hbm if hbm_to_hbm else nl.sbuf)
        nisa.dma_copy(dst, src[:, c0:c0 + F])
    return None


def hbm_shared_throughput(target, nprog, active=None, hbm_to_hbm=False, ntransfers=16, F=8192):
    """HBM bytes per ns (GB/s) that ``active`` of ``nprog`` programs of one launch on one chip move together when
    each streams ``ntransfers`` large transfers (32 KiB per partition), from the first data start to the last end."""
    from trnsim.kernels.jit import run_kernel
    from trnsim.machine import schedule
    active = nprog if active is None else active
    src = np.empty((128, F * nprog * ntransfers), np.float32)
    res = run_kernel(lambda s: _stream_per_program(s, ntransfers, hbm_to_hbm, active), (src,), {}, (nprog,),
                     target, execute=False)
    tl = schedule(res.cores)
    rows = [r for r in tl.rows() if r.engine == "dma"]
    return sum(r.hbm_bytes for r in rows) / (max(r.end for r in rows) - min(r.data_start for r in rows))


def hbm_sharing_claims():
    """The chip's HBM peak (docs/hardware.md, "Per chip and instance") shared over time by the transfers in flight:
    the aggregate of many streaming cores is the peak; a core streaming alone while the others compute gets its
    full practical rate (not a fixed share per launched core)."""
    chip = "docs/hardware.md per chip: HBM {} (chip page); DMA practical rate {} GB/s per core (dma-bandwidth-guide)"
    out = []
    # trn2: 8 cores x 368 GB/s = 2,944 GB/s asked of 2,900 GB/s
    sim = hbm_shared_throughput("trn2", 8)
    out.append(Claim("trn2: 8 cores streaming HBM->SBUF together, aggregate HBM traffic", 2900.0, sim, "GB/s",
                     0.02, chip.format("2.9 TB/s", 368) + ": min(8 x 368, 2,900)"))
    # trn1: 2 cores x 2 x 272 GB/s of HBM traffic (read and write) = 1,088 GB/s asked of 820 GB/s
    sim = hbm_shared_throughput("trn1", 2, hbm_to_hbm=True)
    out.append(Claim("trn1: 2 cores copying HBM->HBM together, aggregate HBM traffic", 820.0, sim, "GB/s", 0.02,
                     chip.format("820 GB/s", 272) + ": min(2 x 2 x 272, 820)"))
    # trn2: 1 of 8 launched cores streams, the others compute: its own 16 engines' 368 GB/s (a fixed 1/8 share of
    # the peak would give 362.5)
    sim = hbm_shared_throughput("trn2", 8, active=1)
    out.append(Claim("trn2: 1 of 8 launched cores streaming alone, its HBM traffic", 368.0, sim, "GB/s", 0.005,
                     chip.format("2.9 TB/s", 368) + ": a lone transfer gets its full rate"))
    # trn2: 4 of 8 launched cores copying HBM->HBM: 4 x 2 x 368 = 2,944 GB/s asked of 2,900 (a fixed 1/8 share of
    # the peak per launched core would give 4 x 362.5 = 1,450)
    sim = hbm_shared_throughput("trn2", 8, active=4, hbm_to_hbm=True)
    out.append(Claim("trn2: 4 of 8 launched cores copying HBM->HBM, aggregate HBM traffic", 2900.0, sim, "GB/s",
                     0.02, chip.format("2.9 TB/s", 368) + ": min(4 x 2 x 368, 2,900)"))
    # trn3: 8 cores x 528 GB/s = 4,224 GB/s, below 4,900 GB/s: nothing is shared away
    sim = hbm_shared_throughput("trn3", 8)
    out.append(Claim("trn3: 8 cores streaming HBM->SBUF together, aggregate HBM traffic", 8 * 528.0, sim, "GB/s",
                     0.02, chip.format("4.9 TB/s", 528) + ": 8 x 528 < 4,900"))
    return out


# -- engines -------------------------------------------------------------------------------------------
def _vector_op(kind, n_instr):
    def k(src):
        P, F = src.shape
        a = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.sbuf)
        nisa.memset(a, 1.0)
        for _ in range(n_instr):
            d = nl.ndarray((P, F), dtype=src.dtype, buffer=nl.sbuf)
            if kind == "tensor_scalar":
                nisa.tensor_scalar(d, a, nl.multiply, 2.0, engine=nisa.vector_engine)
            elif kind == "tensor_tensor":
                nisa.tensor_tensor(d, a, a, op=nl.add)
            else:
                nisa.tensor_copy(d, a, engine=nisa.vector_engine)
        return None
    return k


def vector_cycles_per_element(kind, dtype, target="trn2", F=2048, n_instr=32):
    """Vector Engine cycles per element per partition of back-to-back independent instructions."""
    p = _profile(_vector_op(kind, n_instr), ((128, F), dtype), target=target)
    tl = p.timeline
    rows = [r for r in tl.rows() if r.engine == "vector" and r.opcode == kind]
    span = max(r.end for r in rows) - min(r.start for r in rows)
    clk = get_target(target).engine_clock_hz["vector"]
    return span * 1e-9 * clk / (n_instr * F)


def vector_claims():
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    # docs/hardware.md instruction cost model: max(MIN_II, N) for tensor_scalar/tensor_copy (1 cycle per element);
    # tensor_tensor 2N off its fast path (fp32), N on it (all bf16); trn2 performance mode: bf16 SBUF-to-SBUF
    # copies and tensor_scalar 4x, tensor_tensor all-bf16 in SBUF 2x
    spec = [("tensor_scalar", np.float32, "trn1", 1.0), ("tensor_copy", np.float32, "trn1", 1.0),
            ("tensor_tensor", np.float32, "trn1", 2.0), ("tensor_tensor", bf16, "trn1", 1.0),
            ("tensor_scalar", np.float32, "trn2", 1.0), ("tensor_scalar", bf16, "trn2", 0.25),
            ("tensor_copy", bf16, "trn2", 0.25), ("tensor_tensor", bf16, "trn2", 0.5),
            ("tensor_tensor", np.float32, "trn2", 2.0)]
    out = []
    for kind, dt, tg, cpe in spec:
        sim = vector_cycles_per_element(kind, dt, tg)
        out.append(Claim(f"{tg} vector {kind} {np.dtype(dt).name}: cycles/element", cpe, sim, "cycles", 0.02,
                         "NKI ISA cost notes; trainium2_arch performance mode (docs/hardware.md)"))
    return out


def _engine_op(setup, body, n_instr):
    """``setup(src)`` once (the source tiles), then ``n_instr`` independent ``body(src, sources)`` instructions
    back to back (each writes a fresh tile)."""
    def k(src):
        srcs = setup(src)
        for _ in range(n_instr):
            body(src, srcs)
        return None
    return k


def _cycles_per_instr(setup, body, dtype, engine, opcode, target, n_instr=32):
    """Engine cycles per instruction of back-to-back independent instructions (the span of their rows)."""
    p = _profile(_engine_op(setup, body, n_instr), ((128, 1), dtype), target=target)
    rows = [r for r in p.timeline.rows() if r.engine == engine and r.opcode == opcode]
    assert len(rows) == n_instr, (opcode, len(rows))
    span = max(r.end for r in rows) - min(r.start for r in rows)
    return span * 1e-9 * get_target(target).engine_clock_hz[engine] / n_instr


def _tile(src, F, buffer=None, dtype=None):
    return nl.ndarray((128, F), dtype=dtype or src.dtype, buffer=buffer or nl.sbuf)


def _filled(F, buffer=None):
    def setup(src):
        a = _tile(src, F, buffer)
        nisa.memset(a, 1.0)
        return a
    return setup


def _none(src):
    return None


def engine_cost_claims(F=2048):
    """The instruction cost model's per-dtype, per-memory and per-mode statements (docs/hardware.md, "Instruction cost
    model"), each measured as back-to-back independent instructions: cycles per element of N = ``F`` elements
    per partition, or cycles per instruction where the statement is a fixed cost."""
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    src_isa = "NKI ISA cost notes (docs/hardware.md, instruction cost model)"
    mode = "trainium2_arch performance mode (docs/hardware.md)"

    def ts_stride(step):      # tensor_scalar reading every ``step``-th element
        def body(src, a):
            nisa.tensor_scalar(_tile(src, F), a[:, ::step], nl.multiply, 2.0, engine=nisa.vector_engine)
        return _filled(step * F), body

    def copy_psum(src, a):
        nisa.tensor_copy(_tile(src, F), a, engine=nisa.vector_engine)

    def reduce_add(src, a):
        nisa.tensor_reduce(nl.ndarray((128, 1), dtype=src.dtype, buffer=nl.sbuf), nl.add, a, axis=1)

    def recip(engine):
        def body(src, a):
            nisa.reciprocal(_tile(src, F), a, engine=engine)
        return body

    def memset(value):
        def body(src, _):
            nisa.memset(_tile(src, F), value)
        return body

    def act_reduce(src, a):
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation_reduce(_tile(src, F), nl.exp, a, nl.add, r)

    def sbuf_psum(src):            # one input in SBUF, one in PSUM
        a = _tile(src, F)
        nisa.memset(a, 1.0)
        b = _tile(src, F, nl.psum)
        nisa.memset(b, 1.0)
        return a, b

    def tt_psum(src, ab):
        nisa.tensor_tensor(_tile(src, F), ab[0], ab[1], op=nl.add)

    def tt_op(op):
        def body(src, a):
            nisa.tensor_tensor(_tile(src, F), a, a, op=op)
        return body

    def tt_strided(src, a):        # inner stride 2 elements (4 B of bf16: under 16 B, so only non-contiguous)
        nisa.tensor_tensor(_tile(src, F), a[:, ::2], a[:, ::2], op=nl.add)

    def tiny(src, a):
        nisa.tensor_scalar(_tile(src, 16), a, nl.multiply, 2.0, engine=nisa.vector_engine)

    per_elem = [
        # (name, (setup, body), dtype, engine, opcode, target, document cycles/element, source)
        ("trn1 vector tensor_scalar float32, inner stride 32 B", ts_stride(8), np.float32, "vector",
         "tensor_scalar", "trn1", 2.0, src_isa + ": an inner stride over 16 bytes halves the interface bandwidth"),
        ("trn1 vector tensor_scalar float32, inner stride 8 B", ts_stride(2), np.float32, "vector",
         "tensor_scalar", "trn1", 1.0, src_isa + ": strides up to 16 bytes keep the full rate"),
        ("trn2 vector tensor_scalar bfloat16, non-contiguous", ts_stride(2), bf16, "vector", "tensor_scalar",
         "trn2", 0.5, mode + ": 2x when non-contiguous"),
        ("trn2 vector tensor_copy bfloat16, PSUM to SBUF", (_filled(F, nl.psum), copy_psum), bf16, "vector",
         "tensor_copy", "trn2", 0.5, mode + ": 2x when one side is in PSUM"),
        ("trn1 vector tensor_reduce add bfloat16", (_filled(F), reduce_add), bf16, "vector", "tensor_reduce",
         "trn1", 0.5, src_isa + ": N/2 for BF16 in and out with add/max"),
        ("trn1 vector tensor_reduce add float32", (_filled(F), reduce_add), np.float32, "vector", "tensor_reduce",
         "trn1", 1.0, src_isa + ": N otherwise"),
        ("trn1 vector tensor_tensor float32, one input in PSUM", (sbuf_psum, tt_psum), np.float32, "vector",
         "tensor_tensor", "trn1", 1.0, src_isa + ": max(MIN_II, N) if one input is in PSUM"),
        ("trn2 vector tensor_tensor float32, one input in PSUM", (sbuf_psum, tt_psum), np.float32, "vector",
         "tensor_tensor", "trn2", 1.0, src_isa + ": max(MIN_II, N) if one input is in PSUM"),
        ("trn1 vector tensor_tensor bfloat16 maximum, both in SBUF", (_filled(F), tt_op(nl.maximum)), bf16,
         "vector", "tensor_tensor", "trn1", 2.0, src_isa + ": N only for add/mul/sub; otherwise 2N"),
        ("trn1 vector tensor_tensor bfloat16 add, non-contiguous", (_filled(2 * F), tt_strided), bf16, "vector",
         "tensor_tensor", "trn1", 2.0, src_isa + ": N only when contiguous; otherwise 2N"),
        ("trn1 vector reciprocal float32", (_filled(F), recip(nisa.vector_engine)), np.float32, "vector",
         "reciprocal", "trn1", 8.0, src_isa + ": Vector Engine max(MIN_II, 8N)"),
        ("trn1 scalar reciprocal float32", (_filled(F), recip(nisa.scalar_engine)), np.float32, "scalar",
         "reciprocal", "trn1", 1.0, src_isa + ": Scalar Engine max(MIN_II, N)"),
        ("trn1 vector memset zero bfloat16", (_none, memset(0.0)), bf16, "vector", "memset", "trn1", 0.5,
         src_isa + ": max(MIN_II, N/2) for zero in BF16/FP16"),
        ("trn1 vector memset one float32", (_none, memset(1.0)), np.float32, "vector", "memset", "trn1", 1.0,
         src_isa + ": otherwise max(MIN_II, N)"),
    ]
    out = []
    for name, (setup, body), dt, eng, op, tg, doc, source in per_elem:
        sim = _cycles_per_instr(setup, body, dt, eng, op, tg) / F
        out.append(Claim(f"{name}: cycles/element", doc, sim, "cycles", 0.02, source))
    min_ii = get_target("trn1").min_ii_cycles
    sim = _cycles_per_instr(_filled(F), act_reduce, np.float32, "scalar", "activation", "trn1")
    out.append(Claim("trn1 scalar activation_reduce float32: cycles/instruction", F + min_ii, sim, "cycles", 0.02,
                     src_isa + ": activation_reduce max(MIN_II, N) + MIN_II"))
    sim = _cycles_per_instr(_filled(16), tiny, np.float32, "vector", "tensor_scalar", "trn1")
    out.append(Claim("trn1 vector tensor_scalar of 16 elements: cycles/instruction", 64.0, sim, "cycles", 0.02,
                     src_isa + ": MIN_II about 64 cycles"))
    return out


def _matmul_flops_per_ns(target, n, dt):
    """Tensor Engine throughput (flops per ns) of ``n`` back-to-back [128x128] x [128x512] matmuls of dtype ``dt``
    into one PSUM accumulation group, from the first start to the last end."""
    def k(a, b):
        at = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        bt = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(at, a)
        nisa.dma_copy(bt, b)
        acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
        for _ in range(n):
            nisa.nc_matmul(acc, at, bt)
        return None
    p = _profile(k, ((128, 128), dt), ((128, 512), dt), target=target)
    rows = [r for r in p.timeline.rows() if r.engine == "tensor"]
    return sum(r.flops for r in rows) / (max(r.end for r in rows) - min(r.start for r in rows))


def matmul_fp32_claim(target="trn2", n=32):
    """fp32 matmuls cost 4x the bf16 ones (the instruction cost model): bf16 / fp32 back-to-back throughput."""
    import ml_dtypes
    ratio = _matmul_flops_per_ns(target, n, ml_dtypes.bfloat16) / _matmul_flops_per_ns(target, n, np.float32)
    return Claim(f"{target} matmul throughput bf16 / fp32", 4.0, ratio, "x",
                 0.02, "NKI ISA cost notes: nc_matmul FP32 costs 4x (docs/hardware.md)")


def matmul_throughput_claim(target="trn2", n=64):
    """Back-to-back bf16 matmuls [128x128] x [128x512] into one PSUM accumulation group run at the Tensor
    Engine's peak (79 TFLOPS on trn2: 128*128*2*2.4e9)."""
    import ml_dtypes
    tflops = _matmul_flops_per_ns(target, n, ml_dtypes.bfloat16) * 1e-3
    peak = get_target(target).tensor_bf16_flops_per_core * 1e-12
    return Claim(f"{target} back-to-back bf16 matmul throughput", peak, tflops, "TFLOPS", 0.02,
                 "trainium2_arch: 128x128 PE at 2.4 GHz (docs/hardware.md)")


def _dependent_chain_per_instr(target, engine, F, n=32):
    """ns per instruction of a chain of ``n`` tensor_scalar instructions on one engine, each reading the previous
    one's output ([128, F] fp32, immediate operands: one SBUF read and one SBUF write each)."""
    def k(src):
        a = nl.ndarray((src.shape[0], F), dtype=src.dtype, buffer=nl.sbuf)
        nisa.memset(a, 1.0)
        for _ in range(n):
            nisa.tensor_scalar(a, a, nl.multiply, 1.0, op1=nl.add, operand1=1.0, engine=engine)
        return None
    p = _profile(k, ((128, F), np.float32), target=target)
    rows = [r for r in p.timeline.rows() if r.opcode == "tensor_scalar"]
    assert len(rows) == n
    return (rows[-1].start - rows[0].start) / (n - 1)


def dependent_chain_claims():
    """A chain of dependent instructions on one engine: each starts when the previous one's output is committed.
    trnsim's latency of an instruction: its cost + the static overhead (about 100 cycles) + about 60 cycles per
    SBUF/PSUM access request (one per on-chip operand read or written), hidden for independent instructions."""
    tg = get_target("trn1")
    out = []
    # nki_perf_guide.rst Opt #5a: back-to-back ScalarE activations (IDENTITY with scale and bias, "equivalent to
    # tensor_scalar(op0=multiply, op1=add)"), one element per partition, each reading the previous one's output:
    # initiation interval "around 189 ns (264 ScalarE cycles on NC-v2)".  trnsim: max(MIN_II, 1) + 100 + 2 x 60 =
    # 284 cycles = 202.9 ns at 1.4 GHz.  Tolerance 10%: three "about" figures composed (as the tiny-transfer claim).
    per = _dependent_chain_per_instr("trn1", nisa.scalar_engine, 1)
    out.append(Claim("trn1 dependent 1-element chain on one engine (Scalar), per instruction", 189.0, per, "ns",
                     0.10, "nki_perf_guide Opt #5a: 189 ns (264 ScalarE cycles) measured; static overhead and "
                     "access request rows (docs/hardware.md)"))
    # trainium_inferentia2_arch.rst, Vector Engine cost model: with every instruction depending on the previous
    # one's output, "add a static instruction overhead of 100 engine cycles" to the N-cycle estimate: N + 100.
    # trnsim adds the two access requests too (2,048 + 100 + 120).
    F = 2048
    per = _dependent_chain_per_instr("trn1", nisa.vector_engine, F) * 1e-9 * tg.engine_clock_hz["vector"]
    out.append(Claim(f"trn1 dependent chain of {F}-element vector tensor_scalar: cycles/instruction", F + 100.0,
                     per, "cycles", 0.10, "trainium_inferentia2_arch Vector Engine cost model: N + 100 static "
                     "overhead when dependent (docs/hardware.md static overhead row)"))
    return out


def all_claims():
    out = []
    out += dma_curve_claims()
    out.append(dma_example1_claim())
    out.append(dma_fixed_cost_claim())
    out += dma_rate_claims()
    out += hbm_sharing_claims()
    out += vector_claims()
    out += engine_cost_claims()
    out.append(matmul_throughput_claim())
    out.append(matmul_fp32_claim())
    out += dependent_chain_claims()
    from .dma_queues import dge_claims, queue_order_claims, round_robin_claims
    out += queue_order_claims()
    out += round_robin_claims()
    out += dge_claims()
    from .transposes import dma_transpose_claims
    out += dma_transpose_claims()
    return out


def table(claims):
    lines = ["| claim | document | trnsim | error | within | source |", "|---|---|---|---|---|---|"]
    for c in claims:
        lines.append(f"| {c.name} | {c.document:g} {c.unit} | {c.simulated:.4g} {c.unit} | {100 * c.error:+.1f}% | "
                     f"{'yes' if c.ok else 'NO'} (±{100 * c.tolerance:g}%) | {c.source} |")
    return "\n".join(lines)
