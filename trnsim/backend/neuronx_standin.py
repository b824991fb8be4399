"""trnsim's stand-in for ``torch_neuronx`` under ``TORCHNEURON_TARGET=sim`` when the real package is absent.

``import torch_neuronx`` resolves here through the interpreter start hook (``trnsim_nki_hook.py``); unset, nothing
is installed.  What it provides is what TorchNeuron's guides use to bring NKI kernels into PyTorch ("How to work
with NKI kernels from torch-neuronx", Neuron SDK 2.33): :func:`nki_op`.  Every other public name of torch-neuronx
that trnsim knows of is listed in :data:`NAMES` with its state; asking for one trnsim does not provide raises
:class:`TrnsimNotProvided` (an ``AttributeError`` naming the name and trnsim), never a bare AttributeError.
"""

from __future__ import annotations

import inspect

import torch

TRNSIM_STANDIN = True          # registration.py tells this module from the real torch_neuronx by it
__version__ = "0.0+trnsim"

# name -> state: "provided" or why trnsim does not provide it
NAMES = {
    "nki_op": "provided: registers an NKI kernel (or a function calling kernels) as a torch.library custom op",
    "nki_jit": "provided: nki.jit (the kernel decorator older torch-neuronx examples import from here)",
    "__version__": "provided: '0.0+trnsim'",
    "trace": "not provided: torch-neuronx's XLA tracing API (torch_neuronx.trace) compiles a NEFF; trnsim has no "
             "XLA path -- use the neuron device eagerly or torch.compile(backend='neuron')",
    "analyze": "not provided: part of the XLA tracing API",
    "DataParallel": "not provided: part of the XLA tracing API (use torch.distributed on the neuron device)",
    "dynamic_batch": "not provided: part of the XLA tracing API",
    "async_load": "not provided: part of the XLA tracing API",
    "lazy_load": "not provided: part of the XLA tracing API",
    "replace_weights": "not provided: part of the XLA tracing API",
    "move_trace_to_device": "not provided: part of the XLA tracing API",
    "xla_impl": "not provided: torch-neuronx's XLA implementation package",
    "experimental": "not provided: torch-neuronx's experimental package",
    "testing": "not provided: torch-neuronx's testing helpers",
}


class TrnsimNotProvided(AttributeError):
    """A torch-neuronx name trnsim's stand-in does not provide."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    state = NAMES.get(name, "not provided: trnsim does not know this torch-neuronx name")
    raise TrnsimNotProvided(f"torch_neuronx.{name} is not available in trnsim's torch_neuronx stand-in "
                            f"(TORCHNEURON_TARGET=sim; the real torch-neuronx is not installed): {state}. "
                            "See docs/guides/nki-in-pytorch.md for what the stand-in provides.")


def nki_jit(func=None, **kwargs):
    from ..kernels.jit import jit
    return jit(func, **kwargs)


def _infer_schema(kernel, mutates_args):
    """A schema for a kernel decorated directly: parameters without a default are tensors (``Tensor(a!)`` when
    mutated), parameters with a default take its type; the op returns one tensor, or nothing when it mutates."""
    fn = getattr(kernel, "fn", kernel)
    parts = []
    names = list(mutates_args)
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty:
            alias = f"({chr(ord('a') + names.index(p.name))}!)" if p.name in names else ""
            parts.append(f"Tensor{alias} {p.name}")
        else:
            ty = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(p.default))
            if ty is None:
                raise TypeError(f"nki_op: cannot infer the schema type of parameter {p.name!r} (default "
                                f"{p.default!r}); pass schema='(...) -> ...'")
            parts.append(f"{ty} {p.name}={p.default!r}")
    ret = "()" if mutates_args else "Tensor"
    return "(" + ", ".join(parts) + ") -> " + ret


def nki_op(name, fn=None, /, *, mutates_args=(), device_types=None, schema=None):
    """Register ``fn`` as the PyTorch custom operator ``name`` ("namespace::op"), as
    ``torch.library.custom_op`` does, returning the op (with ``register_fake``, ``register_autograd``,
    ``register_kernel``).  ``fn`` is a function whose body calls NKI kernels (type-annotated, as custom_op
    requires), or an ``@nki.jit`` kernel itself: then the schema is inferred (see :func:`_infer_schema`) or taken
    from ``schema``, and the fake is the kernel's own shape-only run.  ``mutates_args`` names the tensors the
    kernel writes in place: their autograd version counters are bumped and compile keeps the writes."""
    from ..kernels.jit import Kernel

    def register(f):
        if isinstance(f, Kernel):
            kernel = f
            sch = schema or _infer_schema(kernel, mutates_args)

            def impl(*args, **kwargs):
                out = kernel(*args, **kwargs)
                return None if mutates_args else out
            op = torch.library.custom_op(name, impl, mutates_args=mutates_args, device_types=device_types,
                                         schema=sch)
            if not mutates_args:
                op.register_fake(_kernel_fake(kernel))
            return op
        return torch.library.custom_op(name, f, mutates_args=mutates_args, device_types=device_types,
                                       schema=schema)
    if fn is None:
        return register
    return register(fn)


def _kernel_fake(kernel):
    def fake(*args, **kwargs):
        from .nki_bridge import _shape_only_outputs, _spec_for_trace
        spec, kwspec = _spec_for_trace(args, kwargs)
        meta, single = _shape_only_outputs(kernel, spec, kwspec)
        dev = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        outs = [torch.empty(s, dtype=d, device=dev) for s, d in meta]
        return outs[0] if single else tuple(outs)
    return fake


__all__ = ["nki_op", "nki_jit", "NAMES", "TrnsimNotProvided"]
