"""Functional collectives between simulated ranks in one process: each takes one NumPy array per rank and returns
one per rank.  Reductions accumulate in float64 (float inputs) or int64 and round once to the input dtype, in rank
order, so a result does not depend on the algorithm that would move it; the time of moving it comes from
:func:`trnsim.collectives.collective_time`.

Every function checks that the ranks agree (same shapes and dtypes) and raises :class:`CollectiveMismatch` naming
the ranks that differ."""

from __future__ import annotations

import numpy as np

__all__ = ["CollectiveMismatch", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
           "permute", "REDUCE_OPS"]


class CollectiveMismatch(ValueError):
    """Ranks of one collective disagree on shapes, dtypes or sizes."""


REDUCE_OPS = {
    "sum": np.add, "add": np.add, "prod": np.multiply, "mul": np.multiply, "max": np.maximum,
    "maximum": np.maximum, "min": np.minimum, "minimum": np.minimum,
}


def _check(name, arrays, what="input"):
    if not arrays:
        raise CollectiveMismatch(f"{name}: no ranks given")
    arrays = [np.asarray(a) for a in arrays]
    ref = arrays[0]
    bad = [i for i, a in enumerate(arrays) if a.shape != ref.shape or a.dtype != ref.dtype]
    if bad:
        desc = ", ".join(f"rank {i}: {arrays[i].shape} {arrays[i].dtype}" for i in [0] + bad)
        raise CollectiveMismatch(f"{name}: ranks {bad} disagree with rank 0 on the {what} ({desc})")
    return arrays


def _reduce(arrays, op):
    try:
        f = REDUCE_OPS[str(op).lower()]
    except KeyError:
        raise ValueError(f"unknown reduction {op!r}: expected one of {', '.join(REDUCE_OPS)}") from None
    dt = arrays[0].dtype
    wide = {"i": np.int64, "u": np.uint64, "b": np.bool_}.get(dt.kind, np.float64)   # floats (and ml_dtypes)
    acc = arrays[0].astype(wide)
    for a in arrays[1:]:
        acc = f(acc, a.astype(acc.dtype))
    return acc.astype(dt)


def all_reduce(arrays, op="sum"):
    arrays = _check("all_reduce", arrays)
    out = _reduce(arrays, op)
    return [out.copy() for _ in arrays]


def all_gather(arrays, axis=0):
    arrays = _check("all_gather", arrays)
    out = np.concatenate(arrays, axis=axis)
    return [out.copy() for _ in arrays]


def reduce_scatter(arrays, op="sum", axis=0):
    arrays = _check("reduce_scatter", arrays)
    n = len(arrays)
    if arrays[0].shape[axis] % n:
        raise CollectiveMismatch(f"reduce_scatter: axis {axis} of size {arrays[0].shape[axis]} does not split "
                                 f"into {n} equal parts")
    total = _reduce(arrays, op)
    return [p.copy() for p in np.split(total, n, axis=axis)]


def all_to_all(arrays, axis=0):
    """Rank r's i-th slice along ``axis`` goes to rank i, landing as its r-th slice."""
    arrays = _check("all_to_all", arrays)
    n = len(arrays)
    if arrays[0].shape[axis] % n:
        raise CollectiveMismatch(f"all_to_all: axis {axis} of size {arrays[0].shape[axis]} does not split into "
                                 f"{n} equal parts")
    parts = [np.split(a, n, axis=axis) for a in arrays]
    return [np.concatenate([parts[r][i] for r in range(n)], axis=axis) for i in range(n)]


def broadcast(arrays, root=0):
    arrays = _check("broadcast", arrays)
    if not 0 <= root < len(arrays):
        raise ValueError(f"broadcast root {root} is not a rank (0..{len(arrays) - 1})")
    return [arrays[root].copy() for _ in arrays]


def permute(arrays, pairs):
    """``pairs`` = [(src, dst), ...]: rank dst receives src's array; a rank no pair sends to gets zeros."""
    arrays = _check("permute", arrays)
    n = len(arrays)
    seen = set()
    out = [np.zeros_like(arrays[0]) for _ in arrays]
    for s, d in pairs:
        if not (0 <= s < n and 0 <= d < n):
            raise ValueError(f"permute pair ({s}, {d}) names a rank outside 0..{n - 1}")
        if d in seen:
            raise ValueError(f"permute: rank {d} receives twice")
        seen.add(d)
        out[d] = arrays[s].copy()
    return out
