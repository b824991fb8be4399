"""The model sweep: every causal-LM architecture ``transformers`` ships (``AutoModelForCausalLM``'s mapping), built
from a tiny config, run forward and backward in float32 on the CPU and on the simulated ``neuron`` device, compared.

Per architecture: the logits and every parameter's gradient are compared with ``torch.testing.assert_close``'s
float32 tolerances; a tensor outside them is re-judged against the same model run in float64 on the CPU: accepted
when every element is within tolerance of the float64 result or no farther from it than twice the CPU's float32
error at its worst element of that tensor (two float32 computations summing in different orders; see
``_within_cpu_error``).  The device's ops are counted (native, estimated, fallback) with ``trnsim.profile_torch``
and the simulated device time of the forward and backward is read from the device clock.

Statuses: ``pass`` (matched, no fallback), ``fallback`` (matched, some op ran on the CPU), ``mismatch``, ``error``
(the device raised), ``build-error`` (the tiny config or the model could not be made on the CPU: a harness limit,
not a device result).

The tiny config keeps every layer type of hybrid models: the number of layers is the smallest that gives the same
set of module classes as a deeper tiny model (up to the architecture's own depth), and per-layer type lists
(``layer_types`` and the like) are cut to that depth.

The process running :func:`run_model` must have the ``neuron`` device registered (``TORCHNEURON_TARGET=sim``
before torch is imported); :mod:`conformance.runner` starts such worker processes.
"""

from __future__ import annotations

import copy
import math
import time
import warnings

__all__ = ["list_models", "tiny_config", "build_model", "run_model", "SEQ", "BATCH"]

SEQ = 12          # tokens per sequence
BATCH = 2
VOCAB = 256
MAX_LAYERS = 12   # deepest tiny model tried when looking for every layer type

# attribute name -> tiny value (applied to the config and every sub-config); None entries are handled elsewhere
_WIDTH = dict.fromkeys("""hidden_size d_model n_embd embedding_size attention_hidden_size lru_width
backbone_hidden_size word_embed_proj_dim input_embedding_size hidden_size_per_layer_input""".split(), 64)
_HEADS = dict.fromkeys("""num_attention_heads n_head n_heads decoder_attention_heads encoder_attention_heads
num_heads swa_num_attention_heads index_n_heads index_num_heads linear_num_value_heads num_encoder_attention_heads
num_decoder_attention_heads""".split(), 4)
_KV_HEADS = dict.fromkeys("num_key_value_heads num_kv_heads swa_num_key_value_heads linear_num_key_heads".split(), 2)
_HEAD_DIM = dict.fromkeys("""head_dim swa_head_dim index_head_dim linear_key_head_dim linear_value_head_dim
linear_head_dim attention_head_dim attention_head_size dim_head kv_channels mamba_d_head mamba_head_dim
qk_nope_head_dim v_head_dim""".split(), 16)
_FFN = dict.fromkeys("""intermediate_size ffn_dim decoder_ffn_dim encoder_ffn_dim n_inner ffn_hidden_size dim_ff dff
feed_forward_size intermediate_size_mlp dense_intermediate_size first_dense_intermediate_size
mlp_only_intermediate_size""".split(), 128)
_MOE_FFN = dict.fromkeys("""moe_intermediate_size shared_expert_intermediate_size shared_intermediate_size
shared_experts_intermediate_size moe_shared_expert_intermediate_size expert_ffn_hidden_size""".split(), 32)
_EXPERTS = dict.fromkeys("num_experts n_routed_experts num_local_experts moe_num_experts".split(), 4)
_TOPK = dict.fromkeys("num_experts_per_tok moe_topk moe_k num_experts_per_token n_activated_experts".split(), 2)
_SMALL = {"kv_lora_rank": 32, "q_lora_rank": 32, "o_lora_rank": 32, "qk_rope_head_dim": 8, "rotary_dim": 8,
          "mamba_d_state": 16, "state_size": 16, "ssm_state_size": 16, "time_step_rank": 8, "mamba_dt_rank": 8,
          "chunk_size": 8, "mamba_chunk_size": 8, "index_topk": 4, "sliding_window": 8, "sliding_window_size": 8,
          "attention_window_size": 8, "window_size": 8, "local_attention_window_len": 8, "n_group": 2,
          "topk_group": 1, "laurel_rank": 8, "gated_norm_rank": 8, "loop_gate_rank": 8, "hc_lowrank": 8,
          "num_centroids": 4, "centroid_intermediate_top_k": 2, "index_block_size": 4, "index_topk_blocks": 2,
          "index_num_local_tokens": 4, "index_pool_size": 2, "block_size": 8, "attention_chunk_size": 8,
          "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4, "num_kv_shared_layers": 0}
_VOCABS = ("vocab_size", "decoder_vocab_size", "vocab_size_per_layer_input")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers", "encoder_layers",
           "num_decoder_layers", "num_encoder_layers")


def list_models(pattern=None):
    """Model types of ``AutoModelForCausalLM`` (fnmatch ``pattern``, comma-separated), in mapping order."""
    import fnmatch
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    names = list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if not pattern:
        return names
    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]


def _sub_configs(cfg):
    from transformers import PretrainedConfig
    yield cfg
    for v in list(vars(cfg).values()):
        if isinstance(v, PretrainedConfig):
            yield from _sub_configs(v)


def _shrink(cfg, n_layers):
    for c in _sub_configs(cfg):
        d = vars(c)
        orig = dict(d)
        for k, v in list(d.items()):
            if not isinstance(v, int) or isinstance(v, bool):
                continue
            for table in (_WIDTH, _HEADS, _HEAD_DIM, _FFN, _MOE_FFN, _EXPERTS, _TOPK, _SMALL):
                if k in table:
                    setattr(c, k, min(v, table[k]) if v > 0 else v)
                    break
            else:
                if k in _VOCABS and v > VOCAB:
                    setattr(c, k, VOCAB)
                elif k in _LAYERS and v > n_layers:
                    setattr(c, k, n_layers)
                elif k in ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len") and v > 512:
                    setattr(c, k, 512)
                elif k == "first_k_dense_replace" and v > 1:
                    setattr(c, k, 1)
        for table in (_HEAD_DIM, _KV_HEADS):   # left unset (None) in a default config some models cannot build
            for k in ("head_dim", "num_key_value_heads"):
                if k in table and k in orig and orig[k] is None:
                    setattr(c, k, table[k])
        for k in _KV_HEADS:             # multi-head stays multi-head (as many kv heads as heads), else 2 or fewer
            v = orig.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                heads0 = orig.get("num_attention_heads")
                setattr(c, k, d.get("num_attention_heads", 4) if v == heads0 else min(v, 2))
        _consistent(c, d)
        # token ids beyond the tiny vocabulary: distinct ids at its top end
        top = VOCAB - 1
        for k, v in list(d.items()):
            if ("token_id" in k or "token_index" in k) and isinstance(v, int) and not isinstance(v, bool) \
                    and v >= VOCAB:
                setattr(c, k, top)
                top -= 1
            elif ("token_id" in k) and isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                setattr(c, k, [x if x < VOCAB else VOCAB - 1 - i for i, x in enumerate(v)])
        # per-layer lists cut to the depth
        for k, v in list(d.items()):
            if isinstance(v, list) and len(v) > n_layers and (k.endswith("_types") or k.endswith("layer_types")
                                                             or k in ("layers_block_type", "block_types")):
                setattr(c, k, v[:n_layers])
    return cfg


def _consistent(c, d):
    """Relations between shrunk sizes that the architectures assume."""
    if isinstance(d.get("qk_rope_head_dim"), int):          # multi-head latent attention
        if isinstance(d.get("head_dim"), int):
            c.head_dim = d["qk_rope_head_dim"]
        if isinstance(d.get("qk_head_dim"), int) and isinstance(d.get("qk_nope_head_dim"), int):
            c.qk_head_dim = d["qk_nope_head_dim"] + d["qk_rope_head_dim"]
    if isinstance(d.get("mamba_d_ssm"), int):
        c.mamba_d_ssm = 128
    for heads, hdim, expand in (("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                                ("mamba_num_heads", "mamba_head_dim", "mamba_expand"),
                                ("num_heads", "head_dim", "expand")):
        if isinstance(d.get(heads), int) and isinstance(d.get(hdim), int) and d.get(hdim) > 0 and (
                expand in d or "mamba_d_ssm" in d):
            width = d["mamba_d_ssm"] if isinstance(d.get("mamba_d_ssm"), int) else \
                int(d.get(expand, 2) * d.get("hidden_size", 64))
            setattr(c, heads, max(1, width // d[hdim]))


def _layer_lists(cfg):
    """Per-layer type lists of the full-size config: {(config path, attr): list}."""
    out = {}
    for c in _sub_configs(cfg):
        for k, v in vars(c).items():
            if isinstance(v, list) and len(v) > 1 and all(isinstance(x, str) for x in v) and (
                    k.endswith("_types") or k in ("layers_block_type", "block_types")):
                out[(id(c), k)] = v
    return out


def _depth(cfg):
    for c in _sub_configs(cfg):
        for k in _LAYERS:
            v = getattr(c, k, None)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return 2


def _module_kinds(model):
    return {type(m).__name__ for m in model.modules()}


def tiny_config(model_type, n_layers=None):
    from transformers import CONFIG_MAPPING
    cfg = CONFIG_MAPPING[model_type]()
    full_lists = list(_layer_lists(cfg).values())
    if n_layers is None:
        n_layers = 2
        for lst in full_lists:          # the shortest prefix holding every type of each per-layer list
            kinds = set(lst)
            n = next(i for i in range(1, len(lst) + 1) if set(lst[:i]) == kinds)
            n_layers = max(n_layers, n)
    cfg = _shrink(cfg, n_layers)
    for c in _sub_configs(cfg):
        for attr in ("use_cache",):
            if hasattr(c, attr):
                setattr(c, attr, False)
    return cfg


def build_model(model_type, seed=0):
    """A tiny ``model_type`` causal LM on the CPU (float32, eval mode, deterministic init) and its config."""
    import torch
    from transformers import AutoModelForCausalLM
    cfg = tiny_config(model_type)
    depth = _depth(CONFIG_MAPPING_full(model_type))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    kinds = _module_kinds(model)
    n = _depth(cfg)
    deeper = min(depth, MAX_LAYERS)
    if deeper > n:               # hybrid stacks decided by periods/offsets: grow until no module kind is missing
        big_cfg = tiny_config(model_type, deeper)
        torch.manual_seed(seed)
        big_kinds = _module_kinds(AutoModelForCausalLM.from_config(big_cfg))
        if big_kinds - kinds:
            for m in range(n + 1, deeper + 1):
                c = tiny_config(model_type, m)
                torch.manual_seed(seed)
                cand = AutoModelForCausalLM.from_config(c)
                if _module_kinds(cand) >= big_kinds:
                    cfg, model = c, cand
                    break
            else:
                cfg = big_cfg
                torch.manual_seed(seed)
                model = AutoModelForCausalLM.from_config(cfg)
    model = model.float().eval()
    return model, cfg


def CONFIG_MAPPING_full(model_type):
    from transformers import CONFIG_MAPPING
    return CONFIG_MAPPING[model_type]()


def _inputs(cfg, seed=1):
    import torch
    g = torch.Generator().manual_seed(seed)
    vocabs = [c.vocab_size for c in _sub_configs(cfg) if isinstance(getattr(c, "vocab_size", None), int)]
    vocab = min([VOCAB] + vocabs)
    ids = torch.randint(3, max(4, vocab - 8), (BATCH, SEQ), generator=g)
    return ids


def _forward_backward(model, ids, cot_seed=2):
    """Logits (float32) and every named parameter's gradient after backward of a fixed random cotangent."""
    import torch
    out = model(input_ids=ids)
    logits = out.logits if hasattr(out, "logits") else out[0]
    g = torch.Generator().manual_seed(cot_seed)
    cot = torch.randn(logits.shape, generator=g, dtype=torch.float32).to(logits.dtype)
    logits.backward(cot.to(logits.device))
    grads = {n: (None if p.grad is None else p.grad.detach().to("cpu"))
             for n, p in model.named_parameters(remove_duplicate=False)}
    return logits.detach().to("cpu"), grads


def _compare(name, dev, cpu, ref):
    """``None`` or (detail, worst relative error); ``ref()`` gives the float64 result (or ``None``)."""
    import torch
    if dev is None or cpu is None:
        if (dev is None) != (cpu is None):
            return f"{name}: gradient {'missing' if dev is None else 'unexpected'} on the device", math.inf
        return None
    if dev.shape != cpu.shape:
        return f"{name}: shape {list(dev.shape)} on the device, {list(cpu.shape)} on the CPU", math.inf
    try:
        torch.testing.assert_close(dev, cpu, equal_nan=True, check_device=False)
        return None
    except AssertionError:
        pass
    r = ref()
    if r is not None and _within_cpu_error(dev, cpu, r):
        return None
    return f"{name}: outside float32 tolerance", _rel_err(dev, cpu)


def _within_cpu_error(dev, cpu, ref):
    """Every element of the device's result is within float32 tolerance of the float64 result, or no farther from
    it than twice the CPU's float32 error at its worst element of the same tensor.  Two float32 computations that
    sum in different orders (the device decomposes some ops differently from the CPU's fused kernels) carry
    rounding errors of the same size but not at the same elements; the factor 2 allows for that and no more."""
    import torch
    from torch.testing._comparison import default_tolerances
    if ref.shape != dev.shape:
        return False
    d64, c64, r64 = dev.double(), cpu.double(), ref.double()
    if torch.isnan(d64).ne(torch.isnan(r64)).any():
        return False
    ed = (d64 - r64).abs().nan_to_num(nan=0.0)
    ec_max = (c64 - r64).abs().nan_to_num(nan=0.0).max()
    rtol, atol = default_tolerances(dev)
    return bool((ed <= torch.clamp(atol + rtol * r64.abs(), min=2.0 * float(ec_max))).all())


def _rel_err(a, b):
    import torch
    a64, b64 = a.double(), b.double()
    scale = b64.abs().max().item() if b64.numel() else 0.0
    d = (a64 - b64).abs().nan_to_num(nan=math.inf).max().item() if a64.numel() else 0.0
    return d / scale if scale > 0 else d


def _float64_reference(model, ids):
    try:
        m64 = copy.deepcopy(model).double()
        if hasattr(m64, "set_experts_implementation"):      # grouped_mm has no float64 kernel: the expert loop
            try:
                m64.set_experts_implementation("eager")
            except Exception:
                pass
        return _forward_backward(m64, ids)
    except Exception:
        return None, None


def run_model(model_type, device="neuron"):
    """One record for ``model_type``."""
    import torch
    import trnsim.backend as tb
    from trnsim.backend.device_state import STATE
    rec = {"suite": "models", "name": model_type, "dtype": "float32", "mode": "forward+backward",
           "status": "error", "detail": "", "fallbacks": {}, "ops": {}, "sim_us": 0.0, "worst_rel_err": 0.0,
           "params": 0, "layers": 0, "tied": False, "seconds": 0.0}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, cfg = build_model(model_type)
            ids = _inputs(cfg)
            dev_model = copy.deepcopy(model)
            cpu_logits, cpu_grads = _forward_backward(model, ids)
        except Exception as e:
            rec.update(status="build-error", detail=_err(e), seconds=round(time.perf_counter() - t0, 2))
            return rec
        rec["params"] = sum(p.numel() for p in model.parameters())
        rec["layers"] = _depth(cfg)
        rec["tied"] = _has_tied(model)
        fb0 = dict(STATE.fallback_counts)
        ns0 = STATE.now_ns
        try:
            with tb.profile_torch() as prof:
                dev_model.to(device)
                ids_d = ids.to(device)
                dev_logits, dev_grads = _forward_backward(dev_model, ids_d)
        except Exception as e:
            rec.update(detail=_err(e), seconds=round(time.perf_counter() - t0, 2),
                       fallbacks=_delta(fb0, STATE.fallback_counts))
            return rec
        rec["sim_us"] = round((STATE.now_ns - ns0) / 1e3, 3)
        rec["fallbacks"] = _delta(fb0, STATE.fallback_counts)
        kinds = {}
        for r in prof.rows:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
        rec["ops"] = kinds
        ref_cache = []

        def ref(n):         # the float64 run, made only when some tensor is outside the float32 tolerance
            if not ref_cache:
                ref_cache.append(_float64_reference(model, ids))
            logits64, grads64 = ref_cache[0]
            if n == "logits":
                return logits64
            return None if grads64 is None else grads64.get(n)
        problems = []
        worst = 0.0
        items = [("logits", dev_logits, cpu_logits)]
        for n, g in cpu_grads.items():
            items.append((n, dev_grads.get(n, "absent"), g))
        for n, d, c in items:
            if isinstance(d, str):
                problems.append((f"{n}: no such parameter on the device model", math.inf, n))
                continue
            if d is not None and c is not None and d.shape == c.shape and d.numel():
                worst = max(worst, _rel_err(d, c))
            bad = _compare(n, d, c, lambda n=n: ref(n))
            if bad is not None:
                problems.append(bad + (n,))
        rec["worst_rel_err"] = worst if math.isfinite(worst) else "inf"
        rec["differing"] = sorted(p[2] for p in problems)[:50]
        rec["tied_names"] = _tied_names(model)
        if problems:
            problems.sort(key=lambda p: -p[1] if math.isfinite(p[1]) else -1e300)
            rec["matches_cpu_math_sdpa"] = _matches_math_sdpa(model, ids, [p[2] for p in problems],
                                                              dev_logits, dev_grads)
            rec["status"] = "mismatch"
            rec["detail"] = f"{len(problems)} of {len(items)} tensors differ; worst: {problems[0][0]}" + (
                f" (relative error {problems[0][1]:.3g})" if math.isfinite(problems[0][1]) else "")
        else:
            rec["status"] = "fallback" if rec["fallbacks"] else "pass"
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


def _matches_math_sdpa(model, ids, names, dev_logits, dev_grads):
    """Whether every differing tensor of the device equals, within float32 tolerance, the CPU run with torch's math
    SDPA backend.  On the CPU, ``F.scaled_dot_product_attention`` picks its fused flash kernel; for a device other
    than CPU and CUDA torch's composite SDPA takes the math decomposition (matmul, softmax, matmul) before the op
    reaches the device, so the two sum in different orders.  A model that is sensitive to that (gemma3n/gemma4:
    errors grow through the layers' norms) differs from the default CPU run and not from this one."""
    import torch
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        m = copy.deepcopy(model)
        m.zero_grad(set_to_none=True)
        with sdpa_kernel([SDPBackend.MATH]):
            logits, grads = _forward_backward(m, ids)
    except Exception:
        return False
    for n in names:
        d, c = (dev_logits, logits) if n == "logits" else (dev_grads.get(n), grads.get(n))
        if d is None or c is None or isinstance(d, str) or d.shape != c.shape:
            return False
        try:
            torch.testing.assert_close(d, c, equal_nan=True, check_device=False)
        except AssertionError:
            return False
    return True


def _has_tied(model):
    seen = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            return True
        seen[id(p)] = n
    return False


def _tied_names(model):
    """Names of the parameters that share their tensor with another name (every name of each tied group)."""
    groups = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(n)
    return sorted(n for names in groups.values() if len(names) > 1 for n in names)


def _delta(before, after):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def _err(e):
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:240] if msg else ''}"
