"""The documents' micro-architectural statements, reproduced by the simulator (benchmarks/microbench/): each claim
is compared with the figure its source states, within the reading accuracy of that source."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
microbench = pytest.importorskip("benchmarks.microbench")

CLAIMS = microbench.all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.name)
def test_claim_matches_document(claim):
    assert claim.ok, (f"{claim.name}: document {claim.document} {claim.unit}, trnsim {claim.simulated:.4g} "
                      f"({100 * claim.error:+.1f}%, allowed ±{100 * claim.tolerance:.0f}%) [{claim.source}]")


def test_the_table_covers_every_document_statement():
    names = " ".join(c.name for c in CLAIMS)
    for what in ("DMA throughput at 32 B", "DMA throughput at 32768 B", "4 partitions x 8 KiB", "tiny transfer",
                 "practical rate", "cycles/element", "matmul throughput", "dependent 1-element chain on one engine",
                 "dependent chain of 2048-element",
                 "inner stride 32 B", "PSUM to SBUF", "non-contiguous", "tensor_reduce add bfloat16", "reciprocal",
                 "memset zero", "activation_reduce", "of 16 elements", "bf16 / fp32",
                 "8 cores streaming", "HBM->HBM together", "streaming alone", "4 of 8 launched cores",
                 "one input in PSUM", "maximum, both in SBUF", "add, non-contiguous",
                 "one DMA queue", "two DMA queues", "round robin: two DMA queues", "round robin: a lone DMA queue",
                 "hwdge: a lone tiny transfer", "two DGE blocks",
                 "beside 8 hwdge", "swdge: GpSimd Engine busy", "dge_mode unknown",
                 "DMA transpose HBM->SBUF", "DMA transpose SBUF->SBUF throughput", "8-element runs"):
        assert what in names
