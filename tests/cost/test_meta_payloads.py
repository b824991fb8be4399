"""Shape-only tensors with plain ``meta`` payloads (``shape_only.meta_payloads``), the estimator's decoder-template
layers' eager runs: the same costs as the fake-tensor payloads (the reference) for every layer type, and the two
places where the device treats a meta payload on its own (``device=`` arguments, the attention kernel choice)."""

import dataclasses

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from trnsim import config
from trnsim.backend import shape_only
from trnsim.cost import estimator as E
from trnsim.cost import step
from trnsim.cost.models import ModelSpec

GQA = ModelSpec(name="tiny-meta-gqa", hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32, ffn=512, vocab=2048)
MOE = ModelSpec(name="tiny-meta-moe", hidden=256, layers=2, heads=8, kv_heads=8, head_dim=32, ffn=512, vocab=2048,
                experts=8, top_k=2, moe_ffn=128, shared_experts=1)
MLA = ModelSpec(name="tiny-meta-mla", hidden=256, layers=2, heads=8, kv_heads=8, head_dim=32, ffn=512, vocab=2048,
                q_lora_rank=96, kv_lora_rank=64, qk_nope_dim=32, qk_rope_dim=16, v_head_dim=32)


@pytest.fixture(autouse=True)
def _neuron_device():
    from trnsim import backend
    backend.register()


def _equal(a, b):
    """Field by field; floats up to the rounding of the device clock's absolute time in a layer's differences
    (fwd/bwd are differences of the clock, which the two runs start at different values)."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x == (pytest.approx(y, rel=1e-12) if isinstance(y, float) else y), f.name


def _both(what, spec, **kw):
    """The run of ``what`` with fake payloads and with meta payloads, and the payload types the meta run made."""
    key, job = step._key_job(what, spec, **kw)
    args = job()[:6]
    made = []
    orig = shape_only._empty

    def spy(shape, dtype):
        t = orig(shape, dtype)
        made.append(type(t) is torch.Tensor and t.is_meta)
        return t
    fake = step._run(*args, meta=False)
    shape_only._empty = spy
    try:
        meta = step._run(*args, meta=True)
    finally:
        shape_only._empty = orig
    return fake, meta, made


CASES = [
    ("gqa tp1 mb1", GQA, "dense", dict(tp=1, micro_batch=1)),
    ("gqa tp2 sequence parallel mb2", GQA, "dense", dict(tp=2, micro_batch=2, sp=True)),
    ("gqa fp8", GQA, "dense", dict(tp=2, micro_batch=1, precision="fp8")),
    ("moe ep2", MOE, "moe", dict(tp=1, ep=2, micro_batch=1)),
    ("mla tp2", MLA, "dense", dict(tp=2, micro_batch=1, sp=True)),
]


@pytest.mark.parametrize("label, spec, kind, kw", CASES, ids=[c[0] for c in CASES])
def test_a_template_layer_and_head_cost_the_same_with_meta_and_fake_payloads(label, spec, kind, kw):
    common = dict(seq=128, dtype=torch.bfloat16, target="trn2", **kw)
    fake, meta, made = _both("layer", spec, kind=kind, **common)
    _equal(meta, fake)
    assert made and all(made)            # every shape-only tensor of the meta run had a plain meta payload
    head_kw = {k: v for k, v in common.items() if k != "ep"}
    fake, meta, made = _both("head", spec, **head_kw)
    _equal(meta, fake)
    assert made and all(made)
    assert fake.launches > 0 and fake.tensor_ns > 0      # a real run was compared, not an empty one


def test_template_jobs_use_meta_payloads_eagerly_as_the_switch_says_and_compiled_runs_keep_fake_ones():
    kw = dict(tp=1, micro_batch=1, seq=128, target="trn2")
    assert step._key_job("layer", GQA, **kw)[1]()[6] is True             # default on
    with config.override(shape_only_meta=False):
        assert step._key_job("layer", GQA, **kw)[1]()[6] is False
        assert step._key_job("head", GQA, **kw)[1]()[6] is False
    seen = []
    orig = shape_only._empty
    try:
        shape_only._empty = lambda s, d: seen.append(shape_only._META[0]) or orig(s, d)
        key, job = step._key_job("layer", GQA, compiled=True, **kw)
        step._run(*job())
    finally:
        shape_only._empty = orig
    assert seen and not any(seen)


def test_an_estimate_is_the_same_with_meta_and_fake_payloads():
    def run(on):
        step._MEMO.clear()
        with config.override(shape_only_meta=on):
            return E.estimate(GQA, "trn2.48xlarge", tp=4, seq=128, global_batch=64)
    a, b = run(True).to_json(), run(False).to_json()
    assert a.keys() == b.keys()
    def close(v):
        # floats (and dicts of them: the breakdown, memory) to rounding: the two runs may add the same charges in
        # another order
        if isinstance(v, float) or (isinstance(v, dict) and v and all(isinstance(x, float) for x in v.values())):
            return pytest.approx(v, rel=1e-12)
        return v
    for k in a:
        assert a[k] == close(b[k]), k
    step._MEMO.clear()


def test_device_arguments_of_ops_on_meta_payloads_stay_on_the_meta_device():
    with shape_only.meta_payloads():
        x = shape_only.shape_only_tensor((4, 8), torch.bfloat16)
    assert type(x._p) is torch.Tensor and x._p.is_meta and shape_only.is_shape_only(x)
    y = torch.zeros_like(x, device=x.device)
    z = x.new_empty((3, 5), device="neuron")
    assert y.device.type == "neuron" and y._p.is_meta and tuple(y.shape) == (4, 8)
    assert z._p.is_meta and tuple(z.shape) == (3, 5) and shape_only.is_shape_only(z)
    real = torch.ones(2, device="neuron")            # no shape-only argument: a real tensor, as before
    assert not real._p.is_meta and not shape_only.is_shape_only(real) and real.sum().item() == 2.0
    fake = shape_only.shape_only_tensor((4, 8), torch.bfloat16)
    assert isinstance(fake._p, FakeTensor) and shape_only.is_shape_only(fake)
    assert not shape_only._META[0]                   # the block ended


def test_the_attention_kernel_choice_of_a_meta_payload_is_the_one_of_real_tensors():
    shape = (1, 4, 64, 32)
    with shape_only.meta_payloads():
        qkv_meta = [shape_only.shape_only_tensor(shape, torch.bfloat16) for _ in range(3)]
    qkv_fake = [shape_only.shape_only_tensor(shape, torch.bfloat16) for _ in range(3)]
    real = [torch.zeros(shape, dtype=torch.bfloat16) for _ in range(3)]
    choice = torch.ops.aten._fused_sdp_choice.default
    want = choice(*real, None, 0.0, True)
    assert choice(*qkv_meta, None, 0.0, True) == want == choice(*qkv_fake, None, 0.0, True)
    # the meta device's own answer differs (the math path): the device's rule is what keeps the flash kernel
    assert choice(*[torch.empty(shape, dtype=torch.bfloat16, device="meta")] * 3, None, 0.0, True) != want



@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_an_eager_optimizer_step_costs_the_same_with_meta_and_fake_payloads(name):
    from trnsim.targets import get_target
    tg = get_target("trn2")
    made = []
    orig = shape_only._empty

    def run(on):
        E._OPT.clear()
        with config.override(shape_only_meta=on):
            return E.optimizer_s(1_000_003, tg, name)
    fake = run(False)
    shape_only._empty = lambda s, d: made.append(shape_only._META[0]) or orig(s, d)
    try:
        meta = run(True)
    finally:
        shape_only._empty = orig
        E._OPT.clear()
    assert made and all(made) and fake > 0
    assert meta == pytest.approx(fake, rel=1e-12)
