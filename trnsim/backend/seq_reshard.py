"""A sequence-parallel reshard as one rank of a tensor-parallel group runs it: ``trnsim_coll::seq_reshard``, a
``torch.library.custom_op`` (so ``torch.compile`` traces it into the layer's graph as one node instead of breaking
the graph there, https://pytorch.org/docs/stable/library.html#torch.library.custom_op and PyTorch's "Custom
Python Operators" tutorial: an op with a fake implementation works in compiled graphs).

``seq_reshard(x, group, gather)``: ``x`` is ``[batch, seq, hidden]``.  ``gather`` is the all-gather along the
sequence (``[b, s, h]`` -> ``[b, s * group, h]``), else the reduce-scatter (``[b, s, h]`` -> ``[b, s / group, h]``)
that Megatron-LM's sequence parallelism uses in place of the tensor-parallel all-reduce.

The values are those of the collective when every rank of the group holds what this rank holds (the estimator
simulates one rank; the others are alike): the all-gather repeats ``x`` ``group`` times along the sequence, the
reduce-scatter is ``group`` times this rank's (rank 0's) slice of the sequence.  The backward is the collective the
distributed backward runs, the opposite one, under the same assumption.  The op does no device work on the rank's
engines and charges nothing here: its time is the collectives model's (``trnsim.collectives.collective_time``),
charged by whoever knows the topology and group -- the estimator in eager runs, the compile backend's graph plan
(``compile/collective.py``) inside a compiled graph, where it may overlap the graph's independent kernels.
"""

from __future__ import annotations

import torch

__all__ = ["seq_reshard", "op", "NAMESPACE"]

NAMESPACE = "trnsim_coll"
_OP = []


def _check(x, group, gather):
    if x.dim() != 3:
        raise ValueError(f"seq_reshard: x must be [batch, seq, hidden], got shape {list(x.shape)}")
    if int(group) < 1:
        raise ValueError(f"seq_reshard: group {group}: the tensor-parallel group has at least 1 rank")
    if not gather and x.shape[1] % group:
        raise ValueError(f"seq_reshard: reduce-scatter of a sequence of {x.shape[1]} over {group} ranks: the sequence "
                         f"must be divisible by the group size")


def out_shape(shape, group, gather):
    """The output shape of the reshard of a ``[b, s, h]`` input."""
    b, s, h = shape
    return (b, s * group if gather else s // group, h)


def _payload(x, group, gather):
    """The values (on a plain, meta or fake tensor): the module docstring's rule."""
    _check(x, group, gather)
    if gather:
        return x.repeat(1, group, 1)
    return (x[:, : x.shape[1] // group] * group).contiguous()


def op():
    """The custom op (defined on first use: the ``neuron`` device must be registered first)."""
    if not _OP:
        _OP.append(_define())
    return _OP[0]


def seq_reshard(x, group: int, gather: bool):
    return op()(x, int(group), bool(gather))


def _define():
    from . import registration  # noqa: F401  -- the neuron device name, for register_kernel

    @torch.library.custom_op(f"{NAMESPACE}::seq_reshard", mutates_args=())
    def reshard(x: torch.Tensor, group: int, gather: bool) -> torch.Tensor:
        return _payload(x, group, gather)

    @reshard.register_fake
    def _fake(x, group, gather):
        _check(x, group, gather)
        return x.new_empty(out_shape(tuple(x.shape), group, gather))

    @reshard.register_kernel("neuron")
    def _neuron(x, group, gather):
        # on the rank's payload (real, meta or fake), with no charge: the collective's time is charged by the caller
        from .tensor import wrap
        return wrap(_payload(x._p, group, gather))

    def setup(ctx, inputs, output):
        ctx.group, ctx.gather = inputs[1], inputs[2]

    def backward(ctx, g):
        return reshard(g, ctx.group, not ctx.gather), None, None

    reshard.register_autograd(backward, setup_context=setup)
    return reshard
