"""Autocast on the ``neuron`` device: ``torch.autocast("neuron", dtype=torch.bfloat16)``.

PyTorch registers no AutocastPrivateUse1 kernels, so without these every op fails with "Could not run ...
'Autocastneuron'".  All ops fall through, except: the matmul family runs in the autocast dtype (the Tensor
Engine's bf16 path, accumulating in fp32), and the numerically sensitive ops listed in ``FP32`` run in fp32, as on
the CUDA policy.
"""

from __future__ import annotations

import torch

LOWER = ["mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "conv1d", "conv2d", "conv3d",
         "_convolution", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
         "scaled_dot_product_attention", "linalg_vecdot", "mv", "addmv", "dot", "einsum_dummy"]
FP32 = ["_softmax_dummy", "softmax", "log_softmax", "layer_norm", "rms_norm", "nll_loss", "nll_loss_nd",
        "cross_entropy_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
        "binary_cross_entropy_with_logits", "logsumexp", "cumsum", "prod", "norm", "erfinv", "pow_dummy"]

_lib = None
_KEY = None


def _cast(x, dt):
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() and x.dtype != dt and x.dtype != torch.float64 and x.device.type == "neuron":
            return x.to(dt)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(y, dt) for y in x)
    return x


def _kernel(op, lower):
    def k(*args, **kwargs):
        dt = torch.get_autocast_dtype("neuron") if lower else torch.float32
        args = _cast(args, dt)
        kwargs = {n: _cast(v, dt) for n, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_KEY):
            return op(*args, **kwargs)
    return k


def register():
    global _lib, _KEY
    if _lib is not None:
        return
    _KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
    _lib = torch.library.Library("_", "IMPL")
    _lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _alib = torch.library.Library("aten", "IMPL")
    for names, lower in ((LOWER, True), (FP32, False)):
        for n in names:
            if n.endswith("_dummy"):
                continue
            packet = getattr(torch.ops.aten, n, None)
            if packet is None:
                continue
            for ov in packet.overloads():
                op = getattr(packet, ov)
                _alib.impl(op, _kernel(op, lower), "AutocastPrivateUse1")
    _lib._aten = _alib
