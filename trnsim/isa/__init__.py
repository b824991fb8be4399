"""The NeuronCore instruction set: for each instruction its rules, its numerics and its cost in engine cycles.

Each instruction is one function ``name(core, loc, ...)`` in the module of its engine.
"""

from .cumulative import tensor_scalar_cumulative
from .dma import dma_compute, dma_copy, dma_cost_ns, dma_transpose
from .dma_rmw import dma_copy_rmw
from .dynamic import tensor_copy_dynamic_dst, tensor_copy_dynamic_src
from .mx import nc_matmul_mx, quantize_mx
from .rng import dropout, rand2, rand_get_state, rand_set_state, rng, set_rng_seed
from .gather import local_gather, nc_n_gather, nonzero_with_count, sequence_bounds, tensor_partition_reduce, topk
from .errors import NkiValidationError, caller_location
from .gpsimd import affine_select, iota, max8, nc_find_index8, nc_match_replace8, nc_stream_shuffle
from .scalar import activate2, activation, activation_reduce, exponential
from .tensor_engine import matmul_cycles, nc_matmul, nc_transpose
from .vector import (range_select, bn_aggr, bn_stats, memset, reciprocal, scalar_tensor_tensor, select_reduce, tensor_copy,
                     tensor_copy_predicated, tensor_reduce, tensor_scalar, tensor_scalar_reduce, tensor_tensor,
                     tensor_tensor_scan)

INSTRUCTIONS = {f.__name__: f for f in (
    dma_copy, tensor_copy, tensor_tensor, memset, nc_matmul, tensor_scalar, activation, nc_transpose,
    tensor_reduce, iota, dma_transpose, reciprocal, scalar_tensor_tensor, tensor_scalar_reduce, affine_select,
    activation_reduce, tensor_tensor_scan, tensor_copy_predicated, bn_stats, bn_aggr, max8, nc_find_index8,
    nc_match_replace8, select_reduce, range_select, exponential, nc_stream_shuffle, nonzero_with_count,
    tensor_partition_reduce, sequence_bounds, local_gather, nc_n_gather, tensor_scalar_cumulative, dma_compute,
    activate2, quantize_mx, nc_matmul_mx, topk, rng, rand2, dropout, set_rng_seed, rand_set_state,
    rand_get_state)}

# legacy-only instructions (neuronxcc.nki): not in INSTRUCTIONS, whose names are also the v2 ``nki.isa`` API
LEGACY_INSTRUCTIONS = {f.__name__: f for f in (tensor_copy_dynamic_src, tensor_copy_dynamic_dst, dma_copy_rmw)}

__all__ = ["NkiValidationError", "caller_location", "INSTRUCTIONS", "LEGACY_INSTRUCTIONS", "dma_cost_ns",
           "matmul_cycles"] + list(INSTRUCTIONS) + list(LEGACY_INSTRUCTIONS)
