"""Models run as their own code (trnsim.cost.anymodel / anyestimate): a factory's nn.Module and transformers
configs outside the decoder templates, forward and backward on the shape-only device, data parallel only."""

import os
import textwrap
from pathlib import Path

import pytest
import torch

from trnsim.cost import anymodel as A
from trnsim.cost import estimator as E

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "estimate_factory.py"


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


FACTORY = textwrap.dedent('''
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.a = nn.Linear(d, 4 * d)
            self.b = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.b(torch.relu(self.a(x)))

    class Net(nn.Module):
        def __init__(self, d=256, n=NBLOCKS):
            super().__init__()
            self.inp = nn.Linear(64, d)
            self.blocks = nn.ModuleList(Block(d) for _ in range(n))
            self.out = nn.Linear(d, 10)

        def forward(self, x, y):
            h = self.inp(x)
            for b in self.blocks:
                h = b(h)
            return torch.nn.functional.cross_entropy(self.out(h).float(), y)

    def make_model():
        return Net(), {"inputs": {"x": (["batch", 64], "float32"), "y": (["batch"], "int64")}}
''')


def factory(tmp_path, nblocks=6, name="net"):
    p = tmp_path / f"{name}.py"
    p.write_text(FACTORY.replace("NBLOCKS", str(nblocks)))
    return f"{p}:make_model"


def test_one_block_multiplied_equals_the_whole_model_run(tmp_path):
    """The block extrapolation (base + (n-1) x block) gives what running every block gives: time, matmul flops
    and saved activations."""
    am = A.load_any(factory(tmp_path, 6))
    mc = A.model_cost(am, micro_batch=128, target="trn2")
    assert [(p, n) for p, n, _ in mc.blocks] == [("blocks", 6)]
    whole = A._run_model(am, {}, 128, None, mc_target(), "bf16")
    for f in ("fwd_ns", "bwd_ns", "tensor_ns", "flops", "saved_bytes", "launches"):
        assert getattr(mc.total, f) == pytest.approx(getattr(whole, f), rel=1e-6), f
    # the matmul flops are the model's: 3 linears forward, twice that backward (minus the input's dgrad)
    d, b = 256, 128
    fwd = 2 * b * (64 * d + 6 * 2 * d * 4 * d + d * 10)
    assert mc.total.flops == pytest.approx(fwd + 2 * fwd - 2 * b * 64 * d, rel=1e-9)
    assert mc.params == 64 * d + d + 6 * (2 * d * 4 * d + 4 * d + d) + d * 10 + 10


def mc_target():
    from trnsim.targets import get_target
    return get_target("trn2")


def test_stack_detection_needs_identical_blocks_after_the_first():
    from torch import nn
    same = nn.Module()
    same.layers = nn.ModuleList([nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 8)])   # first may differ
    mixed = nn.Module()
    mixed.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)])
    assert A.find_stacks(same) == [("layers", 3)]
    assert A.find_stacks(mixed) == []


def test_factory_estimate_is_data_parallel_and_adds_up(tmp_path):
    ref = factory(tmp_path)
    e = E.estimate(ref, "trn2.48xlarge", 1, micro_batch=64, fsdp=False)
    assert e.parallelism.dp == e.ranks == 64 and e.parallelism.tp == 1
    assert e.global_batch == E.default_global_batch(64, [64]) == 4 * 64 * 64
    assert sum(e.breakdown.values()) == pytest.approx(e.step_time_s, rel=1e-9)
    am = A.load_any(ref)
    mc = A.model_cost(am, micro_batch=64, target="trn2")
    mbs = e.global_batch // (64 * 64)
    split = 0.5                                  # trn2 LNC=2: an op splits over two physical cores
    compute = mbs * (mc.total.fwd_ns + mc.total.bwd_ns) * split * 1e-9
    opt = E.optimizer_s(mc.params, mc_target(), "adamw") * split
    ar = E._coll("all_reduce", mc.params * 2, E._topology("trn2.48xlarge", 1, 2), tuple(range(64)))
    exposed = max(0.0, ar - mc.total.bwd_ns * split * 1e-9)
    # micro-batches after the first add their bf16 gradients into the accumulated ones: one elementwise add each
    from trnsim.backend import costs
    add = costs.launch_ns(mc_target()) + costs.elementwise_cost(mc_target(), mc.params, "bfloat16", "binary")[0]
    acc = (mbs - 1) * add * 1e-9 * split
    assert mbs == 4 and e.breakdown["gradient accumulation"] == pytest.approx(acc, rel=1e-9)
    assert e.step_time_s == pytest.approx(compute + opt + exposed + acc, rel=1e-9)
    assert e.samples_per_s == pytest.approx(e.global_batch / e.step_time_s)


@pytest.mark.parametrize("flag", ["tp", "pp", "cp", "ep"])
def test_model_parallelism_on_a_factory_names_the_limit(tmp_path, flag):
    with pytest.raises(ValueError, match=f"--{flag} 4: .*only data parallelism"):
        E.estimate(factory(tmp_path), "trn2.48xlarge", 1, **{flag: 4})


def test_bad_factories_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        A.load_any(str(tmp_path / "missing.py") + ":make_model")
    p = tmp_path / "bad.py"
    p.write_text("import torch\ndef make_model():\n    return torch.nn.Linear(2, 2), {'inputs': {'x': ([2, 'b'], "
                 "'float32')}}\ndef other():\n    return 3\n")
    with pytest.raises(ValueError, match="shape entry 'b'"):
        A.load_any(f"{p}:make_model")
    with pytest.raises(ValueError, match=r"returned int, expected \(nn.Module, input spec\)"):
        A.load_any(f"{p}:other")
    with pytest.raises(ValueError, match="has no function 'nope'"):
        A.load_any(f"{p}:nope")


def test_lamb_costs_more_memory_traffic_than_adamw():
    tg = mc_target()
    n = 1 << 24
    adamw, lamb = E.optimizer_s(n, tg, "adamw"), E.optimizer_s(n, tg, "lamb")
    assert lamb > adamw > 0
    # both scale with the parameters (memory traffic per parameter), not a fixed cost
    assert E.optimizer_s(2 * n, tg, "lamb") == pytest.approx(2 * lamb, rel=0.05)
    with pytest.raises(ValueError, match="optimizer 'sgd'"):
        E.optimizer_s(n, tg, "sgd")


def test_default_global_batch_is_the_same_for_every_search_candidate(tmp_path):
    from trnsim.cost.search import search, search_global_batch
    gb = search_global_batch("trn2.48xlarge", [1], [1, 2])
    assert gb == 4 * 64 * 2
    res, front, rejected = search(factory(tmp_path), "trn2.48xlarge", micro_batches=[1, 2])
    assert {e.global_batch for e in res} == {gb} and len(res) == 2


try:
    import transformers
except ImportError:             # the transformers tests skip; the factory tests above still run
    transformers = None
needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers is not installed")


def tiny_bert():
    return transformers.BertConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                   intermediate_size=128, vocab_size=512, max_position_embeddings=128)


@needs_transformers
def test_bert_config_runs_its_own_code_not_the_decoder_template():
    cfg = tiny_bert()
    assert not E.is_template(cfg) and not E.is_template(cfg.to_dict())
    e = E.estimate(cfg, "trn1.32xlarge", 1, micro_batch=2, seq=64, precision="autocast")
    assert "BertForPreTraining" in e.notes[0] and "bert.encoder.layer: 3 blocks" in e.notes[0]
    assert e.seq == 64 and e.memory["weights (fp32)"] > 0
    with pytest.raises(ValueError, match="128 positions"):
        E.estimate(cfg, "trn1.32xlarge", 1, seq=256)
    with pytest.raises(ValueError, match="--tp 2"):
        E.estimate(cfg, "trn1.32xlarge", 1, tp=2, seq=64)


@needs_transformers
def test_vit_config_without_vocab_is_estimated_as_a_vision_model():
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                 image_size=64, patch_size=16, num_labels=10)
    e = E.estimate(cfg, "trn1.32xlarge", 1, micro_batch=4, fsdp=False)
    assert e.seq == (64 // 16) ** 2 + 1           # patches plus the class token
    assert "ViTForImageClassification" in e.notes[0]


@needs_transformers
def test_t5_has_two_stacks_and_both_are_multiplied():
    cfg = transformers.T5Config(d_model=64, d_ff=128, num_layers=3, num_decoder_layers=2, num_heads=4, d_kv=16,
                                vocab_size=256)
    am = A.load_any(cfg)
    mc = A.model_cost(am, micro_batch=2, seq=32, target="trn1")
    assert sorted((p, n) for p, n, _ in mc.blocks) == [("decoder.block", 2), ("encoder.block", 3)]
    whole = A._run_model(am, {}, 2, 32, mc_target_trn1(), "bf16")
    assert mc.total.flops == pytest.approx(whole.flops, rel=1e-6)
    assert mc.total.fwd_ns + mc.total.bwd_ns == pytest.approx(whole.fwd_ns + whole.bwd_ns, rel=1e-3)


def mc_target_trn1():
    from trnsim.targets import get_target
    return get_target("trn1")


@needs_transformers
def test_fp32_matmuls_are_priced_as_the_compilers_bf16_autocast():
    """precision fp32: under neuronx-cc's default (--auto-cast none since Neuron 2.27) the run's fp32 matmuls cost
    the fp32 kernel; with --auto-cast matmult the matmul kernel with fp32 operands in HBM cast to bf16 by the
    loading DMAs, between the bf16 kernel (half the bytes read) and the fp32 kernel (4x the Tensor Engine passes)."""
    from trnsim import config
    from trnsim.backend import costs
    from trnsim.cost.step import fp32_matmul_ns
    tg = mc_target_trn1()
    with config.override(neuron_cc_flags=""):
        mm, cast = fp32_matmul_ns(tg, 512, 1024, 1024)
    assert cast == 0.0
    assert mm == costs.matmul_cost(tg, 512, 1024, 1024, "float32")[0]
    with config.override(neuron_cc_flags="--auto-cast matmult"):
        mm = fp32_matmul_ns(tg, 512, 1024, 1024)[0]
    assert mm == costs.matmul_cost(tg, 512, 1024, 1024, "float32", operand_dtype="bfloat16")[0]
    assert costs.matmul_cost(tg, 512, 1024, 1024, "bfloat16")[0] < mm < \
        costs.matmul_cost(tg, 512, 1024, 1024, "float32")[0]
    cfg = tiny_bert()
    fp32 = A.model_cost(A.load_any(cfg), micro_batch=2, seq=64, target="trn1", precision="fp32")
    assert fp32.total.flops > 0 and fp32.total.tensor_ns > 0


@needs_transformers
def test_factory_model_compiled(capsys):
    """--compile for a model run as its own code: the model runs through torch.compile (its graphs counted, the
    compile time priced) and the compiled step is not slower than the eager one."""
    from trnsim.cost.cli import main
    from trnsim.cost.estimator import estimate
    kw = dict(micro_batch=2, dp=64)
    eager = estimate(str(EXAMPLE) + ":make_model", "trn2.48xlarge", 1, **kw)
    comp = estimate(str(EXAMPLE) + ":make_model", "trn2.48xlarge", 1, compiled=True, **kw)
    assert comp.compiled and not eager.compiled
    assert comp.compile_s > 0 and eager.compile_s == 0
    assert comp.step_time_s <= eager.step_time_s
    assert main(["--model", str(EXAMPLE) + ":make_model", "--instance", "trn2.48xlarge", "--micro-batch", "2",
                 "--dp", "64", "--compile"]) == 0
    assert "compiled" in capsys.readouterr().out


def test_cli_factory(tmp_path, capsys):
    import json
    from trnsim.cost.cli import main
    assert main(["--model", str(EXAMPLE) + ":make_model", "--instance", "trn2.48xlarge", "--micro-batch", "2",
                 "--dp", "64", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["parallelism"]["dp"] == 64 and d["samples_per_s"] > 0 and d["seq"] == 256
    assert main(["--model", str(EXAMPLE) + ":make_model", "--instance", "trn2.48xlarge", "--tp", "4"]) == 2
    assert "only data parallelism" in capsys.readouterr().err


@needs_transformers
def test_cli_encoder_config(tmp_path, capsys):
    from trnsim.cost.cli import main
    cfg = tmp_path / "bert.json"
    cfg.write_text(tiny_bert().to_json_string())
    assert main(["--model", str(cfg), "--instance", "trn1", "--seq", "64", "--micro-batches", "2",
                 "--precision", "autocast", "--optimizer", "lamb"]) == 0
    out = capsys.readouterr().out
    assert "BertForPreTraining" in out and "configuration chosen by the search" in out


@needs_transformers
def test_devset_guide_rows_match_the_model():
    from trnsim.cost import devset
    guide = ROOT / "docs" / "guides" / "estimating-cost.md"
    if not guide.is_file():
        pytest.skip("no docs/ in this install")
    assert devset.main(["--check", str(guide)]) == 0, \
        "stale: python -m trnsim.cost.devset --write docs/guides/estimating-cost.md"


@needs_transformers
def test_devset_published_figures_are_the_csvs():
    """The published figures written in devset.ROWS are those of the aws-neuron-sdk snapshot (when present)."""
    import csv
    from trnsim.cost import devset
    sdk = os.environ.get("AWS_NEURON_SDK_PATH")
    base = Path(sdk or "/nonexistent") / "about-neuron" / "benchmarks" / "trn1"
    if not base.is_dir():
        pytest.skip("no aws-neuron-sdk snapshot (set AWS_NEURON_SDK_PATH to a checkout of aws-neuron/aws-neuron-sdk)")
    got = []
    for name in ("training_data_encoder.csv", "training_data_vision_transformers.csv"):
        with open(base / name, encoding="utf-8") as f:
            for r in csv.DictReader(f):
                r = {k.strip(): v for k, v in r.items()}
                got.append((int(r["Nodes"]), r["Training Data-Type"], int(r["Microbatch"]), int(r["Globalbatch"]),
                            r["Optimizer"].strip().lower(), float(r["Performance [seq/sec]"])))
    mine = [(n, dt, mb, gb, opt, pub) for _, _, n, dt, _, mb, gb, opt, _, pub in devset.ROWS]
    assert sorted(mine) == sorted(got)


def test_guide_factory_block_is_the_example_file():
    guide = ROOT / "docs" / "guides" / "estimating-cost.md"
    if not guide.is_file():
        pytest.skip("no docs/ in this install")
    text = guide.read_text(encoding="utf-8")
    block = text.split("<!-- file: my_model.py -->\n```python\n", 1)[1].split("\n```", 1)[0]
    assert block + "\n" == EXAMPLE.read_text(encoding="utf-8"), \
        "docs/guides/estimating-cost.md's my_model.py block differs from examples/estimate_factory.py"


def test_a_python_factory_function_is_accepted_as_the_model():
    from torch import nn

    def make():
        m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        return m, {"inputs": {"input": (["batch", 32], "float32")}}
    assert not E.is_template(make)
    e = E.estimate(make, "trn1.32xlarge", 1, micro_batch=8, fsdp=False)
    assert e.model == "make" and e.parallelism.dp == 32 and e.step_time_s > 0
    assert "the whole model run once" in e.notes[0]
