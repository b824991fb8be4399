"""The native op table of the ``neuron`` device: which aten ops run natively, and how each is charged.

Data, not branches: each aten op name (overload packet) maps to a cost category.  An op that is not listed runs
on the CPU as a fallback.  Categories:

* ``view``   -- metadata only (no kernel, no time)
* ``copy``   -- a copy kernel over the output (``library.elementwise.copy``)
* ``unary`` / ``binary`` -- ``library.elementwise`` over the output's elements
* ``reduce`` / ``reduce_max`` -- ``library.reduction.row_reduce``
* ``softmax`` / ``log_softmax`` -- ``library.softmax.row_softmax``
* ``layer_norm`` / ``rms_norm`` -- ``library.normalization``
* ``mm`` / ``addmm`` -- ``library.matmul_resident`` when the operands fit SBUF, else ``library.matmul_blocked``
* ``bmm`` / ``baddbmm`` -- one launch over the batch (``library.matmul_batched``; blocked products per element)
* ``sdpa`` -- ``library.attention.flash_attention``, all heads in one launch (a head over 128 in partition chunks,
  over 512 two matmuls and a softmax); its backward 2.5x the forward, marked ``estimated``
  (``costs.attention_backward_cost``)
* ``backward:<cat>`` -- twice the forward kernel of <cat>, marked ``estimated`` (no backward kernel yet)
* ``gather`` / ``estimate`` -- roofline estimate, ``estimated``
* ``sync`` -- a device-to-host read of a scalar
* ``random`` -- an elementwise fill, with the device generator injected
* ``conv`` / ``backward:conv`` / ``grouped_mm`` / ``sort`` / ``data_dependent`` / ``histc`` / ``channel_norm`` /
  ``linalg`` / ``fft`` / ``roofline`` -- see ``native_costs.py`` (convolution and grouped matmul through the
  matmul kernels; the rest estimates; ``data_dependent`` and ``histc`` charge the host read of a count)

Ops in ``native_impls.IMPLS`` run the device's own implementation instead of the CPU aten kernel.
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
rrelu_with_noise_backward
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
multinomial_dummy rrelu_with_noise rrelu_with_noise_""".split()

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
    # trnsim's own attention with a sliding window (window_attention.py; namespace trnsim_attn)
    "sliding_window_attention": "sdpa", "sliding_window_attention_backward": "backward:sdpa",
})

# -- added for models and the OpInfo sweep (issue 12) --------------------------------------------------------
_MORE = {
    "copy": """pixel_shuffle pixel_unshuffle channel_shuffle reflection_pad1d reflection_pad2d reflection_pad3d
        replication_pad1d replication_pad2d replication_pad3d im2col diag_embed diagonal_copy alias_copy
        as_strided_copy as_strided_scatter diagonal_scatter block_diag complex polar linspace logspace
        _conj_physical conj_physical narrow_copy unfold_backward unfold_copy diag tril_indices triu_indices
        _chunk_cat diagonal_backward view_copy permute_copy transpose_copy t_copy unsqueeze_copy squeeze_copy expand_copy select_copy
        slice_copy split_copy split_with_sizes_copy unbind_copy detach_copy _unsafe_index_put
        _unsafe_masked_index _unsafe_masked_index_put_accumulate roll rot90 tile""",
    "unary": """hardswish hardsigmoid celu selu threshold logit softshrink hardshrink glu acos acosh asin asinh atan
        atanh cosh sinh deg2rad rad2deg frac i0 log10 angle isposinf isneginf lgamma digamma polygamma mvlgamma
        erfc erfinv sinc signbit positive exp2_ log10_ log2_ log1p_ expm1_ trunc_ ceil_ frac_ hardswish_
        hardsigmoid_ celu_ selu_ threshold_ logit_ acos_ asin_ atan_ cosh_ sinh_ tan_ elu_ leaky_relu_ hardtanh_
        mish_ erfc_ erfinv_ lgamma_ digamma_ i0_ special_i0e special_i1 special_i1e special_ndtri
        special_log_ndtr special_erfcx special_entr special_airy_ai special_bessel_j0 special_bessel_j1
        special_bessel_y0 special_bessel_y1 special_modified_bessel_i0 special_modified_bessel_i1
        special_modified_bessel_k0 special_modified_bessel_k1 special_scaled_modified_bessel_k0
        special_scaled_modified_bessel_k1 special_spherical_bessel_j0 log_ frexp nan_to_num_ sgn_ rrelu_dummy""",
    "binary": """hardswish_backward hardsigmoid_backward softshrink_backward hardshrink_backward logit_backward
        glu_backward mish_backward _prelu_kernel _prelu_kernel_backward bitwise_left_shift bitwise_right_shift
        __lshift__ __rshift__ __ilshift__ __irshift__ fmax fmin heaviside gcd lcm igamma igammac ldexp
        logaddexp logaddexp2 nextafter float_power float_power_ xlogy_ special_xlog1py special_zeta
        special_chebyshev_polynomial_t special_chebyshev_polynomial_u special_chebyshev_polynomial_v
        special_chebyshev_polynomial_w special_hermite_polynomial_h special_hermite_polynomial_he
        special_laguerre_polynomial_l special_legendre_polynomial_p special_shifted_chebyshev_polynomial_t
        special_shifted_chebyshev_polynomial_u special_shifted_chebyshev_polynomial_v
        special_shifted_chebyshev_polynomial_w isin atan2_ hypot_ copysign_ fmod_ floor_divide_ gcd_ lcm_
        bitwise_xor_ logical_xor_ heaviside_ igamma_ igammac_ nextafter_ ldexp_ clamp_min_ clamp_max_ cauchy_dummy
        elu_backward""",
    "reduce": """cumprod cumprod_ cumsum_ logcumsumexp _logcumsumexp soft_margin_loss multi_margin_loss
        multilabel_margin_loss_forward _pdist_forward _cdist_forward _euclidean_dist dist trace renorm renorm_
        addr addbmm vdot allclose _embedding_bag _embedding_bag_forward_only _ctc_loss _trilinear
        avg_pool2d avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d upsample_nearest1d upsample_nearest2d
        upsample_nearest3d _upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d
        upsample_linear1d upsample_bilinear2d upsample_bicubic2d upsample_trilinear3d
        _upsample_bilinear2d_aa _upsample_bicubic2d_aa col2im grid_sampler_2d grid_sampler_3d
        hash_tensor""",
    "reduce_max": """cummax cummin _cummax_helper _cummin_helper adaptive_max_pool2d adaptive_max_pool3d
        max_pool2d_with_indices max_pool3d_with_indices max_pool2d max_pool1d max_pool3d fractional_max_pool2d
        fractional_max_pool3d""",
    "roofline": """soft_margin_loss_backward multi_margin_loss_backward multilabel_margin_loss_backward
        _pdist_backward _cdist_backward _embedding_bag_backward _embedding_bag_dense_backward
        _embedding_bag_per_sample_weights_backward _ctc_loss_backward avg_pool2d_backward avg_pool3d_backward
        _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward adaptive_max_pool2d_backward
        adaptive_max_pool3d_backward max_pool2d_with_indices_backward max_pool3d_with_indices_backward
        fractional_max_pool2d_backward fractional_max_pool3d_backward upsample_nearest1d_backward
        upsample_nearest2d_backward upsample_nearest3d_backward _upsample_nearest_exact1d_backward
        _upsample_nearest_exact2d_backward _upsample_nearest_exact3d_backward upsample_linear1d_backward
        upsample_bilinear2d_backward upsample_bicubic2d_backward upsample_trilinear3d_backward
        _upsample_bilinear2d_aa_backward _upsample_bicubic2d_aa_backward grid_sampler_2d_backward
        grid_sampler_3d_backward reflection_pad1d_backward reflection_pad2d_backward reflection_pad3d_backward
        replication_pad1d_backward replication_pad2d_backward replication_pad3d_backward max_unpool2d
        max_unpool3d masked_scatter_backward index_reduce index_reduce_ put put_ bucketize searchsorted _segment_reduce_backward
        segment_reduce _histogramdd_from_bin_cts _histogramdd_from_bin_tensors _histogramdd_bin_edges
        histogram""",
    "conv": "convolution _convolution conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d",
    "backward:conv": "convolution_backward",
    "grouped_mm": "_grouped_mm",
    "sort": """sort topk kthvalue median nanmedian mode msort argsort""",
    "data_dependent": """nonzero nonzero_static masked_select _unique _unique2 unique_dim unique_consecutive
        unique_dim_consecutive repeat_interleave argwhere nonzero_numpy bincount""",
    "histc": "histc",
    "linear_ce": "_linear_cross_entropy_batch_chunked _linear_cross_entropy_batch_chunked_no_reduction",
    "view": "unsafe_split unsafe_split_with_sizes unsafe_chunk resize_as_",
    "addmm": "addmm_",
    "channel_norm": """native_batch_norm native_batch_norm_backward _native_batch_norm_legit
        _native_batch_norm_legit_no_training _native_batch_norm_legit_functional batch_norm_backward
        _batch_norm_with_update _batch_norm_no_update native_group_norm native_group_norm_backward""",
    "linalg": """linalg_solve_triangular triangular_solve _linalg_check_errors_dummy _linalg_svd linalg_svd
        _linalg_eigh linalg_eigh linalg_eig _linalg_eigvals linalg_eigvals linalg_lu_factor_ex linalg_lu
        linalg_lu_solve lu_unpack linalg_inv_ex _linalg_solve_ex linalg_solve linalg_cholesky_ex cholesky
        cholesky_inverse cholesky_solve _cholesky_solve_helper linalg_qr geqrf ormqr linalg_householder_product
        linalg_ldl_factor_ex linalg_ldl_solve linalg_lstsq _linalg_slogdet _linalg_det linalg_matrix_exp
        linalg_cross linalg_pinv""",
    "fft": "_fft_r2c _fft_c2c _fft_c2r",
}
for _cat, _names in _MORE.items():
    for _n in _names.split():
        if not _n.endswith("_dummy") and _n not in TABLE:
            TABLE[_n] = _cat
# a check that reads a device-side error code back to the host (torch.linalg raises from it)
TABLE["_linalg_check_errors"] = "sync"

# Ops whose bf16/fp16/fp8 inputs the device accumulates in fp32 (the result is rounded once to the output dtype).
ACCUMULATING = {"mm", "addmm", "bmm", "baddbmm", "dot", "mv", "addmv", "sum", "mean", "var", "std", "var_mean",
                "std_mean", "norm", "linalg_vector_norm", "prod", "logsumexp", "cumsum", "_softmax",
                "_log_softmax", "_safe_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
                "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
                "_scaled_dot_product_flash_attention_for_cpu",
                "_scaled_dot_product_flash_attention_for_cpu_backward", "nll_loss_forward",
                "sliding_window_attention", "sliding_window_attention_backward"}
ACCUMULATING |= set("""convolution _convolution convolution_backward _grouped_mm cumprod logcumsumexp _logcumsumexp
    soft_margin_loss multi_margin_loss multilabel_margin_loss_forward _pdist_forward _cdist_forward
    _euclidean_dist dist trace renorm addr addbmm vdot _embedding_bag _embedding_bag_forward_only
    _embedding_bag_backward _embedding_bag_dense_backward _embedding_bag_per_sample_weights_backward
    _ctc_loss _ctc_loss_backward _trilinear avg_pool2d avg_pool3d _adaptive_avg_pool2d _adaptive_avg_pool3d
    avg_pool2d_backward avg_pool3d_backward _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward
    upsample_linear1d upsample_bilinear2d upsample_bicubic2d upsample_trilinear3d upsample_linear1d_backward
    upsample_bilinear2d_backward upsample_bicubic2d_backward upsample_trilinear3d_backward
    _upsample_bilinear2d_aa _upsample_bicubic2d_aa _upsample_bilinear2d_aa_backward
    _upsample_bicubic2d_aa_backward col2im grid_sampler_2d grid_sampler_3d grid_sampler_2d_backward
    grid_sampler_3d_backward native_batch_norm native_batch_norm_backward _native_batch_norm_legit
    _native_batch_norm_legit_no_training _native_batch_norm_legit_functional batch_norm_backward
    native_group_norm native_group_norm_backward soft_margin_loss_backward multi_margin_loss_backward
    _pdist_backward _cdist_backward reflection_pad1d_backward reflection_pad2d_backward reflection_pad3d_backward
    replication_pad1d_backward replication_pad2d_backward replication_pad3d_backward upsample_nearest1d_backward
    upsample_nearest2d_backward upsample_nearest3d_backward _upsample_nearest_exact1d_backward
    _upsample_nearest_exact2d_backward _upsample_nearest_exact3d_backward linalg_solve_triangular
    triangular_solve _linalg_svd _linalg_eigh linalg_eig linalg_lu_factor_ex linalg_lu linalg_lu_solve
    linalg_inv_ex _linalg_solve_ex linalg_cholesky_ex cholesky cholesky_inverse cholesky_solve linalg_qr
    geqrf linalg_householder_product linalg_lstsq _linalg_slogdet _linalg_det linalg_matrix_exp
    _fft_r2c _fft_c2c _fft_c2r _batch_norm_with_update _batch_norm_no_update addmm_
    _linear_cross_entropy_batch_chunked _linear_cross_entropy_batch_chunked_no_reduction""".split())
# ops that update an argument in place (running statistics, ``self``) compute in their own dtype: upcasting would
# update a temporary copy
ACCUMULATING -= {"native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update", "addmm_"}

# Ops that move data between host and device (mixing devices is their purpose).
TRANSFER = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "set_", "_has_compatible_shallow_copy_type",
            "is_same_size", "_foreach_copy_", "lift_fresh", "lift", "alias"}


def category(name):
    return TABLE.get(name)
