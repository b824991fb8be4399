"""The native op table of the ``neuron`` device: which aten ops run natively, and how each is charged.

Data, not branches: each aten op name (overload packet) maps to a cost category.  An op that is not listed runs
on the CPU as a fallback.  Categories:

* ``view``   -- metadata only (no kernel, no time)
* ``copy``   -- a copy kernel over the output (``library.elementwise.copy``)
* ``unary`` / ``binary`` -- ``library.elementwise`` over the output's elements
* ``reduce`` / ``reduce_max`` -- ``library.reduction.row_reduce``
* ``softmax`` / ``log_softmax`` -- ``library.softmax.row_softmax``
* ``layer_norm`` / ``rms_norm`` -- ``library.normalization``
* ``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` / ``sdpa`` -- ``library.matmul.tiled_matmul``
* ``backward:<cat>`` -- twice the forward kernel of <cat>, marked ``estimated`` (no backward kernel yet)
* ``gather`` / ``estimate`` -- roofline estimate, ``estimated``
* ``sync`` -- a device-to-host read of a scalar
* ``random`` -- an elementwise fill, with the device generator injected
"""

_VIEW = """view _unsafe_view reshape _reshape_alias t transpose permute expand expand_as slice select unsqueeze squeeze
alias detach as_strided unbind split split_with_sizes chunk unfold view_as_real view_as_complex _conj lift_fresh
diagonal narrow resolve_conj resolve_neg squeeze_ unsqueeze_ t_ transpose_ as_strided_ _neg_view movedim
numpy_T mT mH adjoint swapaxes swapdims unflatten flatten view_as tensor_split empty empty_strided
new_empty new_empty_strided empty_like resize_ set_ _has_compatible_shallow_copy_type is_same_size
is_nonzero sym_size sym_stride sym_numel sym_storage_offset _local_scalar_dense_dummy""".split()

_COPY = """clone _to_copy copy_ contiguous fill_ zero_ zeros_like ones_like full_like new_zeros new_ones new_full
cat stack repeat constant_pad_nd flip tril triu slice_backward select_backward tril_ triu_ _unsafe_index
roll expand_copy lift masked_fill masked_fill_ where fill full zeros ones scalar_tensor _foreach_copy_
_foreach_zero_ slice_scatter select_scatter hstack vstack""".split()

_UNARY = """neg exp log log1p expm1 sqrt rsqrt reciprocal abs sgn sign sin cos tan tanh sigmoid relu gelu silu
softplus erf floor ceil round trunc logical_not bitwise_not isnan isinf nan_to_num mish hardtanh leaky_relu elu
log2 exp2 square neg_ exp_ sqrt_ rsqrt_ reciprocal_ abs_ relu_ sigmoid_ tanh_ silu_ gelu_ clamp clamp_
clamp_min clamp_min_ clamp_max clamp_max_ log_sigmoid_forward _foreach_sqrt _foreach_sqrt_ _foreach_neg
_foreach_neg_ _foreach_reciprocal_ _foreach_exp _foreach_abs erf_ floor_ round_ isfinite logical_not_
bitwise_not_ pow_ sin_ cos_""".split()

_BINARY = """add sub mul div rsub pow minimum maximum eq ne lt le gt ge logical_and logical_or logical_xor
bitwise_and bitwise_or bitwise_xor remainder fmod floor_divide lerp addcmul addcdiv add_ sub_ mul_ div_ lerp_
addcmul_ addcdiv_ eq_ ne_ lt_ le_ gt_ ge_ logical_and_ logical_or_ bitwise_and_ bitwise_or_ remainder_ pow_
threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward softplus_backward
log_sigmoid_backward native_dropout_backward hardtanh_backward leaky_relu_backward elu_backward
_foreach_add _foreach_add_ _foreach_sub _foreach_sub_ _foreach_mul _foreach_mul_ _foreach_div _foreach_div_
_foreach_lerp_ _foreach_lerp _foreach_addcmul_ _foreach_addcmul _foreach_addcdiv_ _foreach_addcdiv
_foreach_maximum_ _foreach_minimum_ _foreach_pow _foreach_pow_ _foreach_clamp_min_ _foreach_clamp_max_
mse_loss_backward smooth_l1_loss_backward huber_loss_backward binary_cross_entropy_backward
xlogy hypot atan2 copysign masked_scatter masked_scatter_ sign_ where_ true_divide true_divide_
native_dropout""".split()

_REDUCE = """sum mean var std var_mean std_mean norm linalg_vector_norm prod any all logsumexp _is_all_true
count_nonzero cumsum _foreach_norm nansum mse_loss smooth_l1_loss huber_loss binary_cross_entropy_with_logits
binary_cross_entropy""".split()
_REDUCE_MAX = """amax amin max min argmax argmin aminmax""".split()

_GATHER = """embedding embedding_dense_backward index_select gather scatter scatter_add scatter_ scatter_add_
scatter_reduce scatter_reduce_ index index_put index_put_ index_add index_add_ nll_loss_forward
nll_loss_backward nll_loss2d_forward nll_loss2d_backward masked_select_dummy take index_fill index_fill_
index_copy index_copy_ one_hot_dummy""".split()

_RANDOM = """uniform_ normal_ bernoulli_ bernoulli random_ exponential_ rand_like randn_like randint_like
multinomial_dummy""".split()

TABLE = {}
for _names, _cat in ((_VIEW, "view"), (_COPY, "copy"), (_UNARY, "unary"), (_BINARY, "binary"),
                     (_REDUCE, "reduce"), (_REDUCE_MAX, "reduce_max"), (_GATHER, "gather"), (_RANDOM, "random")):
    for _n in _names:
        if not _n.endswith("_dummy"):
            TABLE[_n] = _cat

TABLE.update({
    "_local_scalar_dense": "sync", "item": "sync", "equal": "sync",
    "mm": "mm", "addmm": "addmm", "bmm": "bmm", "baddbmm": "baddbmm", "dot": "estimate", "mv": "estimate",
    "addmv": "estimate", "matmul": "mm", "linear": "addmm",
    "_softmax": "softmax", "_log_softmax": "log_softmax", "_safe_softmax": "softmax",
    "_softmax_backward_data": "backward:softmax", "_log_softmax_backward_data": "backward:log_softmax",
    "native_layer_norm": "layer_norm", "native_layer_norm_backward": "backward:layer_norm",
    "_fused_rms_norm": "rms_norm", "_fused_rms_norm_backward": "backward:rms_norm",
    "_scaled_dot_product_flash_attention_for_cpu": "sdpa",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "backward:sdpa",
    "_scaled_dot_product_attention_math": "sdpa",
    "_fused_sdp_choice": "view",
})

# Ops whose bf16/fp16/fp8 inputs the device accumulates in fp32 (the result is rounded once to the output dtype).
ACCUMULATING = {"mm", "addmm", "bmm", "baddbmm", "dot", "mv", "addmv", "sum", "mean", "var", "std", "var_mean",
                "std_mean", "norm", "linalg_vector_norm", "prod", "logsumexp", "cumsum", "_softmax",
                "_log_softmax", "_safe_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
                "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
                "_scaled_dot_product_flash_attention_for_cpu",
                "_scaled_dot_product_flash_attention_for_cpu_backward", "nll_loss_forward"}

# Ops that move data between host and device (mixing devices is their purpose).
TRANSFER = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "set_", "_has_compatible_shallow_copy_type",
            "is_same_size", "_foreach_copy_", "lift_fresh", "lift", "alias"}


def category(name):
    return TABLE.get(name)
