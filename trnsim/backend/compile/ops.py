"""How the compile backend treats each aten op of an AOTAutograd graph (data, read by ``fusion.py``).

Kinds:

* ``view``      -- metadata only (free; a view of a tensor is that tensor for fusion)
* ``pointwise`` -- elementwise (incl. broadcasts, casts, fills, ``where``): fused into a neighbour's kernel
* ``reduce``    -- a reduction: over the trailing dims it is a row op (fused with the elementwise ops around it);
  over leading dims a kernel of its own (``library.reduction.row_reduce``)
* ``softmax`` / ``softmax_bw`` -- row ops over the last dim
* ``matmul``    -- the Tensor Engine; elementwise consumers become its epilogue
* ``opaque``    -- any other op the eager device runs natively (embedding, gather, index_put, cat, norms that keep
  their aten op, SDPA, trnsim's ``trnsim_attn::sliding_window_attention``, ...): one kernel each, charged what
  the eager device charges it minus the launch
* ``factory`` / ``random`` -- ops creating tensors (``arange``, ``full``, ``rand``...) on the device
* ``custom``    -- a ``torch.library.custom_op`` operator (an ``nki_op``, an NKI kernel call traced as
  ``trnsim_nki::kernel_call``, or the ``auto_functionalized`` wrapper of a mutating one): not fused; it runs on the
  device when the graph reaches it, timed by the kernels it runs (``trnsim/backend/nki_bridge.py``); also an
  operator of another library's namespace with no lowering (``torch.library.define``: bitsandbytes' ops), which
  runs as eager runs it (its device kernel, or the CPU fallback charged its transfers)
* ``collective`` -- a collective as one rank runs it (``trnsim_coll::seq_reshard``, ``backend/seq_reshard.py``): no
  kernel on the rank's engines; the graph plan times it with the collectives model and lets it overlap the graph's
  kernels that do not depend on it (``collective.py``)

An op in none of these is not lowerable: compiling a graph with it fails (see ``backend.py``).
"""

from __future__ import annotations

import operator

import torch

from ..op_table import TABLE

# activations on the Scalar Engine; every other elementwise op is one Vector Engine instruction
ACT = frozenset("""exp exp2 expm1 log log1p log2 tanh sigmoid erf erfc rsqrt sqrt gelu silu softplus sin cos tan
reciprocal mish elu log_sigmoid_forward atan asin acos sinh cosh erfinv""".split())

_POINTWISE_COPY = frozenset("""clone _to_copy contiguous fill_ zero_ zeros_like ones_like full_like new_zeros new_ones
new_full masked_fill where fill full zeros ones scalar_tensor lift_fresh_copy tril triu _unsafe_view_copy copy
alias_copy""".split())
_FACTORY = frozenset("""arange full zeros ones empty empty_strided empty_permuted scalar_tensor linspace eye
full_like zeros_like ones_like empty_like new_empty new_empty_strided new_zeros new_ones new_full""".split())
_RANDOM = frozenset("""rand randn randint rand_like randn_like randint_like bernoulli uniform normal
native_dropout""".split())
_ROW_REDUCE = frozenset("sum mean amax amin any all prod".split())
_MATMUL = frozenset("mm bmm addmm".split())
_SOFTMAX = frozenset(("_softmax", "_log_softmax", "_safe_softmax"))
_SOFTMAX_BW = frozenset(("_softmax_backward_data", "_log_softmax_backward_data"))
# elementwise ops that are more than one instruction of a fused kernel: their steps (``library.fused``)
FUSED_STEPS = {"gelu_backward": ("act", "vec")}     # gelu_dx on the Scalar Engine, times the gradient
_HOP_OPAQUE = {"flex_attention": "sdpa", "flex_attention_backward": "backward:sdpa"}   # higher-order ops -> cost
_VIEW_EXTRA = frozenset(("split_with_sizes", "split", "unbind", "chunk", "alias"))
# host-side checks of symbolic sizes (data-dependent shapes: ``nonzero``, ``capture_dynamic_output_shape_ops``): no
# device work, they run as traced
_HOST_CHECK = frozenset(("_assert_scalar", "sym_constrain_range_for_size", "sym_constrain_range"))


def op_name(target):
    """The overload packet name of an aten op (``aten.add.Tensor`` -> ``add``), or a higher-order op's name."""
    n = getattr(target, "_opname", None)
    if n:
        return n
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name()
    return getattr(target, "__name__", str(target))


def kind(target):
    """The kind of a ``call_function`` target (see the module docstring), or None when it cannot be lowered."""
    if target is operator.getitem:
        return "view"
    if getattr(target, "namespace", None) == COLLECTIVE_NAMESPACE:
        return "collective"
    if getattr(target, "namespace", None) == ATTENTION_NAMESPACE:
        return "opaque"
    if is_custom(target):
        return "custom"
    name = op_name(target)
    if name in _HOP_OPAQUE:
        return "opaque"
    if name in FUSED_STEPS:
        return "pointwise"
    if name in _RANDOM:
        return "random"
    if name in _FACTORY and name not in ("full_like", "zeros_like", "ones_like", "new_zeros", "new_ones",
                                         "new_full"):
        return "factory"
    if name in _MATMUL:
        return "matmul"
    if name in _SOFTMAX:
        return "softmax"
    if name in _SOFTMAX_BW:
        return "softmax_bw"
    if name in _VIEW_EXTRA or name in _HOST_CHECK:
        return "view"
    cat = TABLE.get(name)
    if cat == "view":
        return "view"
    if name in _ROW_REDUCE:
        return "reduce"
    if cat in ("unary", "binary") or name in _POINTWISE_COPY:
        if name.startswith("_foreach") or name in ("native_dropout", "masked_scatter", "masked_scatter_"):
            return "opaque"
        return "pointwise"
    if cat is not None:
        return "opaque"
    if _library_op(target):
        return "custom"
    return None


def _library_op(target):
    # an operator another library defined with torch.library (bitsandbytes' ``bitsandbytes::gemm_4bit``, ...) and no
    # lowering of its own: it runs as eager runs it (its device kernel, or the CPU fallback under its own name)
    return isinstance(target, torch._ops.OpOverload) and target.namespace not in ("aten", "prims")


_AUTO_FUNC = ("auto_functionalized", "auto_functionalized_v2")
COLLECTIVE_NAMESPACE = "trnsim_coll"        # backend.seq_reshard.NAMESPACE (not imported: it defines a custom op)
ATTENTION_NAMESPACE = "trnsim_attn"         # backend.window_attention.NAMESPACE: the attention kernel, as eager


def is_custom(target):
    """Whether ``target`` is a ``torch.library.custom_op`` operator (or the wrapper that functionalises a mutating
    one)."""
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() in _AUTO_FUNC
    if not isinstance(target, torch._ops.OpOverload) or target.namespace in ("aten", "prims"):
        return False
    from torch._library import custom_ops
    return target._schema.name in custom_ops.OPDEFS


def step(name, n_tensor_args):
    """The fused-kernel instruction (``library.fused`` step) of one elementwise op."""
    base = name.rstrip("_")
    if base in ACT:
        return "act"
    if base in ("clone", "contiguous", "alias", "lift_fresh_copy"):
        return None          # no instruction: the value is already in SBUF
    if base in ("_to_copy", "copy"):       # copy: functionalised ``dst[...] = src`` (the value of src, in dst's dtype)
        # no instruction inside a fused chain: intermediates stay in SBUF in fp32 (fusion.py) and an engine reads
        # and writes any dtype, so the conversion happens in the neighbouring step's read or write; a kernel that
        # is nothing but the conversion still pays its one copy (library.fused.pointwise with no steps)
        return None
    if n_tensor_args >= 2:
        return "vec"
    return "vs"
