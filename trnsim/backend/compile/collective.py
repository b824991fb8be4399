"""Collectives inside a compiled graph (ops kind ``collective``, e.g. ``trnsim_coll::seq_reshard``): their time, and
how much of it the graph leaves exposed.

Time: a collective is no kernel of the rank's engines.  Its duration is the collectives model's
(``trnsim.collectives.collective_time``, the one model nccom-test, the ``neuron`` process group and the estimator
use), through a *pricer* the caller installs with :func:`pricing`: an object with ``key`` (a string naming the
topology and the rank's group; it joins the compile cache key of a graph with collectives) and ``ns(op, nbytes,
group)``, and optionally ``compute_scale``: the fraction of a kernel's simulated (one physical core) time the rank
takes to run it (1 / LNC; the window a collective can overlap).  Without a pricer (a graph compiled outside the
estimator) a collective costs nothing and its kernel label says ``unpriced``.

Overlap, what is modelled: the graph's kernels run one at a time on the rank's compute queue, in the graph's order
(a topological order of the fused kernels, the kernel with the earliest op first), and the collectives one at a
time on their own queue (the collective engine and its DMA rings), also in graph order.  A kernel starts when the
previous kernel has finished and its inputs are ready; a collective when the previous collective has finished and
its input is ready.  So a collective overlaps only the kernels that come after it in the graph's order and do not
depend on it (in a sequence-parallel layer: the weight gradients of the backward that the graph puts after a
reduce-scatter of the input gradient); a collective whose output the next kernel needs, or that the graph ends
with, is exposed.  The graph takes until its last kernel or collective finishes; the excess over its kernels' sum
is charged to the collectives that stalled the compute queue (the one the stalled kernel waited for) or ended the
graph.  Not modelled: a compiler reordering kernels to hide a collective, and the HBM and DMA traffic an
overlapped collective shares with the kernels it overlaps (both would move the figure, in opposite directions).
"""

from __future__ import annotations

import contextlib
import heapq

__all__ = ["pricing", "current", "key", "schedule", "label"]

_PRICER = [None]          # process-wide: AOTAutograd compiles the backward graph during backward()


@contextlib.contextmanager
def pricing(pricer):
    """Inside the block, the collectives of graphs compiled are timed by ``pricer`` (module docstring)."""
    prev = _PRICER[0]
    _PRICER[0] = pricer
    try:
        yield pricer
    finally:
        _PRICER[0] = prev


def current():
    return _PRICER[0]


def key():
    """The active pricer's key, or None."""
    p = _PRICER[0]
    return None if p is None else str(p.key)


def _op_of(node):
    """(collective name, bytes the collectives model is given: the gathered tensor's, group) of a collective node."""
    from .fusion import val
    group, gather = int(node.args[1]), bool(node.args[2])
    v = val(node) if gather else val(node.args[0])      # the full-sequence tensor: the gather's output, the scatter's input
    return ("all_gather" if gather else "reduce_scatter"), v.numel() * v.element_size(), group


def label(node):
    op, _, group = _op_of(node)
    return f"collective:{op}[{group} ranks]" + ("" if _PRICER[0] is not None else " unpriced")


def cost(node):
    """(ns, bytes) of a collective node: the pricer's time of the whole collective, and its tensor's bytes."""
    op, nbytes, group = _op_of(node)
    p = _PRICER[0]
    if p is None or group <= 1:
        return 0.0, nbytes
    return float(p.ns(op, nbytes, group)), nbytes


def schedule(fz, durations):
    """``{group id: exposed ns}`` of the collective groups of ``fz`` (a ``fusion.Fusion``), given every group's
    duration ``durations[group id]`` (module docstring: in-order compute queue, in-order collective queue)."""
    groups = [g for g in fz.groups if g.nodes]
    preds = {g.id: [] for g in groups}
    for g in groups:
        for s in g.succ:
            if s.id in preds:
                preds[s.id].append(g)
    waiting = {g.id: len(preds[g.id]) for g in groups}
    first = {g.id: min(fz.index[n] for n in g.nodes) for g in groups}
    heap = [(first[g.id], g.id, g) for g in groups if not waiting[g.id]]
    heapq.heapify(heap)
    finish, exposed = {}, {}
    compute_free = coll_free = 0.0
    scale = float(getattr(_PRICER[0], "compute_scale", 1.0))    # kernels' time on the rank's (logical) core
    last_coll = None
    while heap:
        _, _, g = heapq.heappop(heap)
        ready, culprit = 0.0, None
        for p in preds[g.id]:
            if finish[p.id] > ready:
                ready, culprit = finish[p.id], p
        d = durations.get(g.id, 0.0)
        if g.kind == "collective":
            start = max(coll_free, ready)
            finish[g.id] = coll_free = start + d
            exposed[g.id] = 0.0
            last_coll = g
        else:
            d *= scale
            start = max(compute_free, ready)
            if start > compute_free:           # waiting on an input a collective produces (kernels finish in order)
                exposed[culprit.id] = exposed.get(culprit.id, 0.0) + start - compute_free
            finish[g.id] = compute_free = start + d
        for s in g.succ:
            if s.id in waiting:
                waiting[s.id] -= 1
                if not waiting[s.id]:
                    heapq.heappush(heap, (first[s.id], s.id, s))
    if last_coll is not None and coll_free > compute_free:
        exposed[last_coll.id] += coll_free - compute_free     # the graph ends with a collective still running
    return exposed
