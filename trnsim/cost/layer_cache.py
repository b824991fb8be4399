"""A persistent cache of whole layer costs (:class:`trnsim.cost.step.LayerCost`): a layer compiled (or run) once
is reused by every later estimate, in this process and the next.

A compiled layer costs its ``torch.compile`` (dynamo tracing, AOTAutograd, lowering and the shape-only run: 1.3 to
1.9 s of CPU for a Qwen3-32B layer, the first compile of a process about 1 s more for importing dynamo) even when
every kernel cost is already in the op-cost cache; with this cache the second estimate of the same layer shapes
runs no layer at all.

* Key: the layer's memo key (``repr``: model spec, layer kind, shard shapes, micro-batch, sequence, dtype,
  target, precision, compiled, sequence parallel) under a fingerprint of every source file of the ``trnsim``
  package and its version, so any change to the code starts a fresh file.
* Also kept: an optimizer step's seconds (:func:`lookup_seconds`/:func:`store_seconds`, keyed by what its run
  depends on: parameter count, target, optimizer, eager or compiled), so an estimate whose layers are all cached
  runs nothing on the device (a compiled optimizer step costs a ``torch.compile`` of about a second of CPU).
* Format: JSON (never pickle), one file per fingerprint beside the op-cost cache (``$TRNSIM_CACHE_DIR``, default
  ``~/.cache/trnsim``), written atomically when the process ends (concurrent writers merge what is on disk).
* On and off with the op-cost cache (``TRNSIM_COST_CACHE=0`` turns both off; the test suite does).  A corrupt
  or foreign file is ignored with a warning and rewritten.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import math
import os

from ..fileio import flush_json_memo, read_json_memo

__all__ = ["lookup", "store", "lookup_seconds", "store_seconds", "flush", "path", "enabled", "entries", "merge"]

_state = {"loaded": False, "entries": {}, "new": 0, "path": None, "fp": None}


def enabled():
    """Whether the cache is on (with the op-cost cache: ``TRNSIM_COST_CACHE``)."""
    from ..backend import cost_cache
    return cost_cache.enabled()


def _fingerprint():
    if _state["fp"] is None:
        # every .py/.json of the trnsim package (this file's grandparent folder): any code or data change re-keys
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        h = hashlib.sha256(b"trnsim layer costs")
        for d, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".py", ".json")):
                    with open(os.path.join(d, name), "rb") as f:
                        h.update(os.path.relpath(os.path.join(d, name), root).encode() + f.read())
        _state["fp"] = h.hexdigest()[:16]
    return _state["fp"]


def path():
    from .. import config
    base = config.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "trnsim")
    return os.path.join(base, f"layer-costs-{_fingerprint()}.json")


def _fields():
    from .step import LayerCost
    return {f.name for f in dataclasses.fields(LayerCost)}


def _seconds_ok(v):
    return isinstance(v, float) and math.isfinite(v) and v >= 0.0


def _entry_ok(v, names):
    """An entry's value as the cache holds it: a LayerCost as a JSON object (``names``: its fields), or seconds."""
    return (isinstance(v, dict) and set(v) == names) or _seconds_ok(v)


def _read(p):
    names = _fields()
    return read_json_memo(p, lambda v: _entry_ok(v, names), "layer-cost cache")


def _load():
    if not _state["loaded"]:
        _state["loaded"] = True
        _state["path"] = path()
        _state["entries"] = _read(_state["path"])
        atexit.register(flush)


def lookup(key):
    """The cached LayerCost of a memo key, or None."""
    if not enabled():
        return None
    _load()
    d = _state["entries"].get(repr(key))
    if not isinstance(d, dict):
        return None
    from .step import LayerCost
    return LayerCost(**dict(d, fallbacks=tuple(d["fallbacks"])))


def store(key, cost):
    if not enabled():
        return
    _load()
    d = dataclasses.asdict(cost)
    d["fallbacks"] = list(d["fallbacks"])
    _state["entries"][repr(key)] = d
    _state["new"] += 1


def lookup_seconds(key):
    """The cached seconds of a memo key (an optimizer step), or None."""
    if not enabled():
        return None
    _load()
    v = _state["entries"].get(repr(key))
    return v if _seconds_ok(v) else None


def store_seconds(key, seconds):
    if not enabled():
        return
    seconds = float(seconds)
    if not _seconds_ok(seconds):
        raise ValueError(f"layer-cost cache: {seconds!r} seconds for {key!r} is not a finite non-negative number")
    _load()
    _state["entries"][repr(key)] = seconds
    _state["new"] += 1


def entries():
    """A copy of this process's entries (``repr(key)`` -> a LayerCost as a JSON object, or seconds): what a helper
    process (:mod:`trnsim.cost.forked`) adds to them is what it hands back."""
    _load()
    return dict(_state["entries"])


def merge(new):
    """Take ``new`` entries (as :func:`entries` gives them, from another process of this code) into this process's
    cache; ``ValueError`` naming the first entry that is neither a layer cost nor seconds (nothing is taken)."""
    names = _fields()
    for k, v in new.items():
        if not isinstance(k, str) or not _entry_ok(v, names):
            raise ValueError(f"layer-cost cache: an entry handed over for {k!r} is neither a layer cost nor seconds")
    _load()
    _state["entries"].update(new)
    _state["new"] += len(new)


def flush():
    """Merge this process's new entries into the file on disk (atomically)."""
    flush_json_memo(_state, _read, "layer-cost cache")
