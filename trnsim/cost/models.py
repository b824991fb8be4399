"""Model descriptions for the estimator: a :class:`ModelSpec` from a Hugging Face config (dict, JSON file or
``transformers`` config object) or a built-in name, its parameter counts, and the model flops of a step.

Only decoder-only transformers are described here (dense, grouped-query attention with an optional sliding
window on some layers, mixture of experts, DeepSeek's multi-head latent attention); their layers are built by
:mod:`trnsim.cost.layers` and run on the shape-only device.
"""

from __future__ import annotations

import dataclasses
import json
import os

__all__ = ["ModelSpec", "BUILTIN", "load_model", "builtin_names"]

_DATA = os.path.join(os.path.dirname(__file__), "data", "models.json")


def _builtin():
    with open(_DATA, encoding="utf-8") as f:
        doc = json.load(f)
    return {k: v for k, v in doc.items() if not k.startswith("_")}


BUILTIN = _builtin()


def builtin_names():
    return sorted(BUILTIN)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int                      # dense MLP intermediate size
    vocab: int
    tied: bool = False
    experts: int = 0              # routed experts (0: dense)
    top_k: int = 0
    moe_ffn: int = 0              # intermediate size of one expert
    shared_experts: int = 0
    dense_layers: int = 0         # leading layers with a dense MLP in a MoE model
    q_lora_rank: int = 0          # multi-head latent attention (DeepSeek): 0 for plain attention
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    source: str = ""
    sliding_window: int = 0       # keys a windowed layer's query sees (itself included); 0: none
    windowed: tuple = ()          # the indices of the layers with a sliding window (Hugging Face's layer_types)

    # -- structure --------------------------------------------------------------------------------------
    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def layer_order(self):
        """The kind of every decoder layer in order: "dense" or "moe" (its MLP), with ``WINDOW`` appended when its
        attention has a sliding window."""
        win = set(self.windowed) if self.sliding_window else set()
        return [("dense" if (not self.moe or i < self.dense_layers) else "moe") + (WINDOW if i in win else "")
                for i in range(self.layers)]

    def layer_kinds(self):
        """``[(kind, count)]`` in order of first appearance: "dense" and "moe" decoder layers, each also as
        "dense/window" and "moe/window" (a sliding window) when the model has windowed layers."""
        out = {}
        for k in self.layer_order():
            out[k] = out.get(k, 0) + 1
        return list(out.items())

    def stages(self, pp):
        """``[{kind: count}]``: the layers of each of ``pp`` pipeline stages, ``ceil(layers / pp)`` consecutive
        layers each (the last may hold fewer)."""
        order, per = self.layer_order(), -(-self.layers // int(pp))
        out = []
        for s0 in range(0, self.layers, per):
            d = {}
            for k in order[s0:s0 + per]:
                d[k] = d.get(k, 0) + 1
            out.append(d)
        return out

    # -- parameters -------------------------------------------------------------------------------------
    def attention_params(self) -> int:
        h = self.hidden
        if self.mla:
            qk = self.qk_nope_dim + self.qk_rope_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk) if self.q_lora_rank \
                else h * self.heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank + \
                self.kv_lora_rank * self.heads * (self.qk_nope_dim + self.v_head_dim)
            return q + kv + self.heads * self.v_head_dim * h
        d = self.head_dim
        return h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h

    def mlp_params(self, kind) -> int:
        h = self.hidden
        if mlp_kind(kind) == "dense":
            return 3 * h * self.ffn
        return self.experts * 3 * h * self.moe_ffn + self.shared_experts * 3 * h * self.moe_ffn + h * self.experts

    def mlp_active_params(self, kind) -> int:
        h = self.hidden
        if mlp_kind(kind) == "dense":
            return 3 * h * self.ffn
        return (self.top_k + self.shared_experts) * 3 * h * self.moe_ffn + h * self.experts

    def layer_params(self, kind) -> int:
        return self.attention_params() + self.mlp_params(kind) + 2 * self.hidden

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @property
    def params(self) -> int:
        return sum(n * self.layer_params(k) for k, n in self.layer_kinds()) + self.embedding_params() + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters a token uses (routed experts counted top_k times, not all)."""
        per = sum(n * (self.attention_params() + self.mlp_active_params(k) + 2 * self.hidden)
                  for k, n in self.layer_kinds())
        return per + self.embedding_params() + self.hidden

    def model_flops_per_token(self, seq: int) -> float:
        """Training flops per token: 6 x active non-embedding-input parameters (the LM head's matmul counts,
        the embedding lookup does not) plus attention's 12 x layers x heads x head_dim x seq (PaLM, Chowdhery et
        al. 2022, appendix B: the convention most MFU figures use)."""
        n = self.active_params - self.vocab * self.hidden * (0 if self.tied else 1)
        qk = (self.qk_nope_dim + self.qk_rope_dim) if self.mla else self.head_dim
        return 6.0 * n + 12.0 * self.layers * self.heads * qk * seq


WINDOW = "/window"


def mlp_kind(kind):
    """The MLP of a layer kind: "dense" or "moe" (``"moe/window"`` -> ``"moe"``)."""
    return kind.split("/", 1)[0]


def is_windowed(kind):
    """True when a layer kind's attention has a sliding window."""
    return kind.endswith(WINDOW)


def _windowed_layers(cfg, layers):
    """``(window, indices)`` of the layers with a sliding window, read as ``transformers`` reads them: the config's
    ``layer_types`` ("sliding_attention") when it has them; else, when ``sliding_window`` is set and
    ``use_sliding_window`` is not false, the layers from ``max_window_layers`` (Qwen2/3) or every layer (Mistral)."""
    w = _get(cfg, "sliding_window")
    if not w or _get(cfg, "use_sliding_window") is False:
        return 0, ()
    types = _get(cfg, "layer_types")
    if types is not None:
        if len(types) != layers:
            raise ValueError(f"layer_types has {len(types)} entries for {layers} layers")
        idx = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    else:
        first = int(_get(cfg, "max_window_layers", default=0) or 0)
        idx = tuple(range(first, layers))
    return (int(w), idx) if idx else (0, ())


def _get(cfg, *names, default=None):
    for n in names:
        v = cfg.get(n) if isinstance(cfg, dict) else getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def spec_from_config(cfg, name="model") -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face config (a dict or a ``transformers`` config object)."""
    h = int(_get(cfg, "hidden_size", "n_embd", "d_model"))
    heads = int(_get(cfg, "num_attention_heads", "n_head"))
    hd = _get(cfg, "head_dim")
    experts = int(_get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    moe_ffn = int(_get(cfg, "moe_intermediate_size", default=0) or 0) or (int(_get(cfg, "intermediate_size"))
                                                                          if experts else 0)
    layers = int(_get(cfg, "num_hidden_layers", "n_layer"))
    window, windowed = _windowed_layers(cfg, layers)
    return ModelSpec(
        name=name, hidden=h, layers=layers, heads=heads,
        kv_heads=int(_get(cfg, "num_key_value_heads", default=heads)), head_dim=int(hd) if hd else h // heads,
        ffn=int(_get(cfg, "intermediate_size", "n_inner", default=4 * h)), vocab=int(_get(cfg, "vocab_size")),
        tied=bool(_get(cfg, "tie_word_embeddings", default=False)), experts=experts,
        top_k=int(_get(cfg, "num_experts_per_tok", "moe_topk", default=0) or 0), moe_ffn=moe_ffn,
        shared_experts=int(_get(cfg, "n_shared_experts", default=0) or 0),
        dense_layers=int(_get(cfg, "first_k_dense_replace", default=0) or 0) if experts else 0,
        q_lora_rank=int(_get(cfg, "q_lora_rank", default=0) or 0),
        kv_lora_rank=int(_get(cfg, "kv_lora_rank", default=0) or 0),
        qk_nope_dim=int(_get(cfg, "qk_nope_head_dim", default=0) or 0),
        qk_rope_dim=int(_get(cfg, "qk_rope_head_dim", default=0) or 0),
        v_head_dim=int(_get(cfg, "v_head_dim", default=0) or 0),
        source=str(_get(cfg, "source", default="") or ""), sliding_window=window, windowed=windowed)


def load_model(model) -> ModelSpec:
    """``model``: a built-in name (see :func:`builtin_names`), a path to a config.json, a dict, a
    ``transformers`` config object, or a ModelSpec."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        key = model.strip().lower()
        if key in BUILTIN:
            return spec_from_config(BUILTIN[key], name=key)
        if os.path.exists(model):
            with open(model, encoding="utf-8") as f:
                cfg = json.load(f)
            return spec_from_config(cfg, name=os.path.splitext(os.path.basename(model))[0])
        raise ValueError(f"model {model!r}: not a built-in ({', '.join(builtin_names())}) and no such config "
                         f"file")
    if isinstance(model, dict):
        return spec_from_config(model, name=str(model.get("_name_or_path") or model.get("model_type") or "model"))
    if hasattr(model, "to_dict") or hasattr(model, "hidden_size"):
        return spec_from_config(model, name=str(getattr(model, "model_type", "model")))
    raise TypeError(f"model {model!r}: expected a built-in name, a config path, a dict or a transformers config")


def human(n: float) -> str:
    for unit, k in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= k:
            return f"{n / k:.{1 if n / k < 100 else 0}f}{unit}"
    return f"{n:.0f}"

