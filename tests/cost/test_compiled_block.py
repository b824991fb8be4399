"""A compiled BERT-like block (transformers' BertLayer, shape-only, autocast bf16, dropout 0.1, attention as the
fused kernel) is charged no more than the same block run eagerly, and its attention is the eager attention kernel."""

import pytest
import torch

transformers = pytest.importorskip("transformers")


def _cost(compiled):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer

    from trnsim.backend.shape_only import shape_only_tensor
    from trnsim.cost.anymodel import flash_attention
    from trnsim.cost.step import _run
    from trnsim.targets import get_target
    cfg = BertConfig(hidden_size=256, num_attention_heads=4, intermediate_size=1024, num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"

    def loss_fn(m, x):
        with flash_attention(), torch.autocast("neuron", dtype=torch.bfloat16):
            y = m(x)
        y = y[0] if isinstance(y, tuple) else y
        return y.float().sum()
    return _run(lambda: BertLayer(cfg), lambda: (shape_only_tensor((4, 128, 256), torch.float32,
                                                                    requires_grad=True),),
                get_target("trn1"), loss_fn, "autocast", compiled)


def test_compiled_block_is_not_slower_than_eager():
    eager = _cost(False)
    comp = _cost(True)
    assert comp.graphs == 2                       # one forward and one backward graph
    assert comp.launches < eager.launches
    assert comp.fwd_ns <= eager.fwd_ns
    assert comp.bwd_ns <= eager.bwd_ns
    assert comp.fwd_ns + comp.bwd_ns < eager.fwd_ns + eager.bwd_ns
