"""Hardware descriptions of the Trainium generations trnsim models.

Every figure comes from the published sources listed in ``docs/hardware.md`` (section "Sources"); the comment
beside each value names the page.  Abbreviations used in the comments:

* ``chip:trn1/2/3`` -- AWS Neuron docs, about-neuron/arch/neuron-hardware/trainium{,2,3}.rst
* ``arch:v2/v3/v4`` -- AWS Neuron docs, nki/guides/architecture/{trainium_inferentia2,trainium2,trainium3}_arch.rst
* ``dma-bw`` -- AWS Neuron docs, nki/deep-dives/nki-dma-bandwidth-guide.rst
* ``dma-ov`` -- AWS Neuron docs, nki/get-started/about/nki-dma-overview.rst
* ``dge`` -- AWS Neuron docs, nki/deep-dives/nki-dge.rst
* ``isa-cost`` -- the "estimated cost" notes of the NKI ISA reference, SDK 2.26
  (awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.isa.*.html) and nki_perf_guide.rst
* ``lnc`` -- AWS Neuron docs, about-neuron/arch/neuron-features/logical-neuroncore-config.rst

Code asks a :class:`Target` for a figure; it never writes the literal itself.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

from . import config

__all__ = ["Target", "TRN1", "TRN2", "TRN3", "TARGETS", "get_target", "resolve_target_name"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclasses.dataclass(frozen=True)
class Target:
    """One Trainium generation, as the simulator sees it.  Immutable."""

    name: str                      # "trn1" | "trn2" | "trn3"
    nc_version: int                # nki.isa.nc_version value: gen2=2 (trn1), gen3=3 (trn2), gen4=4 (trn3)
    marketing_name: str
    # -- cores ---------------------------------------------------------------------------------
    physical_cores_per_chip: int
    default_lnc: int
    allowed_lnc: tuple
    # -- clocks --------------------------------------------------------------------------------
    engine_clock_hz: Mapping[str, float]
    # -- Tensor Engine -------------------------------------------------------------------------
    pe_rows: int                   # systolic array rows (contraction / partition dim)
    pe_cols: int                   # systolic array columns (stationary free dim)
    moving_fmax: int               # moving tile free size limit
    tensor_bf16_flops_per_core: float
    fp32_matmul_slowdown: int      # fp32 operands cost this many times the bf16 cycles
    fp8_double_row: bool           # fp8 double-row mode: K=2*pe_rows per instruction in bf16 time
    psum_bf16_accumulate: bool
    # -- on-chip memory ------------------------------------------------------------------------
    sbuf_partitions: int
    sbuf_partition_bytes: int
    psum_partitions: int
    psum_partition_bytes: int
    psum_banks: int
    # -- HBM -----------------------------------------------------------------------------------
    hbm_bytes_per_chip: int
    hbm_peak_bytes_per_s: float
    # -- DMA -----------------------------------------------------------------------------------
    dma_engines_per_core: int
    dma_queues_per_engine: int
    dma_bytes_per_ns_per_engine: float   # practical rate per engine
    dma_fixed_ns: float                  # semaphore-to-start cost per transfer
    dma_dge_instruction_ns: float        # per hardware-DGE instruction
    dma_partitions_per_engine: int
    dma_small_payload_bytes: int         # below this per partition a transfer is overhead-bound
    dma_saturating_payload_bytes: int    # at or above this per partition a transfer saturates
    dma_knee_bytes_per_partition: float  # packet-rate knee of the throughput curve (isa/dma_timing.py)
    dma_knee_sharpness: float            # exponent of the smooth maximum joining packet rate and bandwidth
    dma_transpose_tile_partitions: int   # a DMA transpose writes [partitions, elems] SBUF tiles, all engines at once
    dma_transpose_tile_elems: int
    dma_transpose_hbm_efficiency: float  # share of the core's DMA throughput an HBM->SBUF transpose reaches
    dma_transpose_sbuf_efficiency: float  # same for SBUF->SBUF
    # -- instruction overheads -----------------------------------------------------------------
    min_ii_cycles: int
    static_overhead_cycles: int
    access_request_cycles: int
    gpsimd_fixed_cycles: int
    dynamic_offset_cycles: int
    semaphore_ns: float
    vector_perf_mode: bool               # trn2+ "performance mode" for bf16 copies/tensor_scalar
    # -- vector limits -------------------------------------------------------------------------
    vector_sbuf_fmax: int
    vector_psum_fmax: int
    # -- reported, not modelled ----------------------------------------------------------------
    chip_bf16_tflops_marketing: float

    # derived figures -----------------------------------------------------------------------------
    @property
    def sbuf_bytes(self) -> int:
        return self.sbuf_partitions * self.sbuf_partition_bytes

    @property
    def psum_bytes(self) -> int:
        return self.psum_partitions * self.psum_partition_bytes

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_partition_bytes // self.psum_banks

    @property
    def pmax(self) -> int:
        return self.sbuf_partitions

    @property
    def dma_bytes_per_ns_per_core(self) -> float:
        return self.dma_engines_per_core * self.dma_bytes_per_ns_per_engine

    def cycles_to_ns(self, engine: str, cycles: float) -> float:
        return cycles * 1e9 / self.engine_clock_hz[engine]

    def hbm_bytes_per_logical_core(self, lnc: int) -> int:
        return self.hbm_bytes_per_chip // (self.physical_cores_per_chip // lnc)

    def __repr__(self) -> str:  # the full dump is long; the name is what people want to see
        return f"Target({self.name!r})"


def _clocks(tensor, vector, scalar, gpsimd):
    # The Sync engine and DMA descriptors run at the GpSimd/Scalar clock domain; trnsim only uses it for
    # converting sync-engine cycles, so it takes the scalar clock.
    return MappingProxyType({"tensor": tensor, "vector": vector, "scalar": scalar, "gpsimd": gpsimd,
                             "sync": scalar})


_COMMON_OVERHEADS = dict(
    min_ii_cycles=64,            # isa-cost: MIN_II about 64 engine cycles
    # docs/hardware.md instruction cost model, "static overhead" row: "about 100 cycles for a tiny or dependent
    # instruction" (trainium_inferentia2_arch.rst: "add a static instruction overhead of 100 engine cycles to the
    # above execution cost estimate" for an instruction depending on the previous one's output)
    static_overhead_cycles=100,
    # same row: "about 60 cycles per SBUF/PSUM access request" (trainium_inferentia2_arch.rst, "Tensor access
    # overhead": initiating a tensor access request to the SBUF/PSUM read/write interface, approximately 60 cycles
    # on NeuronCore-v2, which engines "can typically hide ... through instruction level parallelism")
    access_request_cycles=60,
    gpsimd_fixed_cycles=150,     # isa-cost: GpSimd instructions about 150 + N cycles
    dynamic_offset_cycles=600,   # isa-cost: dynamic (register) offset max(about 600, N)
    vector_sbuf_fmax=64 * 1024,  # docs/hardware.md memory rules: vector free size up to 64K elements from SBUF
    vector_psum_fmax=4 * 1024,   # docs/hardware.md memory rules: 4K elements from PSUM
    dma_engines_per_core=16,     # dma-ov: 16 DMA engines per core
    dma_fixed_ns=1300.0,         # dma-bw: about 1,300 ns from semaphore to start per transfer
    dma_dge_instruction_ns=600.0,  # dge: about 600 ns per hardware-DGE instruction
    dma_partitions_per_engine=8,   # dma-bw: each engine serves 8 partitions
    dma_small_payload_bytes=256,   # dma-bw: < 256 B per partition is overhead-bound
    dma_saturating_payload_bytes=4096,  # dma-bw: >= 4 KiB per partition saturates
    # dma-ov plot (docs/hardware.md "DMA in detail"): throughput is proportional to bytes per partition below the
    # knee: 1.4/2.6/5.0/10/21/42% at 32..1024 B give a knee of 32/.014=2286, 64/.026=2462, 128/.05=2560,
    # 256/.10=2560, 512/.21=2438, 1024/.42=2438 B: mean 2450 B per partition (one descriptor per row)
    dma_knee_bytes_per_partition=2450.0,
    # dma-ov plot: 81% at 2 KiB and 97% at 4 KiB, where a hard knee at 2450 B gives 84% and 100%; a smooth
    # maximum with exponent 8 gives 81.7% and 99.8%
    dma_knee_sharpness=8.0,
    # arch:v3, "DMA Transpose": "all 16x DMA engines ... work co-operatively ... write into a single
    # [nl.par_dim(128), 16] SBUF tile in parallel at a time, where the 16 elements along free dimension must be
    # contiguous"; other tile sizes work "at the cost of DMA performance" (trnsim: a partial tile costs a whole one)
    dma_transpose_tile_partitions=128,
    dma_transpose_tile_elems=16,
    # arch:v3: "DMA transpose on Trainium2 can achieve up to 90% DMA throughput utilization given hardware-friendly
    # tensor access patterns" (HBM2SBUF) and "SBUF2SBUF transpose can achieve up to 50% of DMA throughput on
    # Trainium2".  Stated for Trainium2 only; trn1 and trn3 take the same shares (no figure of their own).
    dma_transpose_hbm_efficiency=0.9,
    dma_transpose_sbuf_efficiency=0.5,
    pe_rows=128, pe_cols=128,    # arch:v2/v3/v4: 128x128 systolic array
    moving_fmax=512,             # docs/hardware.md memory rules: moving <= 128 x 512
    sbuf_partitions=128,         # arch: 128 partitions
    psum_partitions=128,         # arch: 128 partitions
    psum_partition_bytes=16 * KiB,  # arch: PSUM 2 MiB = 128 x 16 KiB
    psum_banks=8,                # arch: 8 banks of 2 KiB per partition
    fp32_matmul_slowdown=4,      # arch / isa-cost: FP32 matmul costs 4x (20 vs 79 TFLOPS)
)

# The cross-engine semaphore wait of the compute engines is not published (docs/hardware.md gives none; the Neuron docs
# say only that engines synchronise "through atomic semaphores in hardware", trainium_inferentia2_arch.rst), so
# trnsim charges none beyond the latency every dependency already has (the scheduler: cost + static overhead + 60
# cycles per SBUF/PSUM access request).  Earlier trnsim derived 118 ns here from the 189 ns dependent chain; that
# chain is measured on ONE engine (nki_perf_guide.rst, Opt #5a: back-to-back dependent ScalarE activations,
# "189 ns (264 ScalarE cycles on NC-v2)"), so it holds no cross-engine cost (docs/notes/timing.md#engines).
_SEMAPHORE_NS = 0.0


TRN1 = Target(
    name="trn1", nc_version=2, marketing_name="Trainium",
    physical_cores_per_chip=2,            # chip:trn1: 2 NeuronCore-v2 per chip
    default_lnc=1, allowed_lnc=(1,),      # lnc: trn1 is LNC=1 only
    engine_clock_hz=_clocks(2.8e9, 1.12e9, 1.4e9, 1.4e9),  # arch:v2: PE 2.8 GHz, vector 1.12, scalar/gpsimd 1.4
    tensor_bf16_flops_per_core=92e12,     # arch:v2: 92 TFLOPS BF16 dense
    fp8_double_row=False,                 # arch:v2: no fp8 double-row mode listed
    psum_bf16_accumulate=False,
    sbuf_partition_bytes=192 * KiB,       # arch:v2: 24 MiB = 128 x 192 KiB
    hbm_bytes_per_chip=32 * GiB,          # chip:trn1: 32 GiB
    hbm_peak_bytes_per_s=820e9,           # chip:trn1: 820 GB/s
    dma_queues_per_engine=16,             # dma-ov: 16 queues each
    dma_bytes_per_ns_per_engine=17.0,     # dma-bw: 17 B/ns per engine (practical)
    semaphore_ns=_SEMAPHORE_NS,
    vector_perf_mode=False,               # arch:v3: performance mode is a trn2 addition
    chip_bf16_tflops_marketing=190.0,     # chip:trn1: 190 TFLOPS BF16 per chip (reported, not modelled)
    **_COMMON_OVERHEADS,
)

TRN2 = Target(
    name="trn2", nc_version=3, marketing_name="Trainium2",
    physical_cores_per_chip=8,            # chip:trn2: 8 NeuronCore-v3 (2 dies)
    default_lnc=2, allowed_lnc=(1, 2),    # lnc: LNC=2 default, LNC=1 allowed
    engine_clock_hz=_clocks(2.4e9, 0.96e9, 1.2e9, 1.2e9),  # arch:v3: PE 2.4 GHz, vector 0.96, scalar/gpsimd 1.2
    tensor_bf16_flops_per_core=128 * 128 * 2 * 2.4e9,      # arch:v3: 79 TFLOPS = 128*128*2*2.4e9
    fp8_double_row=True,                  # arch:v3: fp8 158 TFLOPS via double-row (K=256 in bf16 time)
    psum_bf16_accumulate=False,
    sbuf_partition_bytes=224 * KiB,       # arch:v3: 28 MiB = 128 x 224 KiB
    hbm_bytes_per_chip=96 * GiB,          # chip:trn2: 96 GiB (4 stacks of 24 GiB)
    hbm_peak_bytes_per_s=2.9e12,          # chip:trn2: 2.9 TB/s
    dma_queues_per_engine=16,             # dma-ov: 16 queues each
    dma_bytes_per_ns_per_engine=23.0,     # dma-bw: 23 B/ns per engine (368 GB/s per core)
    semaphore_ns=_SEMAPHORE_NS,
    vector_perf_mode=True,                # arch:v3: vector performance mode (4x/2x copies, tensor_scalar)
    chip_bf16_tflops_marketing=667.0,     # chip:trn2: 667 TFLOPS BF16 (marketing peak, not modelled)
    **_COMMON_OVERHEADS,
)

TRN3 = Target(
    name="trn3", nc_version=4, marketing_name="Trainium3",
    physical_cores_per_chip=8,            # chip:trn3: 8 NeuronCore-v4 (2 chiplets)
    default_lnc=2, allowed_lnc=(1, 2),    # lnc: LNC=2 default
    engine_clock_hz=_clocks(2.4e9, 1.2e9, 1.2e9, 1.2e9),   # arch:v4: PE 2.4 GHz, vector/scalar/gpsimd 1.2
    tensor_bf16_flops_per_core=128 * 128 * 2 * 2.4e9,      # arch:v4: 79 TFLOPS
    fp8_double_row=True,                  # arch:v4: MXFP8/MXFP4 at 315 TFLOPS (K=512); fp8 double-row kept
    psum_bf16_accumulate=True,            # arch:v4: BF16 accumulation in PSUM added
    sbuf_partition_bytes=256 * KiB,       # arch:v4: 32 MiB = 128 x 256 KiB
    hbm_bytes_per_chip=144 * GiB,         # chip:trn3: 144 GiB
    hbm_peak_bytes_per_s=4.9e12,          # chip:trn3: 4.9 TB/s
    dma_queues_per_engine=16,             # dma-ov lists 16 engines per core for trn3; queues as trn2 (not restated)
    dma_bytes_per_ns_per_engine=33.0,     # dma-bw: 33 B/ns per engine (528 GB/s per core)
    semaphore_ns=_SEMAPHORE_NS,
    vector_perf_mode=True,                # arch:v4 keeps trn2's performance mode
    chip_bf16_tflops_marketing=671.0,     # chip:trn3: 671 TFLOPS BF16 (marketing peak, not modelled)
    **_COMMON_OVERHEADS,
)

TARGETS: Mapping[str, Target] = MappingProxyType({"trn1": TRN1, "trn2": TRN2, "trn3": TRN3})

# NEURON_PLATFORM_TARGET_OVERRIDE also accepts the NeuronCore generation names.
_ALIASES = {"gen2": "trn1", "gen3": "trn2", "gen4": "trn3", "trn1n": "trn1"}

ENV_VAR = "NEURON_PLATFORM_TARGET_OVERRIDE"


def resolve_target_name(name: str) -> str:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TARGETS:
        raise ValueError(
            f"unknown Trainium target {name!r}: expected one of trn1, trn2, trn3 (aliases gen2, gen3, gen4)")
    return key


def get_target(target: "str | Target | None" = None) -> Target:
    """Return the :class:`Target` asked for, or the one ``NEURON_PLATFORM_TARGET_OVERRIDE`` names (default trn2)."""
    if isinstance(target, Target):
        return target
    if target is None:
        env = config.platform_target
        if not env:
            return TRN2
        try:
            return TARGETS[resolve_target_name(env)]
        except ValueError as exc:
            raise ValueError(f"{ENV_VAR}={env!r}: {exc}") from None
    return TARGETS[resolve_target_name(target)]
