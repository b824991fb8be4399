"""The host threads a device op's numerics run on.

A ``neuron`` op computes its values with torch's CPU kernels on the payloads, on the host's intra-op thread pool
(``torch.get_num_threads()``: the host's cores by default).  torch's OpenMP pool spin-waits between parallel regions:
on a loaded host a worker burns CPU while the main thread is descheduled, and a device op of a few hundred thousand
elements costs many times the CPU it costs on one thread.  Measured here (torch 2.13, 2 threads, a 2-core host at
load 6-8, ``time.process_time``): a float32 multiply of 2^20 elements 7.9 ms on 2 threads against 0.34 ms on 1;
``abs().max(dim=-1)`` over 4,096 rows of 256 16 against 1.7 ms; bitsandbytes' ``gemv_4bit`` test body at dim 256 on
``neuron`` 112 against 17 ms an iteration.  The simulated device time is the cost model's, whatever the host does.

So the ops whose result bits cannot depend on how many threads compute them run on one host thread
(``config.serial_host_ops``, on by default): each output element is computed from its inputs alone
(elementwise ops, copies, gathers, max / min reductions, sorts, bucketize), so a split of the work over threads
changes nothing but the host time.  Ops whose result can change with the split stay on the caller's thread count,
as the CPU runs them: sums and means (a full reduction's partial sums are per thread), matmuls (BLAS blocks by
thread), accumulating scatters and index puts, random draws (MKL's streams are per thread) and anything not listed.
With 1 thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``) nothing changes.  A compiled graph's steps
follow the same rule step by step (``compile/runtime.py``, ``CompiledGraph.serial``).

The count is set around the op and put back after it (``torch.set_num_threads`` twice: 0.3-0.5 us, measured as
above); an op nested in another (a decomposition) finds it at 1 already and leaves it."""

from __future__ import annotations

import torch

from .. import config

_get_threads = torch.get_num_threads
_set_threads = torch.set_num_threads

# categories of op_table.TABLE whose every op computes each output element from its inputs alone
SERIAL_CATEGORIES = frozenset({"unary", "binary", "copy", "reduce_max", "sort", "gather"})
# ops of those categories that accumulate into an output (the order of the additions is the threads'), or draw
# random numbers
NOT_SERIAL = frozenset({
    "index_add", "index_add_", "index_put", "index_put_", "_unsafe_index_put", "_unsafe_masked_index_put_accumulate",
    "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
    "embedding_dense_backward", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "native_dropout", "masked_scatter", "masked_scatter_",
})
# ops of other categories that are as elementwise (a search per element)
SERIAL_NAMES = frozenset({"bucketize", "searchsorted"})


def is_serial(name, cat):
    """Whether op ``name`` of category ``cat`` (``op_table.TABLE``) runs its numerics on one host thread."""
    if name in NOT_SERIAL:
        return False
    return cat in SERIAL_CATEGORIES or name in SERIAL_NAMES


def serial(fn):
    """``fn`` run on one host thread while ``config.serial_host_ops`` is on (the caller's count put back after)."""
    def run(*args, **kwargs):
        n = _get_threads()
        if n == 1 or not config.serial_host_ops:
            return fn(*args, **kwargs)
        _set_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            _set_threads(n)
    run.__wrapped__ = fn
    run.__name__ = getattr(fn, "__name__", "op")
    return run
