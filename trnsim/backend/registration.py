"""Registering the simulated ``neuron`` device with PyTorch (PrivateUse1 renamed to ``neuron``)."""

from __future__ import annotations

import os
import sys

import torch

from .. import config
from .errors import NeuronBackendConflict

_REGISTERED = False


def is_registered():
    return _REGISTERED


def _conflict():
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone",):
        return f"PyTorch's PrivateUse1 backend is already registered as {name!r}"
    if ("torch_neuronx" in sys.modules and not getattr(sys.modules["torch_neuronx"], "TRNSIM_STANDIN", False)) \
            or "torch_neuron" in sys.modules:
        return "the real Neuron PyTorch backend (torch_neuronx) is imported in this process"
    if hasattr(torch, "neuron"):
        return "torch.neuron already exists (a real Neuron backend is registered)"
    return None


def register(force=False):
    """Register the device; a no-op if already done.  Refuses (``NeuronBackendConflict``) when a real Neuron
    backend, or another PrivateUse1 backend, is registered in this process."""
    global _REGISTERED
    if _REGISTERED:
        return
    why = _conflict()
    if why is not None:
        raise NeuronBackendConflict(f"trnsim cannot register the simulated neuron device: {why}. Unset "
                                    "TORCHNEURON_TARGET to use the real backend, or run the simulator in a process "
                                    "without it.")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import device_module, factories, patches, tensor

    class _Hooks(torch._C._acc.PrivateUse1Hooks):
        def is_available(self):
            return True

        def has_primary_context(self, dev_id):
            return True

        def is_built(self):
            return True

    class _Guard(torch._C._acc.DeviceGuard):
        def type_(self):
            return torch._C._autograd.DeviceType.PrivateUse1

    # backward over neuron tensors runs on the thread that calls it, as CPU backward does, not on an autograd device
    # thread: none is left releasing a failed step's Python objects while the interpreter exits, which aborted
    # the process (tests/backend/test_crash_safety.py).  Autograd's setting is per thread: this one's.
    torch.autograd.set_multithreading_enabled(False)
    mod = device_module.build_module()
    _setup_privateuseone_for_python_backend("neuron", mod, _Hooks(), _Guard())
    sys.modules["torch.neuron"] = mod
    # storage.neuron() / TypedStorage.neuron() (torch.load map_location callables use them); not made by the setup
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=False, for_module=False, for_packed_sequence=False,
                                                         for_storage=True)
    tensor.DEVICE = torch.device("neuron", 0)
    tensor.NeuronTensor._dev = tensor.CURRENT = tensor.DEVICE     # the home device until set_device moves it
    from . import device_index; device_index.install()  # noqa: E702  Tensor.to between indices, multi-index ops
    factories.register()
    patches.apply(tensor.NeuronTensor, mod)
    from . import operators; operators.install()  # noqa: E702  a + b without the C++ dispatcher when unobservable
    from . import autocast
    autocast.register()
    from . import distributed; distributed.register()  # noqa: E702  torch.distributed backend "neuron"
    from . import nki_bridge; nki_bridge.install(mod)  # noqa: E702  NKI kernels on neuron tensors (issue 21)
    # dynamo sees neuron tensors as tensors from its first trace, whatever backend (or explain) ran first
    from .compile import patching
    patching.untraced(_Guard, "type_")      # asked by dynamo's stream guards: run, never traced (patching.py)
    patching.patch_when_dynamo_loads()
    _REGISTERED = True


def register_if_sim():
    if config.torchneuron_target == "sim":
        register()
        return True
    return False
