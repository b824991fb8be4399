"""A model of your own for ``trnsim estimate --model examples/estimate_factory.py:make_model``.

``make_model()`` returns the module and its input spec (see docs/guides/estimating-cost.md, "A model as Python
code"): every forward keyword with its shape ("batch" is the micro-batch) and dtype, and the tokens of one sample.
trnsim builds the module on the ``meta`` device and runs it shape-only; it never allocates its weights.
"""

import torch
import torch.nn.functional as F
from torch import nn

SEQ = 256          # tokens per sample
VOCAB = 32000


class TinyLM(nn.Module):
    """A small post-norm transformer encoder over token ids with a masked-token loss."""

    def __init__(self, d=768, layers=12, heads=12):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.zeros(SEQ, d))
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, tokens, targets):
        h = self.encoder(self.embed(tokens) + self.pos)
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, VOCAB).float(), targets.reshape(-1))


def make_model():
    spec = {"inputs": {"tokens": (["batch", SEQ], "int64"), "targets": (["batch", SEQ], "int64")},
            "tokens": SEQ}
    return TinyLM(), spec
