"""FlexAttention on the ``neuron`` device, eager and compiled, forward and backward.

torch's ``flex_attention`` and ``flex_attention_backward`` higher-order ops get an implementation for the device's
tensor type: the payloads go through torch's dense implementation (``sdpa_dense`` / ``sdpa_dense_backward``: the
score matrix materialised, score_mod and the block mask applied, softmax, matmul), and the device is charged what an
attention kernel of those shapes costs (``charging.op_time`` of category ``sdpa``; the backward twice that,
``estimated``).  In a compiled graph the same ops are kernels of their own (see ``ops.py``).  The front end's device
check is lifted by ``patches.flex_attention_device``.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from .. import charging
from ..tensor import NeuronTensor, wrap

_DONE = []


class _OnHost(torch.overrides.TorchFunctionMode):
    """While the dense implementation runs on the payloads, a tensor the mask/score mods create on the device
    (``new_ones(..., device=neuron)`` baked into a traced mod) is created on the host instead."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        d = kwargs.get("device")
        if d is not None and torch.device(d).type == "neuron":
            kwargs = dict(kwargs, device="cpu")
        return func(*args, **kwargs)


def _unwrap(x):
    return x._p if isinstance(x, NeuronTensor) else x


def _charge(name, cat, args, out):
    from torch._subclasses.fake_tensor import FakeTensor
    if isinstance(args[0], FakeTensor):
        return                 # dynamo propagating shapes through the op while tracing: nothing runs on the device
    ns, kind, fl, nb = charging.op_time(name, cat, args, out)
    charging.advance(name, ns, kind, fl, nb, args, out)


def enable():
    """Register the device implementations (once) and lift the front end's device check."""
    if _DONE:
        return
    from torch._higher_order_ops.flex_attention import flex_attention as fa_hop
    from torch._higher_order_ops.flex_attention import flex_attention_backward as fab_hop

    from .. import patches
    # torch's dense kernels, called directly (a call through the higher-order op would not see _OnHost)
    dense_fw = fa_hop.py_kernels[torch._C.DispatchKey.CompositeExplicitAutograd]
    dense_bw = fab_hop.py_kernels[torch._C.DispatchKey.CompositeExplicitAutograd]

    @fa_hop.py_impl(NeuronTensor)
    def _forward(*args, **kwargs):
        ua, uk = pytree.tree_map(_unwrap, (args, kwargs))
        with torch.no_grad(), _OnHost():
            out = dense_fw(*ua, **uk)
        _charge("flex_attention", "sdpa", ua[:3], None)
        return pytree.tree_map(lambda t: wrap(t) if isinstance(t, torch.Tensor) else t, out)

    @fab_hop.py_impl(NeuronTensor)
    def _backward(*args, **kwargs):
        ua, uk = pytree.tree_map(_unwrap, (args, kwargs))
        with torch.no_grad(), _OnHost():
            out = dense_bw(*ua, **uk)
        _charge("flex_attention_backward", "backward:sdpa", ua[:3], None)
        return pytree.tree_map(lambda t: wrap(t) if isinstance(t, torch.Tensor) else t, out)

    patches.flex_attention_device()
    _DONE.append(True)
