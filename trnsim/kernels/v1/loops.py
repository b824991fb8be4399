"""Legacy loop iterators: ``nl.affine_range``, ``sequential_range``, ``static_range``.

trnsim runs every loop as written (Python iterates it).  The indices it yields are ints that also know whether they
are their loop's first iteration, which ``nl.loop_reduce`` needs to start its reduction.
"""

from __future__ import annotations

__all__ = ["LoopIndex", "_range"]


def _range(*args, **kwargs):
    """``range`` of the loop; ``start``/``stop``/``step`` may be given by keyword (``affine_range(0, n, step=T)``);
    other keywords (``multi_buffer=``, ``loop_type=``, hints to the compiler) change nothing here."""
    if any(k in kwargs for k in ("start", "stop", "step")):
        pos = list(args) + [None] * (3 - len(args))
        start, stop, step = pos[:3]
        if len(args) == 1:                     # affine_range(n, step=2): n is the stop
            start, stop = 0, args[0]
        start = kwargs.get("start", 0 if start is None else start)
        stop = kwargs.get("stop", stop)
        step = kwargs.get("step", 1 if step is None else step)
        if stop is None:
            start, stop = 0, start
        return _loop(range(start, stop, step))
    return _loop(range(*args))


class LoopIndex(int):
    """A loop index of ``nl.affine_range`` & co.: an int that knows whether it is its loop's first iteration
    (``nl.loop_reduce`` starts its reduction there)."""

    def __new__(cls, value, first):
        v = super().__new__(cls, value)
        v.first = first
        return v


class _Loop:
    """The iteration space of a loop: a ``range`` whose iteration yields :class:`LoopIndex` values."""

    __slots__ = ("r",)

    def __init__(self, r):
        self.r = r

    def __iter__(self):
        r0 = self.r.start
        return (LoopIndex(i, i == r0) for i in self.r)

    def __len__(self):
        return len(self.r)

    def __getitem__(self, i):
        return self.r[i]

    def __repr__(self):
        return f"affine_range({self.r.start}, {self.r.stop}, {self.r.step})"


_loop = _Loop
