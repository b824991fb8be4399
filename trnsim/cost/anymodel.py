"""Any model's own code for the estimator: a Hugging Face config of any architecture ``transformers`` builds
(encoder, encoder-decoder, vision, decoder families the templates do not describe) or a user's Python factory,
run forward and backward on the shape-only ``neuron`` device.

Which path a model takes:

* the decoder templates (:mod:`trnsim.cost.layers`, the fast path, with TP/PP/CP/EP): the built-in names, a config
  without ``model_type`` (plain shapes), and the decoder families they describe (:data:`TEMPLATE_TYPES`);
* every other Hugging Face config: the model ``transformers`` builds for it (its ``architectures`` entry, else the
  Auto class of its kind: pre-training heads for text, image classification for vision), on the ``meta`` device;
* ``path.py:make_model``: the factory's ``nn.Module`` and input spec (:func:`load_factory`, format below).

One block, multiplied: the module is searched for its *stacks*, the ``nn.ModuleList`` children whose entries
after the first are all of one class with the same parameter shapes (BERT's ``encoder.layer``, T5's
``encoder.block`` and ``decoder.block``, ViT's ``encoder.layer``; the first entry may differ, as T5's first block
carries the relative position bias).  The model is run with every stack cut to its first block (the *base*),
then once per stack with its first two blocks; a block costs the difference, and the model
``base + sum((n - 1) x block)``.  So a 24-layer encoder costs two short runs whatever its depth; a model without
a stack is run whole.  Memory saved for backward is extrapolated the same way.

The input spec of a factory (``make_model()`` returns ``(module, spec)``)::

    {"inputs": {"input_ids": (["batch", 512], "int64"),        # forward keyword -> (shape, dtype)
                "labels":    (["batch", 512], "int64")},       # "batch" stands for the micro-batch
     "tokens": 512}                                            # optional: tokens per sample (default 1)

The loss backpropagated is the output's ``loss`` (an attribute or a ``"loss"`` key) when there is one, else the
sum of its first tensor.  A factory's module is built under ``torch.device("meta")`` (no host memory).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import json
import os

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["AnyModel", "TEMPLATE_TYPES", "uses_template", "load_any", "load_factory", "find_stacks", "model_cost",
           "PRECISIONS"]

# decoder families the templates describe (grouped-query/latent attention, SwiGLU MLP, MoE): the fast path
TEMPLATE_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
                  "deepseek_v3", "gpt_oss")

# precision -> (parameter dtype, autocast to bf16, the step's cost precision); see the estimator's docstring
PRECISIONS = {"bf16": (torch.bfloat16, False, "bf16"), "autocast": (torch.float32, True, "bf16"),
              "fp32": (torch.float32, False, "fp32")}


def _get(cfg, name, default=None):
    v = cfg.get(name) if isinstance(cfg, dict) else getattr(cfg, name, None)
    return default if v is None else v


def uses_template(cfg) -> bool:
    """True when a config (dict or transformers config) is estimated by the decoder templates."""
    mt = _get(cfg, "model_type")
    return mt is None or str(mt) in TEMPLATE_TYPES


@dataclasses.dataclass
class AnyModel:
    """A model run as its own code.  ``make()`` builds it (call under ``torch.device("meta")``); ``inputs(mb,
    seq, dtype)`` gives its forward keywords as shape-only specs ``{name: (shape, dtype)}``."""
    name: str
    make: object
    inputs: object
    tokens: object                 # tokens per sample: an int, or a function of seq
    kind: str                      # "text", "seq2seq", "vision" or "factory"
    max_seq: int | None = None     # the longest sequence its positions allow (text models)
    default_seq: int | None = None
    source: str = ""
    key: str = ""                  # what identifies the model's code and shapes (the run cache's key; "" = none)

    def tokens_per_sample(self, seq):
        return int(self.tokens(seq) if callable(self.tokens) else self.tokens)


# -- Hugging Face configs ------------------------------------------------------------------------------------
def _transformers():
    try:
        import transformers
    except ImportError:
        raise ValueError("this config's model_type is not a decoder the templates describe, and running the model's "
                         "own code needs the transformers package (pip install transformers)") from None
    return transformers


def hf_config(cfg):
    """A transformers config object from a dict (with ``model_type``) or a config object."""
    tr = _transformers()
    if not isinstance(cfg, dict):
        return cfg
    d = {k: v for k, v in cfg.items() if not k.startswith("_")}
    mt = d.pop("model_type")
    try:
        return tr.AutoConfig.for_model(mt, **d)
    except ValueError as e:
        raise ValueError(f"model_type {mt!r}: transformers {tr.__version__} does not know it ({e})") from None


def _model_class(cfg):
    tr = _transformers()
    for arch in _get(cfg, "architectures") or []:
        cls = getattr(tr, arch, None)
        if cls is not None:
            return cls
    vision = _get(cfg, "image_size") is not None and _get(cfg, "vocab_size") is None
    autos = ["AutoModelForImageClassification", "AutoModel"] if vision else \
        ["AutoModelForPreTraining", "AutoModelForSeq2SeqLM", "AutoModelForCausalLM", "AutoModelForMaskedLM",
         "AutoModel"]
    for a in autos:
        auto = getattr(tr, a)
        try:
            return auto._model_mapping[type(cfg)]
        except KeyError:
            continue
    raise ValueError(f"model_type {cfg.model_type!r}: transformers has no model class for this config")


def _hf_key(cls, cfg):
    """What identifies a transformers model's code and shapes: class, config and the library's version."""
    return f"transformers {_transformers().__version__} {cls.__name__} {cfg.to_json_string()}"


def _hf_model(cfg, name):
    cfg = hf_config(cfg)
    cls = _model_class(cfg)
    if getattr(cls, "_supports_sdpa", False) and getattr(cfg, "_attn_implementation", None) in (None, "eager"):
        cfg._attn_implementation = "sdpa"          # the fused attention kernel, as a Neuron model runs it
    sig = inspect.signature(cls.forward).parameters
    main = getattr(cls, "main_input_name", "input_ids")
    seq2seq = bool(_get(cfg, "is_encoder_decoder", False))
    if main == "pixel_values":
        img, ch = _get(cfg, "image_size"), _get(cfg, "num_channels", 3)
        patch = _get(cfg, "patch_size")
        img = img if isinstance(img, int) else int(img[0])
        patch = patch if isinstance(patch, int) else int(patch[0])
        tokens = (img // patch) ** 2 + (1 if "vit" in str(cfg.model_type) else 0)

        def inputs(mb, seq, dtype):
            d = {"pixel_values": ((mb, ch, img, img), dtype)}
            if "labels" in sig:
                d["labels"] = ((mb,), torch.int64)
            return d
        return AnyModel(name, lambda: cls(cfg), inputs, tokens, "vision",
                        source=f"transformers {cls.__name__}, {img}x{img} images, patch {patch}",
                        key=_hf_key(cls, cfg))
    if main != "input_ids":
        raise ValueError(f"{cls.__name__}: its main input is {main!r}; only token ids and images are built from a "
                         f"config (give a factory with its input spec: --model file.py:make_model)")
    max_seq = _get(cfg, "max_position_embeddings") or _get(cfg, "n_positions")

    def inputs(mb, seq, dtype):
        d = {"input_ids": ((mb, seq), torch.int64)}
        if "labels" in sig:
            d["labels"] = ((mb, seq), torch.int64)
        if "next_sentence_label" in sig:
            d["next_sentence_label"] = ((mb,), torch.int64)
        if seq2seq and "decoder_input_ids" in sig:     # given, not shifted from the labels (needs no token ids)
            d["decoder_input_ids"] = ((mb, seq), torch.int64)
        return d
    return AnyModel(name, lambda: cls(cfg), inputs, lambda s: (2 if seq2seq else 1) * s,
                    "seq2seq" if seq2seq else "text", max_seq=max_seq,
                    default_seq=min(512, max_seq) if max_seq else 512,
                    source=f"transformers {cls.__name__}" + (" (decoder as long as the encoder)" if seq2seq else ""),
                    key=_hf_key(cls, cfg))


# -- a user's factory ---------------------------------------------------------------------------------------
def _spec_error(where, what):
    return ValueError(f"{where}: {what} (expected {{'inputs': {{name: (shape, dtype)}}, 'tokens': int}}, shape "
                      f"entries ints or 'batch'; see docs/guides/estimating-cost.md)")


def _check_spec(spec, where):
    if not isinstance(spec, dict) or not isinstance(spec.get("inputs"), dict) or not spec["inputs"]:
        raise _spec_error(where, f"the input spec {spec!r} has no 'inputs' mapping")
    out = {}
    for name, v in spec["inputs"].items():
        if not (isinstance(v, (tuple, list)) and len(v) == 2 and isinstance(v[0], (tuple, list))):
            raise _spec_error(where, f"input {name!r}: {v!r} is not (shape, dtype)")
        shape, dt = v
        for d in shape:
            if not (d == "batch" or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)):
                raise _spec_error(where, f"input {name!r}: shape entry {d!r}")
        dtype = getattr(torch, str(dt).replace("torch.", ""), None)
        if not isinstance(dtype, torch.dtype):
            raise _spec_error(where, f"input {name!r}: unknown dtype {dt!r}")
        out[name] = (tuple(shape), dtype)
    tokens = spec.get("tokens", 1)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise _spec_error(where, f"'tokens' {tokens!r} is not a positive integer")
    unknown = set(spec) - {"inputs", "tokens"}
    if unknown:
        raise _spec_error(where, f"unknown keys {sorted(unknown)}")
    return out, tokens


def _from_factory(factory, ref, name, source):
    try:
        with torch.device("meta"):
            got = factory()
    except Exception as e:
        raise ValueError(f"model {ref!r}: {name}() failed: {type(e).__name__}: {e}") from e
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], nn.Module)):
        raise ValueError(f"model {ref!r}: {name}() returned {type(got).__name__}, expected (nn.Module, input spec)")
    ins, tokens = _check_spec(got[1], f"model {ref!r}")

    def make():
        return factory()[0]

    def inputs(mb, seq, dtype):
        return {n: (tuple(mb if d == "batch" else d for d in shape),
                    dtype if dt.is_floating_point else dt) for n, (shape, dt) in ins.items()}
    # no key: a factory's code (and what it imports) may change between runs, so its runs are never cached on
    # disk (each process runs it again; the kernel costs it needs are cached)
    return AnyModel(name, make, inputs, tokens, "factory", source=source)


def load_factory(ref):
    """``"path.py:function"`` (or the function itself) -> an :class:`AnyModel`: the function returns
    ``(nn.Module, input spec)``."""
    if callable(ref):
        name = getattr(ref, "__name__", "factory")
        return _from_factory(ref, name, name, f"the Python function {getattr(ref, '__qualname__', name)}")
    path, _, fn = ref.rpartition(":")
    if not path.endswith(".py") or not fn:
        raise ValueError(f"model {ref!r}: a factory is given as path.py:function")
    if not os.path.isfile(path):
        raise ValueError(f"model {ref!r}: no such file {path}")
    mod_name = "trnsim_user_model_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise ValueError(f"model {ref!r}: importing {path} failed: {type(e).__name__}: {e}") from e
    factory = getattr(mod, fn, None)
    if not callable(factory):
        raise ValueError(f"model {ref!r}: {path} has no function {fn!r}")
    return _from_factory(factory, ref, os.path.splitext(os.path.basename(path))[0] + f":{fn}", f"{path}:{fn}")


def load_any(model):
    """An :class:`AnyModel` for a factory (``"path.py:function"`` or the function), a config path/dict/object
    (with a non-template ``model_type``) or an AnyModel."""
    if isinstance(model, AnyModel):
        return model
    if (isinstance(model, str) and ":" in model and model.rpartition(":")[0].endswith(".py")) or \
            (callable(model) and not isinstance(model, (nn.Module, type))):
        return load_factory(model)
    if isinstance(model, str):
        with open(model, encoding="utf-8") as f:
            cfg = json.load(f)
        return _hf_model(cfg, os.path.splitext(os.path.basename(model))[0])
    name = str(_get(model, "_name_or_path") or _get(model, "model_type") or "model")
    return _hf_model(model, name)


# -- stacks of identical blocks -----------------------------------------------------------------------------
def _signature(m):
    return type(m), tuple((n, tuple(p.shape)) for n, p in m.named_parameters())


def find_stacks(module):
    """``[(path, n)]``: the module's stacks (an ``nn.ModuleList`` of >= 2 entries whose entries after the first
    share one class and parameter shapes), outermost first; a stack inside a stack is part of its block."""
    out = []

    def walk(m, prefix):
        for name, child in m.named_children():
            path = f"{prefix}{name}"
            if isinstance(child, nn.ModuleList) and len(child) >= 2:
                sigs = {_signature(b) for b in list(child)[1:]}
                if len(sigs) == 1:
                    out.append((path, len(child)))
                    continue
            walk(child, path + ".")
    walk(module, "")
    return out


def _truncate(module, path, k):
    parent = module.get_submodule(path.rpartition(".")[0]) if "." in path else module
    attr = path.rpartition(".")[2]
    setattr(parent, attr, nn.ModuleList(list(getattr(parent, attr))[:k]))


def _loss(out):
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss.float()
    if isinstance(out, torch.Tensor):
        return out.float().sum()
    first = next(iter(out.values())) if isinstance(out, dict) else out[0]
    return first.float().sum()


@contextlib.contextmanager
def flash_attention():
    """Inside: ``F.scaled_dot_product_attention`` without a mask runs as the device's fused (flash) attention
    kernel, dropout included, as Neuron's attention kernels run it: NKI's ``flash_fwd``/``flash_attn_bwd`` take
    ``dropout_p`` and, with ``mixed_precision``, do every Tensor Engine operation in bf16 (Neuron docs,
    nki.kernels.flash_fwd).  PyTorch itself would pick its math path (materialised scores, per-head matmuls,
    fp32 upcast) for dropout or fp32 inputs: that is the CPU's backend choice, not the device's.  fp32 inputs are
    cast to bf16 for the kernel (charged) and its output back.  With a mask (or GQA) the call is left as it is."""
    orig = F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or enable_gqa or q.dim() != 4 or k.shape[1] != q.shape[1]:
            return orig(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                        enable_gqa=enable_gqa)
        dt = q.dtype
        if dt == torch.float32:
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        o = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, float(dropout_p), bool(is_causal),
                                                                       scale=scale)[0]
        return o.to(dt) if o.dtype != dt else o
    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig


def _auto_cast_key(precision):
    """What of the compiler's flags a run's cost depends on: an fp32 run's matmuls follow neuronx-cc's auto-cast
    (``costs.compiler_auto_cast``, from ``NEURON_CC_FLAGS``)."""
    if precision != "fp32":
        return ()
    from ..backend import costs
    return ("auto-cast", costs.compiler_auto_cast() or "none")


def _run_model(am, cut, micro_batch, seq, target, precision, compiled=False):
    """One forward + backward of ``am`` with the stacks of ``cut`` ({path: blocks}) cut to that many blocks; kept
    by the layer-cost cache (:mod:`trnsim.cost.layer_cache`) under the model's key when it has one."""
    from ..backend.shape_only import shape_only_tensor
    from . import layer_cache
    from .step import _run
    dtype, autocast, cost_precision = PRECISIONS[precision]
    key = ("anymodel", am.key, tuple(sorted(cut.items())), micro_batch, seq, target.name, precision) \
        + (("compiled",) if compiled else ()) + _auto_cast_key(precision) if am.key else None
    if key is not None:
        hit = layer_cache.lookup(key)
        if hit is not None:
            return hit

    def build():
        m = am.make()
        for path, k in cut.items():
            _truncate(m, path, k)
        return m.to(dtype)

    def inputs():
        return ({n: shape_only_tensor(s, dt) for n, (s, dt) in am.inputs(micro_batch, seq, dtype).items()},)

    def loss_fn(m, kw):
        with flash_attention():
            if autocast:
                with torch.autocast("neuron", dtype=torch.bfloat16):
                    return _loss(m(**kw))
            return _loss(m(**kw))
    r = _run(build, inputs, target, loss_fn, cost_precision, compiled)
    if key is not None:
        layer_cache.store(key, r)
    return r


@dataclasses.dataclass(frozen=True)
class ModelCost:
    total: object                 # LayerCost of the whole model (one micro-batch, one rank)
    base: object                  # every stack cut to one block
    blocks: tuple                 # ((path, n, LayerCost of one block), ...)
    params: int
    embedding_params: int
    wall_s: float

    def describe(self):
        if not self.blocks:
            return "the whole model run once (no stack of identical blocks found)"
        return "; ".join(f"{p}: {n} blocks, one run and multiplied" for p, n, _ in self.blocks) + \
            " (blocks after the first identical in class and parameter shapes)"


def _combine(base, blocks):
    from .step import LayerCost
    fields = ("fwd_ns", "bwd_ns", "tensor_ns", "other_ns", "fallback_ns", "launch_ns", "launches", "saved_bytes",
              "flops", "graphs", "graph_ops")
    d = {f: getattr(base, f) for f in fields}
    fb = set(base.fallbacks)
    for _, n, c in blocks:
        for f in fields:
            d[f] += (n - 1) * getattr(c, f)
        fb.update(c.fallbacks)
    d["launches"] = int(d["launches"])
    d["graphs"], d["graph_ops"] = int(d["graphs"]), int(d["graph_ops"])
    d["saved_bytes"] = int(d["saved_bytes"])
    return LayerCost(fallbacks=tuple(sorted(fb)), **d)


def _diff(a, b):
    from .step import LayerCost
    fields = ("fwd_ns", "bwd_ns", "tensor_ns", "other_ns", "fallback_ns", "launch_ns", "launches", "saved_bytes",
              "flops", "graphs", "graph_ops")
    return LayerCost(fallbacks=tuple(sorted(set(a.fallbacks) - set(b.fallbacks))),
                     **{f: getattr(a, f) - getattr(b, f) for f in fields})


def count_params(module):
    """(parameters, of which embedding tables), ties counted once."""
    seen, n, emb = set(), 0, 0
    for m in module.modules():
        for p in m._parameters.values():
            if p is None or id(p) in seen:
                continue
            seen.add(id(p))
            n += p.numel()
            if isinstance(m, nn.Embedding):
                emb += p.numel()
    return n, emb


_MEMO = {}


def model_cost(am, *, micro_batch=1, seq=None, target="trn2", precision="bf16", compiled=False):
    """The forward + backward of one micro-batch of ``am`` on one core (see the module docstring); ``compiled``:
    the model runs through ``torch.compile(backend="neuron")`` (fused kernels, one launch per graph)."""
    import time
    from ..targets import get_target
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} for a model run as its own code: expected one of "
                         f"{', '.join(PRECISIONS)}")
    tg = get_target(target)
    key = (am.key or id(am), micro_batch, seq, tg.name, precision, bool(compiled)) + _auto_cast_key(precision)
    if key in _MEMO:
        return _MEMO[key][1]
    t0 = time.perf_counter()
    try:
        with torch.device("meta"):
            full = am.make()
    except Exception as e:
        raise ValueError(f"model {am.name}: building it failed ({am.source}): {type(e).__name__}: {e}") from e
    params, emb = count_params(full)
    stacks = find_stacks(full)
    del full
    try:
        if not stacks:
            total = _run_model(am, {}, micro_batch, seq, tg, precision, compiled)
            r = ModelCost(total, total, (), params, emb, 0.0)
        else:
            cut = {p: 1 for p, _ in stacks}
            base = _run_model(am, cut, micro_batch, seq, tg, precision, compiled)
            blocks = []
            for p, n in stacks:
                two = _run_model(am, dict(cut, **{p: 2}), micro_batch, seq, tg, precision, compiled)
                blocks.append((p, n, _diff(two, base)))
            r = ModelCost(_combine(base, blocks), base, tuple(blocks), params, emb, 0.0)
    except (RuntimeError, TypeError, IndexError) as e:
        raise ValueError(f"model {am.name}: its forward/backward failed on the shape-only device with micro-batch "
                         f"{micro_batch}" + (f", sequence {seq}" if seq else "") +
                         f": {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    r = dataclasses.replace(r, wall_s=time.perf_counter() - t0)
    _MEMO[key] = (am, r)          # the model is kept with its result: its id() is not reused while memoised
    return r
