"""``nki.isa.constants``: the enums of ``nki.isa`` under the module name some kernels import them from."""

from ..isa_api import dge_mode, dma_engine, engine, matmul_perf_mode, nc_version, oob_mode, reduce_cmd  # noqa: F401
