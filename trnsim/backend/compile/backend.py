"""The ``neuron`` TorchDynamo backend: ``torch.compile(model, backend="neuron")``.

Dynamo's graph goes through AOTAutograd (core aten decompositions) into forward and backward aten graphs; each is
lowered (``lower.py``) into fused kernels of ``trnsim.kernels.library.fused``, costed by their shape-only simulation,
and run by ``runtime.CompiledGraph``.  Lowering results are kept in the compile cache (``cache.py``).

TorchNeuron's semantics (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/compile/reference-torch-compile.html
and .../torch/reference/env-vars.html):

* ``dynamic=True`` is rejected during compilation; shapes that vary between calls recompile per new shape (so
  dynamo's automatic dynamic shapes are turned into one static compile per shape here);
* ``mode`` other than ``"default"`` warns and falls back to default;
* a graph that fails to compile raises, unless ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0`` (or the
  ``fallback_execution`` option) -- then the graph runs eagerly, with a warning;
* ``fullgraph=True`` works (there are no graph breaks on device tensors).
"""

from __future__ import annotations

import itertools
import types
import os
import time
import warnings

import torch

from ... import config
from . import cache as _cache
from . import stats
from .errors import NeuronCompileError, NeuronCompileWarning
from .patching import ensure_patched

_COUNTER = itertools.count()
_FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


def _fallback_allowed(options):
    if "fallback_execution" in options:
        return bool(options["fallback_execution"])
    return not config.disable_fallback_execution


def _symbolic(example_inputs):
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape):
            return True
    return False


def neuron(gm, example_inputs, mode=None, options=None):
    """The backend function (entry point ``torch_dynamo_backends: neuron``)."""
    ensure_patched()
    options = dict(options or {})
    if mode not in (None, "default"):
        warnings.warn(f"torch.compile(backend='neuron'): mode={mode!r} is not supported; only 'default' applies, "
                      "compiling with the default mode", NeuronCompileWarning, stacklevel=2)
    if _symbolic(example_inputs):
        import torch._dynamo.config as dcfg
        if not dcfg.assume_static_by_default:
            raise NeuronCompileError(
                "torch.compile(backend='neuron'): dynamic=True is not supported: the Neuron compiler needs static "
                "shapes. Use dynamic=False (or leave it unset): each new input shape then compiles once.")
        return _PerShape(gm, options)
    return _aot(gm, example_inputs, options)


# Ops the core decompositions would split into chains of primitive ops although the device runs them as one
# kernel or one instruction (each primitive would then be a separate instruction pass of a fused kernel):
# * attention stays ONE node (TorchNeuron lowers it to its fused attention kernel, as the eager device runs it);
#   decomposed it is bmm + softmax, and the flash op's decomposition refuses dropout;
# * gelu_backward is one Scalar Engine activation (``nki.language.gelu_dx``, "Derivative of GELU activation,
#   element-wise", Neuron docs nki/api/generated/nki.language.gelu_dx) and one multiply by the incoming gradient
#   (``ops.FUSED_STEPS``), fused with its neighbours; decomposed it is ~10 instructions (erf, exp, muls, adds);
# * native_layer_norm_backward stays the device's layer-norm backward kernel (the eager device's charge), as its
#   forward already does (native_layer_norm has no core decomposition);
# * the softmax backwards stay row ops (fusion.py fuses them as one row kernel; the forwards have no core
#   decomposition either), where decomposed they were exp, mul, sub, sum passes over the whole rows;
# * the loss and embedding backwards (nll_loss_forward/backward, embedding_dense_backward) stay the device's
#   gather/scatter kernels, where decomposed they were a full-size fill, a scatter or index_put and a cast.
_KEEP_WHOLE = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
               "_scaled_dot_product_attention_math", "scaled_dot_product_attention", "gelu_backward",
               "native_layer_norm_backward", "_softmax_backward_data", "_log_softmax_backward_data",
               "nll_loss_forward", "nll_loss_backward", "embedding_dense_backward")


def decompositions():
    """The core aten decompositions less those of the ops the device runs whole (:data:`_KEEP_WHOLE`).  Built once
    per process (0.17 s the first time, 25 ms each time after, measured by the bnb5 helper) and shared by every
    compile: a read-only mapping, so no compile can change what another decomposes."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import core_aten_decompositions
        _DECOMPS = types.MappingProxyType({k: v for k, v in core_aten_decompositions().items()
                                           if getattr(k, "_opname", None) not in _KEEP_WHOLE})
    return _DECOMPS


_DECOMPS = None


def _aot(gm, example_inputs, options):
    from torch._dynamo.backends.common import aot_autograd
    fallback = _fallback_allowed(options)
    opts_key = sorted((k, repr(v)) for k, v in options.items())

    def compiler(kind):
        def fn(agm, ins):
            return _lower(agm, ins, kind, fallback, opts_key)
        return fn
    # input mutations stay in inference graphs (as inductor and aot_eager keep them): AOTAutograd refuses a ``set_``
    # on a graph input otherwise, which is what dynamo makes of ``param.data = t`` in a compiled forward
    be = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                      inference_compiler=compiler("inference"), decompositions=decompositions(),
                      keep_inference_input_mutations=True)
    return be(gm, example_inputs)


class _PerShape:
    """Dynamo made some dims symbolic after seeing a second shape (automatic dynamic shapes).  TorchNeuron compiles
    once per concrete shape instead: each distinct set of input shapes is traced statically on first call."""

    def __init__(self, gm, options):
        self.gm = gm
        self.options = options
        self.compiled = {}

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else ("int", a) for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            fn = self.compiled[key] = _aot(self.gm, list(args), self.options)
        return fn(*args)


def _collective_key(gm, opts_key):
    """The options part of a graph's cache key, with the collectives pricer's key when the graph has a collective
    (its plan holds their times: ``collective.py``)."""
    from . import collective
    from . import ops as O
    ck = collective.key()
    if ck is None or not any(n.op == "call_function" and O.kind(n.target) == "collective" for n in gm.graph.nodes):
        return opts_key
    return list(opts_key) + [("collectives", ck)]


def _lower(gm, example_inputs, kind, fallback, opts_key):
    from torch._functorch.aot_autograd import make_boxed_func
    from .lower import plan_graph
    from .runtime import CompiledGraph
    name = f"{kind}_{next(_COUNTER)}"
    t0 = time.perf_counter()
    key = _cache.graph_key(gm, example_inputs, kind, _collective_key(gm, opts_key))
    rec = stats.CompileRecord(graph=name, key=key, n_ops=sum(1 for n in gm.graph.nodes if n.op == "call_function"))
    def compile_fn():
        try:
            return plan_graph(gm, name)
        except NeuronCompileError as e:
            _cache.CACHE.store_failure(key, str(e), e.op, e.line)
            raise
    try:
        plan, status = _cache.CACHE.get_or_compile(key, compile_fn)
        if status == "failure":
            raise NeuronCompileError(plan["error"] + " (remembered from an earlier compile of this graph; set "
                                     "NEURON_CC_FLAGS=--retry_failed_compilation to try again)",
                                     op=plan.get("op"), line=plan.get("line"))
        rec.cache = status
    except NeuronCompileError as e:
        rec.host_s = time.perf_counter() - t0
        rec.cache = "failed"
        rec.error = str(e)
        stats.record(rec)
        if not fallback:
            raise
        warnings.warn(f"{e}\nRunning graph {name} eagerly ({_FALLBACK_ENV}=0).", NeuronCompileWarning,
                      stacklevel=2)
        return make_boxed_func(gm)
    cg = CompiledGraph(gm, plan, name)
    rec.host_s = time.perf_counter() - t0
    rec.n_kernels = len(plan["kernels"])
    rec.n_ops = plan["n_ops"]
    rec.sim_ns = cg.total_ns
    stats.record(rec)
    cg.record = rec
    boxed = make_boxed_func(cg)
    boxed.compiled_graph = cg
    return boxed
