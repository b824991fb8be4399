"""Every private-API patch the ``neuron`` device needs, in one place, each guarded by the torch version it was
written for.  Each has a test in tests/backend/test_device_ops.py
(``test_patches_each_applied``) or tests/backend/test_compile.py (``test_compile_patches_each_applied``).

1. ``torch.optim.optimizer._foreach_supported_types`` and ``torch.utils._foreach_utils._foreach_supported_types``:
   exact-type allow-lists; without NeuronTensor in them AdamW and clip_grad_norm_ silently take the slow path.
2. ``torch.accelerator.synchronize``: the C++ side behind a Python PrivateUse1 backend has no device to
   synchronise; replaced by ``torch.neuron.synchronize``.
4. ``torch.autograd._engine_run_backward``: on torch 2.13 an exception raised from ``__torch_dispatch__`` inside
   autograd's engine for a Python PrivateUse1 backend aborts the process ("terminate called without an active
   exception"), on the calling thread (where the device runs backward, registration.py) as on a device thread.
   The device records such errors instead (fallback errors, cross-device errors) and this wrapper, which also
   counts the backward calls running on its thread (``tensor.ENGINE``), re-raises the first one when backward
   returns.
2b. ``torch.accelerator.current_device_index`` / ``set_device_index`` (and their ``_idx`` aliases): C++ asks the
   Python device guard, which always answers device 0 and ignores a set; with the ``neuron`` accelerator they are
   ``torch.neuron.current_device`` / ``set_device``.
3. ``torch.Tensor.pin_memory`` / ``is_pinned``: there is no pinned-memory allocator for a Python backend; pinning
   is a no-op (host memory is host memory in the simulator).
5. ``torch._has_compatible_shallow_copy_type``: pairs a dense CPU tensor with a neuron tensor as torch pairs CPU with
   CUDA, so ``Module._apply`` (``model.to("neuron")``) moves parameters in place and keeps identity and ties,
   unless ``torch.__future__`` asks to overwrite or swap them.
6. ``torch.Tensor.data`` (setter): ``param.data = x`` across cpu and neuron swaps the tensor's content in place
   (``torch.utils.swap_tensors``), since a CPU TensorImpl cannot take a Python wrapper's data.
7. ``torch.UntypedStorage.device`` and ``torch.UntypedStorage.__new__``: the storages of neuron tensors (their CPU
   payloads' storages, counted by memory.py) report the current ``neuron`` device; ``UntypedStorage(n,
   device="neuron")`` (also
   reached by ``storage.to("neuron")`` and ``torch.load(map_location="neuron")``) makes such a storage instead of
   asking C++ for a PrivateUse1 allocator that does not exist (a segfault).
8. ``torch.autograd.function.BackwardCFunction.apply``: torch's engine skips its gradient device check for Python
   dispatch tensors, so a custom Function's backward returning a CPU gradient for a neuron input would leave a CPU
   ``.grad`` on a neuron parameter; the same check (and message) as the engine's ``validate_outputs`` is made here.
9. ``torch.Tensor._make_subclass`` and ``torch.nn.Parameter.__new__``: a Parameter subclass (bitsandbytes'
   ``Int8Params``, ...) made from a neuron tensor is an instance of the subclass on the device (its device class, see
   params.py), as ``_make_subclass(cls, cuda_tensor)`` is on CUDA; torch's own paths would raise or return a plain
   neuron tensor, losing the subclass and its attributes.
"""

from __future__ import annotations

import torch

SUPPORTED = ("2.13",)
APPLIED = []


def _version_ok():
    return torch.__version__.split("+")[0].rsplit(".", 1)[0] in SUPPORTED


def foreach_supported(tensor_type):
    """Add ``tensor_type`` to the foreach allow-lists (patch 1; also for each Parameter subclass's device class)."""
    import torch.optim.optimizer as opt
    import torch.utils._foreach_utils as fu
    for mod in (opt, fu):
        lst = getattr(mod, "_foreach_supported_types", None)
        if isinstance(lst, list) and tensor_type not in lst:
            lst.append(tensor_type)


def _foreach(tensor_type):
    foreach_supported(tensor_type)
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


def _accelerator_index(device_module):
    import torch.accelerator as acc
    orig_get, orig_set = acc.current_device_index, acc.set_device_index

    def _ours():
        a = acc.current_accelerator()
        return a is not None and a.type == "neuron"

    def current_device_index():
        return device_module.current_device() if _ours() else orig_get()

    def set_device_index(device, /):
        return device_module.set_device(device) if _ours() else orig_set(device)
    for new, orig in ((current_device_index, orig_get), (set_device_index, orig_set)):
        new.__doc__ = orig.__doc__
        new._trnsim_orig = orig
    acc.current_device_index = acc.current_device_idx = current_device_index
    acc.set_device_index = acc.set_device_idx = set_device_index
    APPLIED.append("accelerator.device_index")


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
    from .tensor import ENGINE, PENDING
    orig = ag._engine_run_backward

    def _engine_run_backward(*args, **kwargs):
        del PENDING[:]
        ENGINE.depth = getattr(ENGINE, "depth", 0) + 1
        try:
            out = orig(*args, **kwargs)
        finally:
            ENGINE.depth -= 1
            errs = list(PENDING)
            del PENDING[:]
        if errs:
            raise errs[0]
        return out
    _engine_run_backward._trnsim_orig = orig
    ag._engine_run_backward = _engine_run_backward
    APPLIED.append("autograd._engine_run_backward")


def _shallow_copy_type():
    from .params import compatible_shallow_copy_type
    torch._has_compatible_shallow_copy_type = compatible_shallow_copy_type(torch._has_compatible_shallow_copy_type)
    APPLIED.append("_has_compatible_shallow_copy_type")


def _tensor_data():
    from .params import set_data
    from .tensor import _TB_DATA

    def _get(self):
        return _TB_DATA.__get__(self)

    def _set(self, value):
        set_data(self, value)
    prop = property(_get, _set, doc=_TB_DATA.__doc__)
    prop.fget._trnsim_orig = _TB_DATA
    torch.Tensor.data = prop
    APPLIED.append("Tensor.data")


def _storage():
    from . import tensor
    from .memory import MEMORY
    base_device = torch._C.StorageBase.device
    base_new = torch.UntypedStorage.__new__

    def device(self):
        if MEMORY.is_device_storage(self):
            return tensor.CURRENT
        return base_device.__get__(self)

    def __new__(cls, *args, **kwargs):
        dev = kwargs.get("device")
        if dev is None or isinstance(dev, int):
            return base_new(cls, *args, **kwargs)
        dev = torch.device(dev)
        if dev.type != tensor.DEVICE.type:
            return base_new(cls, *args, **kwargs)
        from .device_index import logical_device
        logical_device(dev.index)           # an index past the instance's devices raises, naming the count
        if args and isinstance(args[0], int):
            MEMORY.check(args[0])
        st = base_new(cls, *args, **{**kwargs, "device": "cpu"})
        MEMORY.track(st)
        return st
    prop = property(device, doc="The device of the storage (the current ``neuron`` device for a neuron tensor's).")
    prop.fget._trnsim_orig = base_device
    __new__._trnsim_orig = base_new
    torch.UntypedStorage.device = prop
    torch.UntypedStorage.__new__ = staticmethod(__new__)
    APPLIED.append("UntypedStorage.device")


def _parameter_subclasses():
    from .params import make_subclass, parameter_new
    torch.Tensor._make_subclass = staticmethod(make_subclass(torch.Tensor._make_subclass))
    torch.nn.Parameter.__new__ = staticmethod(parameter_new(torch.nn.Parameter.__new__))
    APPLIED.append("Parameter subclasses")


def _function_grad_devices():
    from torch.autograd.function import BackwardCFunction
    orig_apply = BackwardCFunction.apply
    orig_boxed = BackwardCFunction.apply_boxed

    def check(node, grads):
        single = not isinstance(grads, tuple)
        gs = (grads,) if single else grads
        edges = node.next_functions
        out = None
        for i, g in enumerate(gs):
            if i >= len(edges) or not isinstance(g, torch.Tensor):
                continue
            fn, nr = edges[i]
            if fn is None:
                continue
            meta = fn._input_metadata
            if nr >= len(meta):
                continue
            want = meta[nr].device
            if g.device == want or g.device.type == want.type == "neuron":     # C++ sees every index as neuron:0
                continue
            if g.dim() == 0:        # the engine moves a 0-dim gradient (issue 65016's special case)
                moved = g.to(want)
            else:
                raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - expected "
                                   f"device {want} but got {g.device}")
            if out is None:
                out = list(gs)
            out[i] = moved
        if out is None:
            return grads
        return out[0] if single else tuple(out)

    def apply(self, *args):
        return check(self, orig_apply(self, *args))

    def apply_boxed(self, *args):
        return check(self, orig_boxed(self, *args))
    apply._trnsim_orig = orig_apply
    apply_boxed._trnsim_orig = orig_boxed
    BackwardCFunction.apply = apply
    BackwardCFunction.apply_boxed = apply_boxed
    APPLIED.append("BackwardCFunction.apply")


def apply(tensor_type, device_module):
    if not _version_ok():
        import warnings
        warnings.warn(f"trnsim's neuron device was written for torch {SUPPORTED}; torch {torch.__version__} may "
                      "need other private patches", RuntimeWarning, stacklevel=2)
    _foreach(tensor_type)
    _accelerator_sync(device_module)
    _accelerator_index(device_module)
    _pin_memory()
    _backward_errors()
    _shallow_copy_type()
    _tensor_data()
    _storage()
    _function_grad_devices()
    _parameter_subclasses()


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
    dynamo costs about a second), for ``tensor_type`` and every device type made so far; the device class of a
    Parameter subclass made later is added by ``params.device_class`` (so that ``self.weight.data = ...`` in a
    compiled forward meets dynamo's own handling of ``.data`` on a tensor, not an opaque object)."""
    first = "dynamo_wrap_tensor" not in APPLIED
    if first and not _version_ok():
        import warnings
        warnings.warn(f"trnsim's dynamo patch was written for torch {SUPPORTED}; torch {torch.__version__} may "
                      "trace neuron tensors with graph breaks", RuntimeWarning, stacklevel=2)
    from torch._dynamo.variables.builder import VariableBuilder
    from .tensor import DEVICE_TYPES
    for trace_numpy in (True, False):
        table = VariableBuilder._type_dispatch_impl(trace_numpy)
        for t in (tensor_type, *DEVICE_TYPES):
            table[t] = VariableBuilder.wrap_tensor
    if first:
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


def inductor_on_neuron():
    """7. ``torch._TorchCompileInductorWrapper.__call__`` (torch 2.13; what ``torch.compile(model)`` and
    ``backend="inductor"`` call with each graph): inductor has no code generator for the ``neuron`` device
    (``KeyError: 'neuron'`` in its wrapper code generation).  On a Neuron device TorchNeuron's backend is
    "explicitly set, or auto-selected when running on a Neuron device", and modes other than "default" "log a
    warning and fall back to default"
    (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/reference-torch-compile.html): a graph with
    a ``neuron`` tensor among its inputs is compiled by the ``neuron`` backend, with a ``NeuronCompileWarning`` naming
    the inductor options (from ``mode=`` or ``options=``) that do not apply.  Graphs without device tensors keep
    inductor.  Applied with the other dynamo patches (``compile/patching.py``); tested in
    tests/backend/test_param_subclass_compile.py."""
    if "inductor_on_neuron" in APPLIED or not hasattr(torch, "_TorchCompileInductorWrapper"):
        return
    from . import tensor
    wrapper = torch._TorchCompileInductorWrapper
    orig = wrapper.__call__

    def __call__(self, model_, inputs_, **kwargs):
        dev = tensor.DEVICE.type
        if any(isinstance(t, torch.Tensor) and t.device.type == dev for t in inputs_):
            from .compile import neuron
            from .compile.errors import NeuronCompileWarning
            if self.config:
                import warnings
                warnings.warn(f"torch.compile with inductor on {dev} tensors: the {dev} backend compiles the graph "
                              f"(as TorchNeuron selects it on a Neuron device); the inductor options "
                              f"{sorted(self.config)} (from mode= or options=) do not apply",
                              NeuronCompileWarning, stacklevel=2)
            return neuron(model_, inputs_)
        return orig(self, model_, inputs_, **kwargs)
    __call__._trnsim_orig = orig
    wrapper.__call__ = __call__
    APPLIED.append("inductor_on_neuron")

