"""The loop replay's arithmetic (``loop_replay.py``): an iteration's effects split into a skeleton and its integers,
blocks of iterations fitted as equal up to integers that change by a constant from block to block, later blocks
predicted from the fit (NumPy for the integers, C loops for the objects), and the tiles of the predicted blocks
kept as one segment for the capacity check (``Occupancy.add_bulk``).  Pure functions of the observed fields: no
core state is read or changed here."""

from __future__ import annotations

import re

import numpy as np

_DIG = re.compile(r"(\d+)")


class _Same:
    """An object compared by identity inside a skeleton."""
    __slots__ = ("o",)

    def __init__(self, o):
        self.o = o

    def __eq__(self, other):
        return type(other) is _Same and other.o is self.o

    def __hash__(self):
        return id(self.o)


def _split(x, ints):
    """The skeleton of ``x`` (what must be equal between blocks) with its integers appended to ``ints``."""
    t = type(x)
    if t is int:
        ints.append(x)
        return 0
    if t is tuple:
        return (1, tuple([_split(y, ints) for y in x]))
    if t is str:
        parts = _DIG.split(x)
        if len(parts) == 1:
            return (3, x)
        sk = []
        for i, p in enumerate(parts):
            if i % 2 and str(int(p)) == p:
                ints.append(int(p))
                sk.append(None)
            else:
                sk.append(p)
        return (2, tuple(sk))
    if t is float:
        return (4, x.hex())
    if t is list:
        return (6, tuple([_split(y, ints) for y in x]))
    return (5, _Same(x))


def _gen(sk, cols, nxt, m):
    """``m`` objects of skeleton ``sk`` whose integers are the next columns of ``cols`` (lists of ``m`` ints,
    ``nxt`` yields their indices), made column-wise by C loops (zip, map, str.format)."""
    if sk == 0:
        return cols[next(nxt)]
    k = sk[0]
    if k == 1 or k == 6:
        parts = [_gen(x, cols, nxt, m) for x in sk[1]]
        if not parts:
            return [() for _ in range(m)] if k == 1 else [[] for _ in range(m)]
        return list(zip(*parts)) if k == 1 else list(map(list, zip(*parts)))
    if k == 2:
        fmt = "".join("{}" if p is None else p.replace("{", "{{").replace("}", "}}") for p in sk[1])
        return list(map(fmt.format, *[cols[next(nxt)] for p in sk[1] if p is None]))
    if k == 3:
        return [sk[1]] * m
    if k == 4:
        return [float.fromhex(sk[1])] * m
    return [sk[1].o] * m


class _Fit:
    """Blocks of ``p`` iterations, equal up to integers changing by a constant from block to block: the last
    observed block (``base``, field -> items) and per field the positions whose integers change."""

    def __init__(self, p, blocks):
        self.p = p
        self.base = blocks[-1]
        self.var = {}          # field -> [(position, skeleton, base ints, delta per block)]
        self.counts = None     # (instructions, new interned patterns, buffer ids) per block


def concat(its):
    out = {}
    for d in its:
        for f, v in d.items():
            if f == "#" or f == "hits" or f == "S":
                continue
            out.setdefault(f, []).extend(v)
    return out


def splits(d):
    """Per field of iteration ``d``: each item's skeleton and its integers (:func:`_split`), made once."""
    out = {}
    for f, items in d.items():
        if f == "#" or f == "hits":
            continue
        sks, ints = [], []
        for x in items:
            i = []
            sks.append(_split(x, i))
            ints.append(i)
        out[f] = (sks, ints)
    return out


def _concat_splits(its):
    out = {}
    for d in its:
        for f, (sks, ints) in d["S"].items():
            o = out.get(f)
            if o is None:
                out[f] = (list(sks), list(ints))
            else:
                o[0].extend(sks)
                o[1].extend(ints)
    return out


def fit_blocks(its, p, states):
    """A _Fit of the last three blocks of ``p`` iterations of ``its`` (per-iteration fields), or None.
    ``states``: the allocator state at the start of each iteration of ``its`` and after the last."""
    if len(its) < 3 * p:
        return None
    n = len(its)
    # the allocators repeat every p iterations over the three blocks
    for j in range(n - 3 * p, n - p + 1):
        if states[j] != states[j + p]:
            return None
    for j in range(n - 3 * p, n - p):
        if its[j]["#"] != its[j + p]["#"] or its[j]["hits"] != its[j + p]["hits"]:
            return None
    blocks = [concat(its[n - 3 * p + i * p: n - 3 * p + (i + 1) * p]) for i in range(3)]
    splits = [_concat_splits(its[n - 3 * p + i * p: n - 3 * p + (i + 1) * p]) for i in range(3)]
    fit = _Fit(p, blocks)
    for f, items in blocks[2].items():
        (s0, j0), (s1, j1), (s2, j2) = splits[0][f], splits[1][f], splits[2][f]
        if s0 != s2 or s1 != s2:          # (also when the lengths differ)
            return None
        var = []
        for pos in range(len(items)):
            i0, i1, i2 = j0[pos], j1[pos], j2[pos]
            if i2 == i1 == i0:
                continue
            delta = [y - z for y, z in zip(i2, i1)]
            if delta != [y - z for y, z in zip(i1, i0)]:
                return None
            if any(abs(v) > 1 << 40 for v in i2) or any(abs(v) > 1 << 30 for v in delta):
                return None
            var.append((pos, s2[pos], i2, delta))
        fit.var[f] = var
    fit.counts = its[-1]["#"] if p == 1 else tuple(sum(its[n - p + i]["#"][k] for i in range(p)) for k in range(3))
    return fit


def predict(fit, q0, m, fields=None):
    """The fields of ``m`` blocks after the base block, the first ``q0`` blocks after it (only ``fields``, when
    given)."""
    out = {}
    qs = np.arange(q0, q0 + m, dtype=np.int64)
    for f, items in fit.base.items():
        if fields is not None and f not in fields:
            continue
        L = len(items)
        res = items * m
        for pos, sk, ints, delta in fit.var.get(f, ()):
            arr = np.asarray(ints, dtype=np.int64)[None, :] + qs[:, None] * np.asarray(delta, dtype=np.int64)[None, :]
            objs = _gen(sk, arr.T.tolist(), iter(range(len(ints))), m)
            res[pos::L] = objs
        out[f] = res
    return out


_TABLES = ("rk", "rv", "tv", "pv")      # the new tiles' keys, live ranges, entries and partitions


class TileSegment:
    """The tiles made by ``m`` replayed blocks (blocks ``q0`` ..), kept as the fit that predicts them rather than
    as table entries (``Occupancy.add_bulk``): the capacity sweep reads their columns as arrays; anything else
    that needs the tables has them made (:meth:`items`, as :func:`predict` makes every field)."""

    __slots__ = ("fit", "q0", "m", "n", "at", "placed")

    def __init__(self, fit, q0, m):
        self.fit, self.q0, self.m = fit, q0, m
        self.n = m * len(fit.base["rk"])
        self.at = 0
        self.placed = any(t[3] is not None for t in fit.base["tv"])

    def items(self):
        pred = predict(self.fit, self.q0, self.m, _TABLES)
        return pred["rk"], pred["rv"], pred["tv"], pred["pv"]

    def _ints(self, f, pos, count):
        """The first ``count`` integers of item ``pos`` of field ``f`` in each block, as an ``(m, count)`` array, or
        None when they are not plain leading integers of the item."""
        base = self.fit.base[f][pos]
        qs = np.arange(self.q0, self.q0 + self.m, dtype=np.int64)[:, None]
        for p_, sk, ints, delta in self.fit.var.get(f, ()):
            if p_ == pos:
                if type(sk) is int:                      # the item is an integer itself
                    if count != 1:
                        return None
                elif not (sk[0] in (1, 6) and len(sk[1]) >= count
                          and all(type(x) is int for x in sk[1][:count])):
                    return None
                return np.asarray(ints[:count], np.int64)[None, :] + qs * np.asarray(delta[:count], np.int64)
        vals = [base] if count == 1 and type(base) is int else list(base[:count])
        if any(type(x) is not int for x in vals):
            return None
        return np.broadcast_to(np.asarray(vals, np.int64), (self.m, count))

    def columns(self, kind):
        """``(bid, block, first, last, size, parts, index)`` arrays of this segment's tiles of memory ``kind``,
        ordered as made, or None when an entry is not of the plain form (then the tables are made instead)."""
        base = self.fit.base
        L = len(base["rk"])
        outs = [[] for _ in range(7)]
        for pos in range(L):
            t = base["tv"][pos]
            if t[0] != kind:
                continue
            if t[3] is not None or not self._size_fixed(pos):
                return None
            key = self._ints("rk", pos, 2)
            rng = self._ints("rv", pos, 2)
            pp = self._ints("pv", pos, 1)
            if key is None or rng is None or pp is None:
                return None
            for o, a in zip(outs, (key[:, 0], key[:, 1], rng[:, 0], rng[:, 1],
                                   np.full(self.m, t[1], np.int64), pp[:, 0],
                                   np.arange(self.m, dtype=np.int64) * L + pos)):
                o.append(a)
        if not outs[0]:
            return tuple(np.zeros(0, np.int64) for _ in range(7))
        cols = [np.stack(o, axis=1).reshape(-1) for o in outs]     # block by block, positions in order
        return tuple(cols)

    def _size_fixed(self, pos):
        """Whether the tile entry's kind and byte size are the same in every block (only its name may change)."""
        for p_, sk, ints, delta in self.fit.var.get("tv", ()):
            if p_ == pos:
                i = []
                _split(self.fit.base["tv"][pos][0], i)
                return sk[0] == 1 and sk[1][1] == 0 and all(d == 0 for d in delta[:len(i) + 1])
        return True


def same(pred, d):
    for f, items in pred.items():
        got = d[f]
        if len(got) != len(items):
            return f
        for x, y in zip(items, got):
            i1, i2 = [], []
            if _split(x, i1) != _split(y, i2) or i1 != i2:
                return f
    return None
