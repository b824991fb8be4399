"""The fast paths of view creation give what the general paths give: ``Tensor.__getitem__`` with a plain slice
per dimension (compared with the same key plus an Ellipsis, which takes the general path), ``Tensor.whole``'s
cached strides, and ``Buffer``'s cached shape normalisation."""

import random

import numpy as np
import pytest

from trnsim.memory import Tensor
from trnsim.memory.dtypes import DTYPES
from trnsim.memory.space import Buffer, MemorySpace


def _res(fn):
    try:
        t = fn()
        return (t.offset, t.shape, t.strides)
    except Exception as e:       # the same error, same message, either way
        return (type(e), str(e))


def test_plain_slices_match_the_general_path():
    sp = MemorySpace("hbm", 1 << 30)
    rng = random.Random(0)
    bounds = lambda: rng.choice([None, rng.randint(-3, 11), np.int64(rng.randint(0, 9)), True])  # noqa: E731
    seen_error = seen_view = 0
    for _ in range(2000):
        shape = tuple(rng.randint(1, 9) for _ in range(rng.randint(1, 3)))
        t = Tensor.whole(Buffer(sp, DTYPES["float32"], shape, execute=False))
        if rng.random() < 0.5:      # a view with an offset
            t = t[tuple(slice(rng.randint(0, s - 1), None) for s in shape) + (Ellipsis,)]
        key = tuple(slice(bounds(), bounds(), rng.choice([None, None, None, 1, 2])) for _ in t.shape)
        fast = _res(lambda: t[key])
        slow = _res(lambda: t[key + (Ellipsis,)])
        assert fast == slow, (t.shape, key)
        seen_error += isinstance(fast[0], type)
        seen_view += not isinstance(fast[0], type)
    assert seen_error > 100 and seen_view > 100     # both outcomes exercised


@pytest.mark.parametrize("shape", [(128, 64), (4, 8, 16), (7,), [3, 5], (np.int64(2), 3)])
def test_whole_and_buffer_shape(shape):
    sp = MemorySpace("hbm", 1 << 30)
    for _ in range(2):                  # second time from the caches
        b = Buffer(sp, DTYPES["float32"], shape, execute=False)
        t = Tensor.whole(b)
        dims = tuple(int(s) for s in shape)
        assert b.shape == dims and all(type(s) is int for s in b.shape)
        assert b.nelem == int(np.prod(dims))
        assert t.strides == tuple(s // 4 for s in np.zeros(dims, np.float32).strides)
        assert t.offset == 0 and t.shape == dims
