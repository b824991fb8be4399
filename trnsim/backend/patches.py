"""Every private-API patch the ``neuron`` device needs, in one place, each guarded by the torch version it was
written for.  Each has a test in tests/backend/test_patches.py.

1. ``torch.optim.optimizer._foreach_supported_types`` and ``torch.utils._foreach_utils._foreach_supported_types``:
   exact-type allow-lists; without NeuronTensor in them AdamW and clip_grad_norm_ silently take the slow path.
2. ``torch.accelerator.synchronize``: the C++ side behind a Python PrivateUse1 backend has no device to
   synchronise; replaced by ``torch.neuron.synchronize``.
4. ``torch.autograd._engine_run_backward``: on torch 2.13 an exception raised from ``__torch_dispatch__`` on
   autograd's device thread for a Python PrivateUse1 backend aborts the process ("terminate called without an
   active exception").  The device records such errors instead (fallback errors, cross-device errors) and this
   wrapper re-raises the first one on the calling thread when backward returns.
3. ``torch.Tensor.pin_memory`` / ``is_pinned``: there is no pinned-memory allocator for a Python backend; pinning
   is a no-op (host memory is host memory in the simulator).
"""

from __future__ import annotations

import torch

SUPPORTED = ("2.13",)
APPLIED = []


def _version_ok():
    return torch.__version__.split("+")[0].rsplit(".", 1)[0] in SUPPORTED


def _foreach(tensor_type):
    import torch.optim.optimizer as opt
    import torch.utils._foreach_utils as fu
    for mod in (opt, fu):
        lst = getattr(mod, "_foreach_supported_types", None)
        if isinstance(lst, list) and tensor_type not in lst:
            lst.append(tensor_type)
    APPLIED.append("foreach_supported_types")


def _accelerator_sync(device_module):
    orig = torch.accelerator.synchronize

    def synchronize(device=None, /):
        if device is None or torch.device(device).type == "neuron" or isinstance(device, int):
            return device_module.synchronize(device)
        return orig(device)
    synchronize.__doc__ = orig.__doc__
    synchronize._trnsim_orig = orig
    torch.accelerator.synchronize = synchronize
    APPLIED.append("accelerator.synchronize")


def _pin_memory():
    orig_pin = torch.Tensor.pin_memory
    orig_is = torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        return self

    def is_pinned(self, device=None):
        return False
    pin_memory._trnsim_orig = orig_pin
    is_pinned._trnsim_orig = orig_is
    torch.Tensor.pin_memory = pin_memory
    torch.Tensor.is_pinned = is_pinned
    APPLIED.append("pin_memory")


def _backward_errors():
    import torch.autograd as ag
    from .tensor import PENDING
    orig = ag._engine_run_backward

    def _engine_run_backward(*args, **kwargs):
        del PENDING[:]
        try:
            out = orig(*args, **kwargs)
        finally:
            errs = list(PENDING)
            del PENDING[:]
        if errs:
            raise errs[0]
        return out
    _engine_run_backward._trnsim_orig = orig
    ag._engine_run_backward = _engine_run_backward
    APPLIED.append("autograd._engine_run_backward")


def apply(tensor_type, device_module):
    if not _version_ok():
        import warnings
        warnings.warn(f"trnsim's neuron device was written for torch {SUPPORTED}; torch {torch.__version__} may "
                      "need other private patches", RuntimeWarning, stacklevel=2)
    _foreach(tensor_type)
    _accelerator_sync(device_module)
    _pin_memory()
    _backward_errors()


# -- torch.distributed (the "neuron" process group, trnsim/backend/distributed.py) ----------------------------
def _functional_collectives_wrap():
    """5. ``torch.distributed._functional_collectives._maybe_wrap_tensor``: its ``_wrap_tensor_autograd`` custom op
    builds an ``AsyncCollectiveTensor`` around whatever reaches its kernel, which for a ``neuron`` tensor is the CPU
    payload (the wrapper is unwrapped on the way in), so the result cannot be re-wrapped.  The neuron process group
    runs every collective to completion, so a neuron tensor takes the path torch uses under tracing:
    ``wait_tensor(t)``, a plain tensor.  Other tensors keep the original path."""
    if not _version_ok():
        return
    import torch.distributed._functional_collectives as fc
    from .tensor import NeuronTensor
    orig = fc._maybe_wrap_tensor

    def _maybe_wrap_tensor(self):
        if type(self) is NeuronTensor:
            return fc.wait_tensor(self)
        return orig(self)
    _maybe_wrap_tensor._trnsim_orig = orig
    fc._maybe_wrap_tensor = _maybe_wrap_tensor
    APPLIED.append("_functional_collectives._maybe_wrap_tensor")


def dynamo_wrap_tensor(tensor_type):
    """5. torch._dynamo ``VariableBuilder._type_dispatch_impl`` (torch 2.13): dynamo wraps a value by its exact type;
    an unknown tensor subclass is traced as an object (graph breaks, then tracing into ``__torch_dispatch__``).
    Mapping the device tensor type to ``wrap_tensor`` in both tables (``trace_numpy`` True and False) makes dynamo
    treat it as a tensor.  Applied by the compile backend when dynamo is first used (never at import: importing
    dynamo costs about a second)."""
    if "dynamo_wrap_tensor" in APPLIED:
        return
    if not _version_ok():
        import warnings
        warnings.warn(f"trnsim's dynamo patch was written for torch {SUPPORTED}; torch {torch.__version__} may "
                      "trace neuron tensors with graph breaks", RuntimeWarning, stacklevel=2)
    from torch._dynamo.variables.builder import VariableBuilder
    for trace_numpy in (True, False):
        table = VariableBuilder._type_dispatch_impl(trace_numpy)
        table[tensor_type] = VariableBuilder.wrap_tensor
    APPLIED.append("dynamo_wrap_tensor")


def flex_attention_device():
    """6. ``torch.nn.attention.flex_attention._validate_device`` (torch 2.13): the front end accepts only CUDA, CPU,
    XPU, HPU and MPS inputs ("FlexAttention is only supported on CUDA, CPU, HPU, or MPS devices").  Inputs on
    ``neuron`` are let through (forward and backward: the device implements both, see
    ``trnsim/backend/compile/flex.py``); every other device keeps torch's check.  Applied with the compile backend
    (FlexAttention always goes through dynamo)."""
    if "flex_attention_device" in APPLIED:
        return
    import torch.nn.attention.flex_attention as fa
    orig = fa._validate_device

    def _validate_device(query, key, value):
        if query.device.type == "neuron":
            return None
        return orig(query, key, value)
    _validate_device._trnsim_orig = orig
    fa._validate_device = _validate_device
    APPLIED.append("flex_attention_device")
