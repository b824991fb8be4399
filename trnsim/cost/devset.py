"""The estimator's development rows (issue 30): AWS's published trn1 training throughput of BERT-Large phase-1
pre-training (3 rows) and ViT-Base fine-tuning (1 row), each estimated by :func:`trnsim.cost.estimate` from the
model's own ``transformers`` code, with the published figure and the error.

    python -m trnsim.cost.devset                  # print the table (Markdown): eager and compiled estimates
    python -m trnsim.cost.devset --write FILE     # replace the generated section of FILE
    python -m trnsim.cost.devset --check FILE     # exit 1 when FILE's section differs from the model
    python -m trnsim.cost.devset --layer-ops      # one BERT-Large block, op by op (time, TFLOP/s)

These rows are for finding mechanisms that are missing or wrong; no constant of the model is set from them.  The
decoder rows of the same tables and every other published throughput are held out (not looked at here).
Needs ``transformers`` (the models are built from their configs).
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["ROWS", "SOURCE", "bert_large", "vit_base", "rows", "markdown", "layer_ops", "main"]

# Published figures: aws-neuron-sdk about-neuron/benchmarks/trn1/training_data_encoder.csv and
# training_data_vision_transformers.csv (the data of "Trn1/Trn1n Training Performance", Neuron documentation,
# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/benchmarks/trn1/trn1-training-performance.html),
# snapshot retrieved 2026-12-05: Neuron 2.28.0 (BERT) and 2.25.0 (ViT); "[32xNC(DP)]" per node.
SOURCE = ("aws-neuron-sdk about-neuron/benchmarks/trn1/training_data_encoder.csv and "
          "training_data_vision_transformers.csv (Neuron 'Trn1/Trn1n Training Performance'), retrieved 2026-12-05")

# (label, model, nodes of trn1.32xlarge, csv data type, precision here, micro-batch, global batch, optimizer,
#  sequence, published seq/s)
ROWS = [
    ("BERT-Large ph1 pre-training, 16 nodes, Autocast BF16+SR, Lamb", "bert-large", 16, "Autocast:BF16+SR",
     "autocast", 16, 1048576, "lamb", 128, 57407.9207),
    ("BERT-Large ph1 pre-training, 16 nodes, FP32, Lamb", "bert-large", 16, "FP32", "fp32", 8, 1048576, "lamb",
     128, 32362.6714),
    ("BERT-Large ph1 pre-training, 1 node, Autocast BF16+SR, AdamW", "bert-large", 1, "Autocast:BF16+SR",
     "autocast", 16, 16384, "adamw", 128, 3826.6103),
    # the ViT notebook (aws-neuron-samples torch-neuronx/training/hf_image_classification/vit.ipynb) runs with
    # XLA_USE_BF16=1: every fp32 tensor held as bf16, i.e. bf16 weights and activations ("bf16" here)
    ("ViT-Base fine-tuning, 1 node, BF16, AdamW", "vit-base", 1, "BF16", "bf16", 64, 2048, "adamw", None, 6587.25),
]


def bert_large():
    """BERT-Large (uncased) as the pre-training tutorial builds it: ``BertForPreTraining`` (masked LM and next
    sentence heads) from bert-large-uncased's config (huggingface.co/bert-large-uncased/blob/main/config.json:
    hidden 1024, 24 layers, 16 heads, intermediate 4096, vocabulary 30522, 512 positions, 2 token types, dropout
    0.1; the rest are BertConfig's defaults, equal to that file's)."""
    from transformers import BertConfig
    return BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                      vocab_size=30522, max_position_embeddings=512, type_vocab_size=2,
                      architectures=["BertForPreTraining"])


def vit_base():
    """ViT-Base/16 at 224x224 as the fine-tuning notebook runs it: google/vit-base-patch16-224-in21k (hidden
    768, 12 layers, 12 heads, intermediate 3072, patch 16, image 224: ViTConfig's defaults) with a 10-class
    head (its dataset is cifar10, 10 classes), ``ViTForImageClassification``."""
    from transformers import ViTConfig
    return ViTConfig(num_labels=10, architectures=["ViTForImageClassification"])


_MODELS = {"bert-large": bert_large, "vit-base": vit_base}


def rows(log=None, compiled=False):
    """``[(row, estimate, wall seconds)]`` for every row of :data:`ROWS`; ``compiled``: the model runs through
    ``torch.compile(backend="neuron")`` (as the published runs are XLA-compiled graphs)."""
    from .estimator import estimate
    out = []
    for r in ROWS:
        label, model, nodes, _, precision, mb, gb, opt, seq, _pub = r
        t0 = time.perf_counter()
        e = estimate(_MODELS[model](), "trn1.32xlarge", nodes, micro_batch=mb, global_batch=gb, seq=seq,
                     precision=precision, optimizer=opt, fsdp=False, compiled=compiled)
        out.append((r, e, time.perf_counter() - t0))
        if log:
            log(f"{label}{' (compiled)' if compiled else ''}: {e.samples_per_s:,.0f} seq/s "
                f"({time.perf_counter() - t0:.1f} s)")
    return out


def layer_ops(micro_batch=16, seq=128, precision="autocast", target="trn1") -> str:
    """A Markdown table of one BERT-Large encoder block's forward and backward on the shape-only device, as the
    development rows run it: per (phase, op, shapes) the simulated time and, for the matmul family, the achieved
    TFLOP/s against the Tensor Engine's bf16 peak; then the totals by kind (matmul, attention, other)."""
    import collections

    import torch
    from transformers.models.bert.modeling_bert import BertLayer

    from ..backend.device_state import STATE
    from ..backend.profiler import profile_torch
    from ..backend.shape_only import device_target, materialize_shape_only, shape_only_tensor
    from ..targets import get_target
    from .anymodel import PRECISIONS, flash_attention
    tg = get_target(target)
    cfg = bert_large()
    cfg._attn_implementation = "sdpa"
    dtype, autocast, _ = PRECISIONS[precision]
    with device_target(tg), torch.device("meta"):
        m = BertLayer(cfg).to(dtype)
    materialize_shape_only(m)
    with device_target(tg), profile_torch() as prof:
        x = shape_only_tensor((micro_batch, seq, cfg.hidden_size), dtype, requires_grad=True)
        t0 = STATE.now_ns
        with flash_attention(), torch.autocast("neuron", dtype=torch.bfloat16, enabled=autocast):
            y = m(x)
        y = y[0] if isinstance(y, tuple) else y
        loss = y.float().sum()
        t1 = STATE.now_ns
        loss.backward()
        t2 = STATE.now_ns
    agg = collections.OrderedDict()
    for r in prof.rows:
        if r.duration_ns <= 0:
            continue
        op = r.op.replace("aten::", "").replace("_scaled_dot_product_flash_attention_for_cpu", "sdpa")
        kind = "matmul" if op in ("mm", "addmm", "bmm", "baddbmm") else "attention" if op.startswith("sdpa") \
            else "other"
        key = ("forward" if r.start_ns < t1 else "backward", op, r.shapes[-2:] if kind == "matmul" else r.shapes[:1],
               kind)
        n, ns, fl = agg.get(key, (0, 0.0, 0.0))
        agg[key] = (n + 1, ns + r.duration_ns, fl + r.flops)
    peak = tg.tensor_bf16_flops_per_core
    lines = [f"One BERT-Large block, {precision}, micro-batch {micro_batch}, sequence {seq}, {tg.name}: forward "
             f"{(t1 - t0) / 1e3:,.0f} us, backward {(t2 - t1) / 1e3:,.0f} us.", "",
             "| phase | op | shapes | count | us | TFLOP/s | of the PE peak |", "|---|---|---|---:|---:|---:|---:|"]
    by = collections.Counter()
    for (ph, op, sh, kind), (n, ns, fl) in agg.items():
        by[kind] += ns
        tf = f"{fl / ns / 1e3:.1f} | {100 * fl / ns * 1e9 / peak:.0f}%" if kind != "other" else "|"
        lines.append(f"| {ph} | {op} | {'; '.join(str(list(x)) for x in sh)} | {n} | {ns / 1e3:,.0f} | {tf} |")
    tot = sum(by.values()) or 1.0
    lines += ["", "Totals: " + ", ".join(f"{k} {v / 1e3:,.0f} us ({100 * v / tot:.0f}%)" for k, v in by.items())]
    return "\n".join(lines)


BEGIN = "<!-- development rows: generated by `python -m trnsim.cost.devset --write " \
        "docs/guides/estimating-cost.md`; do not edit by hand -->"
END = "<!-- end of generated development rows -->"


def markdown(results=None, compiled_results=None) -> str:
    """The generated section: per row the eager estimate and, when given, the compiled one (``compiled_results``,
    the same rows run through ``torch.compile(backend="neuron")``)."""
    results = results if results is not None else rows()
    comp = compiled_results or [None] * len(results)
    head = "| row | trn1.32xlarge | precision (here) | micro / global batch | optimizer | published seq/s | " \
        "estimated seq/s eager | error eager |"
    rule = "|---|---:|---|---:|---|---:|---:|---:|"
    if compiled_results:
        head += " estimated seq/s compiled | error compiled |"
        rule += "---:|---:|"
    lines = [BEGIN, "", head + " estimate's largest part |", rule + "---|"]
    for (r, e, _), ce in zip(results, comp):
        label, model, nodes, dtype, precision, mb, gb, opt, seq, pub = r
        show = ce[1] if ce else e
        top = max(show.breakdown.items(), key=lambda kv: kv[1])
        cols = f"{e.samples_per_s:,.0f} | {(e.samples_per_s - pub) / pub:+.0%} |"
        if ce:
            cols += f" {ce[1].samples_per_s:,.0f} | {(ce[1].samples_per_s - pub) / pub:+.0%} |"
        lines.append(f"| {label.split(',')[0]} | {nodes} | {dtype} ({precision}) | {mb} / {gb:,} | {opt} | "
                     f"{pub:,.0f} | {cols} {top[0]} {100 * top[1] / show.step_time_s:.0f}% |")
    lines += ["", f"Published: {SOURCE}. Error = (estimated - published) / published. Data parallel over all "
                  "32 NeuronCores of each node (DDP, as published), gradient accumulation to the global batch, "
                  "sequence 128 (BERT) and 224x224 images (ViT)."]
    if compiled_results:
        lines += ["", "The published runs are XLA-compiled graphs (torch-neuronx), so the compiled column is the "
                      "comparable one; the eager column is the same model op by op. The largest part is the "
                      "compiled estimate's."]
    lines += ["", END]
    return "\n".join(lines)


def replace_section(text: str, new: str) -> str:
    from ..fileio import replace_marked_section
    return replace_marked_section(text, new, BEGIN, END)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trnsim.cost.devset", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="FILE", help="replace FILE's generated section")
    g.add_argument("--check", metavar="FILE", help="exit 1 when FILE's generated section is stale")
    g.add_argument("--layer-ops", action="store_true",
                   help="print where one BERT-Large block's time goes, op by op (trn1, autocast, micro-batch 16)")
    p.add_argument("--eager-only", dest="compile", action="store_false",
                   help="estimate the rows eagerly only (default: eager and compiled)")
    a = p.parse_args(argv)
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("trnsim.cost.devset: error: needs the transformers package", file=sys.stderr)
        return 2
    if a.layer_ops:
        print(layer_ops())
        return 0
    log = (lambda s: print(s, file=sys.stderr))
    res = rows(log=log)
    cres = rows(log=log, compiled=True) if a.compile else None
    new = markdown(res, cres)
    if not (a.write or a.check):
        print(new)
        return 0
    from ..fileio import update_generated_section
    return update_generated_section(a.write or a.check, new, replace_section, check=bool(a.check),
                                    prog="trnsim.cost.devset", what="development rows")


if __name__ == "__main__":
    sys.exit(main())
