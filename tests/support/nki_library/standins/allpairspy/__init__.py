"""Stand-in for ``allpairspy.AllPairs`` (pairwise test generation), used only when the real package is absent.

A greedy generator written for trnsim's runner: each row takes, parameter by parameter, the value that covers the
most not-yet-covered value pairs and that ``filter_func`` accepts for the partial row (as allpairspy calls it);
rows are produced until no row covers a new pair (a pair the greedy rows miss is then aimed at directly, with a
bounded search).  The pairs the filter allows are covered (up to that bound), but the rows (and so the test ids)
are not those the real package would produce.
"""

from __future__ import annotations

import collections
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
        self._answers = {}     # value indices of a (partial) row -> the filter's answer (_ok_indices)

    BUDGET = 2000          # filter calls per row search: a pair no row reaches within it counts as not allowed

    def _ok(self, row):
        self._budget -= 1
        if self._budget < 0:
            return False
        try:
            return bool(self._filter(list(row)))
        except Exception:
            return False

    def _ok_indices(self, cand):
        """:meth:`_ok` of the (partial) row of value indices ``cand``.  The filter's answer for a row is kept: the
        searches ask about the same prefixes again and again (each uncovered pair's search starts over), and a
        filter is a function of the row it is given.  Each ask still spends the search's budget, as a call does,
        so the rows found are those of calling the filter every time."""
        self._budget -= 1
        if self._budget < 0:
            return False
        ok = self._answers.get(cand)
        if ok is None:
            vals = self._values
            try:
                ok = bool(self._filter([vals[j][cand[j]] for j in range(len(cand))]))
            except Exception:
                ok = False
            self._answers[cand] = ok
        return ok

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
        # open[(i, a, j)]: how many uncovered pairs value a of parameter i still has with parameter j > i (what
        # the score's second term asks, kept up to date instead of searched for at every candidate)
        self._open = collections.Counter((i, a, j) for i, a, j, _ in uncovered)
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
                        self._cover(uncovered, (pair,))  # no row the filter accepts holds this pair
                        continue
                    gained = uncovered & self._pairs(row)
                    break
            if not gained:
                return
            self._cover(uncovered, gained)
            yield self._wrap([vals[i][row[i]] for i in range(k)])

    def _cover(self, uncovered, pairs):
        """Take ``pairs`` (all uncovered) out of ``uncovered`` and of the per-value counts."""
        opened = self._open
        for i, a, j, b in pairs:
            opened[(i, a, j)] -= 1
        uncovered.difference_update(pairs)

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
        opened = self._open

        def score(a):       # uncovered pairs with the row so far + later parameters a still has a pair with
            return sum((j, row[j], i, a) in uncovered for j in range(i)) + sum(
                opened[(i, a, j)] > 0 for j in range(i + 1, k))
        choices = [forced[i]] if i in forced else sorted(range(len(vals[i])), key=lambda a: -score(a))
        for a in choices:
            cand = row + (a,)
            if self._ok_indices(cand):
                done = self._build(uncovered, cand, forced)
                if done is not None:
                    return done
        return None

    def _wrap(self, row):
        return self._row(*row) if self._row else row
