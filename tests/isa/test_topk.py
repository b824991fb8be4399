"""nisa.topk (GpSimd): per group of 16 partitions, the K largest of n bf16 values laid out as a snake
(element s at partition s % 16, free position s // 16); numerics against a NumPy reference, rules, cost."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from trnsim import isa
from trnsim.isa import NkiValidationError
from trnsim.machine import NeuronCore
from trnsim.memory import SBUF, Tensor
from trnsim.memory.dtypes import DTYPES

LOC = ("test_topk.py", 1)


def tile(core, arr, dtype):
    arr = np.asarray(arr)
    t = Tensor.whole(core.allocate(arr.shape, DTYPES[dtype], SBUF, name="t"))
    t.np[...] = arr.astype(DTYPES[dtype].storage)
    t.buf.all_written = True
    return t


def reference(x, n, k):
    """Per 16-partition group: the snake, its top k (descending, ties by lower index), placed back in snake
    positions of a [16, ceil(k/16)] block."""
    p, f = x.shape
    vals = np.full((p, k), np.nan)
    idx = np.full((p, k), -1)
    for g in range(p // 16):
        block = x[16 * g:16 * g + 16].astype(np.float64)
        snake = np.array([block[s % 16, s // 16] for s in range(n)])
        order = sorted(range(n), key=lambda s: (-snake[s], s))[:k]
        for j, s in enumerate(order):
            vals[16 * g + j % 16, j // 16] = snake[s]
            idx[16 * g + j % 16, j // 16] = s
    return vals, idx


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([16, 32, 128]), st.integers(8, 200), st.integers(1, 40), st.integers(0, 2 ** 31))
def test_topk_matches_reference(p, n, k, seed):
    k = min(k, n)
    f = -(-n // 16) + 1
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, (p, f)).astype(np.float32)       # small integers: ties are common
    core = NeuronCore("trn2")
    src = tile(core, x.astype(ml_dtypes.bfloat16), "bfloat16")
    val = tile(core, np.full((p, k), -7.0), "bfloat16")
    ix = tile(core, np.full((p, k), 99999), "uint32")
    isa.topk(core, LOC, val, ix, src, n)
    want_v, want_i = reference(x, n, k)
    got_v, got_i = val.np.astype(np.float64), ix.np.astype(np.int64)
    written = ~np.isnan(want_v)
    np.testing.assert_array_equal(got_v[written], want_v[written])
    np.testing.assert_array_equal(got_i[written], want_i[written])
    # positions past the K results are left as they were
    assert (got_v[~written] == -7.0).all() and (got_i[~written] == 99999).all()
    # NKI reference estimate: 4 * n + K GpSimd cycles
    assert core.instructions[-1].cycles == 4 * n + k
    assert core.instructions[-1].engine == "gpsimd"


@pytest.mark.parametrize("what, kwargs, match", [
    ("partitions", dict(p=24), "multiple of 16"),
    ("n too small", dict(n=7), "n"),
    ("k above n", dict(k=20, n=16), "K = 20"),
    ("src too narrow", dict(f=2, n=64), "ceil\\(n / 16\\) = 4"),
    ("src dtype", dict(src_dtype="float32"), "bfloat16"),
    ("idx dtype", dict(idx_dtype="int32"), "uint32"),
])
def test_topk_rules(what, kwargs, match):
    p, f, n, k = kwargs.get("p", 16), kwargs.get("f", 8), kwargs.get("n", 64), kwargs.get("k", 8)
    core = NeuronCore("trn2")
    src = tile(core, np.zeros((p, f)), kwargs.get("src_dtype", "bfloat16"))
    val = tile(core, np.zeros((p, k)), "bfloat16")
    ix = tile(core, np.zeros((p, k)), kwargs.get("idx_dtype", "uint32"))
    with pytest.raises(NkiValidationError, match=match) as e:
        isa.topk(core, LOC, val, ix, src, n)
    assert "test_topk.py" in str(e.value)
