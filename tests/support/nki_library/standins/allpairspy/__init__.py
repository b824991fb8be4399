"""Stand-in for ``allpairspy.AllPairs`` (pairwise test generation), used only when the real package is absent.

A greedy generator written for trnsim's runner: each row takes, parameter by parameter, the value that covers the
most not-yet-covered value pairs and that ``filter_func`` accepts for the partial row (as allpairspy calls it);
rows are produced until no row covers a new pair (a pair the greedy rows miss is then aimed at directly, with a
bounded search).  The pairs the filter allows are covered (up to that bound), but the rows (and so the test ids)
are not those the real package would produce.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, namedtuple


class AllPairs:
    def __init__(self, parameters, filter_func=lambda row: True, previously_tested=None, n=2):
        if isinstance(parameters, (dict, OrderedDict)):
            self._names = list(parameters.keys())
            self._values = [list(v) for v in parameters.values()]
            self._row = namedtuple("Pairs", self._names)
        else:
            self._names = None
            self._values = [list(v) for v in parameters]
            self._row = None
        self._filter = filter_func
        self._budget = self.BUDGET

    BUDGET = 2000          # filter calls per row search: a pair no row reaches within it counts as not allowed

    def _ok(self, row):
        self._budget -= 1
        if self._budget < 0:
            return False
        try:
            return bool(self._filter(list(row)))
        except Exception:
            return False

    def __iter__(self):
        vals = self._values
        k = len(vals)
        if k == 0:
            return
        if k == 1:
            for v in vals[0]:
                if self._ok([v]):
                    yield self._wrap([v])
            return
        uncovered = {(i, a, j, b) for i, j in itertools.combinations(range(k), 2)
                     for a in range(len(vals[i])) for b in range(len(vals[j]))}
        while uncovered:
            self._budget = self.BUDGET
            row = self._build(uncovered)
            gained = uncovered & self._pairs(row) if row is not None else set()
            if not gained:                  # greedy found nothing new: aim at one uncovered pair at a time
                for pair in sorted(uncovered, key=repr):
                    i, a, j, b = pair
                    self._budget = self.BUDGET
                    row = self._build(uncovered, forced={i: a, j: b})
                    if row is None:
                        uncovered.discard(pair)          # no row the filter accepts holds this pair
                        continue
                    gained = uncovered & self._pairs(row)
                    break
            if not gained:
                return
            uncovered -= gained
            yield self._wrap([vals[i][row[i]] for i in range(k)])

    def _pairs(self, row):
        return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}

    def _build(self, uncovered, row=(), forced=None):
        """Depth-first over parameters, best-scoring value first, so a filter that rejects a prefix backtracks;
        ``forced`` fixes the value index of some parameters."""
        vals, k = self._values, len(self._values)
        i = len(row)
        if i == k:
            return list(row)
        forced = forced or {}
        def score(a):
            return sum((j, row[j], i, a) in uncovered for j in range(i)) + sum(
                any((i, a, j, b) in uncovered for b in range(len(vals[j]))) for j in range(i + 1, k))
        choices = [forced[i]] if i in forced else sorted(range(len(vals[i])), key=lambda a: -score(a))
        for a in choices:
            cand = row + (a,)
            if self._ok([vals[j][cand[j]] for j in range(len(cand))]):
                done = self._build(uncovered, cand, forced)
                if done is not None:
                    return done
        return None

    def _wrap(self, row):
        return self._row(*row) if self._row else row
