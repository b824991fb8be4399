"""A persistent cache of the device's op costs: each shape-only kernel simulation (``costs._memo``) is kept on disk
so that the next process (the next ``trnsim estimate``, the next test session) does not simulate it again.

* Key: the memo key (kernel kind, target, shapes, dtype, options) under a fingerprint of the cost model -- the
  source of the library kernels, the ISA, the machine and memory layers, the targets and the two modules that
  combine simulations into stored costs (backend/costs.py, backend/compile/costing.py), plus trnsim's version -- so a
  change to any of them starts a fresh file instead of reusing stale costs.
* Format: JSON (never pickle), one file per fingerprint under ``$TRNSIM_CACHE_DIR`` (default
  ``~/.cache/trnsim``), written atomically (temporary file + rename) when the process ends and every 200 new
  entries; concurrent processes merge what is on disk with their own entries before writing, so none loses
  another's work (the last writer wins on the same key: identical values).
* ``TRNSIM_COST_CACHE=0`` turns it off (the test suite does, to stay hermetic).  A corrupt file is ignored with
  a warning and rewritten.
"""

from __future__ import annotations

import atexit
import hashlib
import os

from .. import config
from ..fileio import flush_json_memo, read_json_memo

__all__ = ["lookup", "store", "flush", "enabled", "path"]

_FLUSH_EVERY = 200
_state = {"loaded": False, "entries": {}, "new": 0, "path": None, "fp": None}


def enabled() -> bool:
    return config.cost_cache


def _fingerprint():
    if _state["fp"] is None:
        import trnsim
        root = os.path.dirname(os.path.abspath(trnsim.__file__))
        h = hashlib.sha256(trnsim.__version__.encode())
        for sub in ("kernels/library", "isa", "machine", "memory"):
            d = os.path.join(root, sub)
            for name in sorted(os.listdir(d)):
                if name.endswith(".py"):
                    with open(os.path.join(d, name), "rb") as f:
                        h.update(name.encode() + f.read())
        # the two modules whose rules combine simulations into a stored cost (extrapolations): costs.py's and the
        # compile backend's fused kernels' (compile/costing.py, whose pointwise extrapolation is stored too)
        for name in ("targets.py", "backend/costs.py", "backend/compile/costing.py"):
            with open(os.path.join(root, name), "rb") as f:
                h.update(f.read())
        _state["fp"] = h.hexdigest()[:16]
    # the switches that change a simulation's time (config.py) name their own file: a run with the DMA round
    # robin off never reads costs simulated with it on
    return _state["fp"] + ("" if config.dma_round_robin else "-norr")


def path():
    base = config.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "trnsim")
    return os.path.join(base, f"op-costs-{_fingerprint()}.json")


def _read(p):
    doc = read_json_memo(p, lambda v: isinstance(v, list) and len(v) == 3
                         and all(isinstance(x, (int, float)) for x in v), "op-cost cache")
    return {k: tuple(float(x) for x in v) for k, v in doc.items()}


def _load():
    if not _state["loaded"]:
        _state["loaded"] = True
        _state["path"] = path()
        _state["entries"] = _read(_state["path"])
        atexit.register(flush)


def lookup(key):
    """The cached ``(ns, flops, bytes)`` of a memo key, or None."""
    if not enabled():
        return None
    _load()
    return _state["entries"].get(repr(key))


def store(key, value):
    if not enabled():
        return
    _load()
    _state["entries"][repr(key)] = tuple(float(x) for x in value)
    _state["new"] += 1
    if _state["new"] >= _FLUSH_EVERY:
        flush()


def flush():
    """Merge this process's new entries into the file on disk (atomically)."""
    flush_json_memo(_state, _read, "op-cost cache", encode=list)
