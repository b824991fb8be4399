"""The compile cache: lowered graphs (plans) on disk, shared by processes.

* Key: SHA-256 of the aten graph's code, its constants, the input shapes/dtypes/strides, the graph kind
  (forward/backward/inference), the target, the LNC, trnsim's version, the plan format and the compile options.
* Directory: ``TORCH_NEURONX_NEFF_CACHE_DIR`` (TorchNeuron's variable), else ``$XDG_CACHE_HOME/trnsim/compile`` or
  ``~/.cache/trnsim/compile``.  ``TRNSIM_COMPILE_CACHE=0`` keeps the cache in memory only.
* Format: one JSON file per key, ``{"checksum": sha256 of the payload's canonical JSON, "payload": ...}``; never
  pickle, so a cache file cannot execute code.  Written to a temporary file and renamed (atomic); a file that does
  not parse, or whose checksum does not match, warns (:class:`NeuronCacheWarning`) and is recompiled.
* Concurrency: a compile holds the key's file lock (``filelock``), so two processes (or pytest-xdist workers)
  compiling the same graph compile it once; the second waits and reads the entry.
* Failures are stored too (``status: "failure"`` with the error); a later compile of the same graph fails at once
  with the remembered error, unless ``NEURON_CC_FLAGS`` contains ``--retry_failed_compilation``.
* Size bound: ``TRNSIM_COMPILE_CACHE_MAX_BYTES`` (default 256 MiB); past it the least recently used entries (file
  modification time, refreshed on every hit) are deleted.  A store does not list the directory each time: the
  process keeps the size it last counted plus what it has written since, and counts again (and evicts) when that
  passes the bound or every ``_RECOUNT_EVERY`` stores, so other processes' entries are counted too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings

import torch

from ... import config
from ...fileio import atomic_write
from ..device_state import STATE
from .errors import NeuronCacheWarning

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
_ENTRY_FORMAT = 1
_RECOUNT_EVERY = 64          # stores between two listings of the cache directory when under the bound


@functools.cache
def _version():
    """trnsim's installed version, read once per process (reading the distribution's metadata took about 2.5 ms of
    every graph's compile key)."""
    try:
        from importlib.metadata import version
        return version("trnsim")
    except Exception:
        return "unknown"


_FP = []


def _cost_model_fingerprint():
    """A plan holds simulated kernel costs: a change to the cost model (the op-cost cache's fingerprint: library
    kernels, ISA, machine, memory, targets) or to the backend that plans and prices graphs makes old plans stale,
    so the key carries a hash of both, not only the package version."""
    if not _FP:
        from .. import cost_cache
        h = hashlib.sha256(cost_cache._fingerprint().encode())
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # trnsim/backend
        for d, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    with open(os.path.join(d, name), "rb") as f:
                        h.update(name.encode() + f.read())
        _FP.append(h.hexdigest()[:16])
    return _FP[0]


def cache_dir():
    d = config.neff_cache_dir
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "trnsim", "compile")


def _meta_of(x):
    if isinstance(x, torch.Tensor):
        return ["t", list(x.shape), list(x.stride()), str(x.dtype), x.storage_offset()]
    return ["v", repr(x)]


def graph_key(gm, example_inputs, kind, opts_key):
    from .lower import PLAN_FORMAT
    h = hashlib.sha256()
    h.update(gm.code.encode())
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            obj = gm
            for part in n.target.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, torch.Tensor):
                p = getattr(obj, "_p", obj)
                h.update(repr(_meta_of(p)).encode())
                h.update(p.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                         if p.numel() else b"")
    h.update(json.dumps([_meta_of(x) for x in example_inputs]).encode())
    from .. import costs
    h.update(json.dumps([kind, STATE.target.name, STATE.lnc, _version(), _cost_model_fingerprint(), PLAN_FORMAT,
                         _ENTRY_FORMAT, opts_key, costs.compiler_auto_cast()]).encode())
    return h.hexdigest()


def _checksum(payload):
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _retry_failed():
    return "--retry_failed_compilation" in config.neuron_cc_flags


class CompileCache:
    def __init__(self):
        self.memory = {}
        self._counted = {}      # cache directory -> [bytes when last listed + bytes written since, stores since]

    # -- paths ------------------------------------------------------------------------------------------------
    @staticmethod
    def enabled():
        return config.compile_cache

    @staticmethod
    def path(key):
        return os.path.join(cache_dir(), key[:2], key + ".json")

    # -- reading ------------------------------------------------------------------------------------------------
    def _read(self, key):
        """(payload or None); a corrupt entry warns, is deleted and reads as None."""
        p = self.path(key)
        try:
            with open(p, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw.decode())
            payload = doc["payload"]
            if doc.get("checksum") != _checksum(payload) or payload.get("format") != _ENTRY_FORMAT:
                raise ValueError("checksum mismatch" if doc.get("checksum") != _checksum(payload)
                                 else f"entry format {payload.get('format')!r}")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError) as e:
            warnings.warn(f"trnsim compile cache: entry {p} is unreadable ({e}); recompiling it", NeuronCacheWarning,
                          stacklevel=3)
            try:
                os.unlink(p)
            except OSError:
                pass
            return None
        try:
            os.utime(p)                    # least-recently-used order for eviction
        except OSError:
            pass
        return payload

    def lookup(self, key):
        """(plan, "ok") | (failure payload, "failure") | (None, None)."""
        payload = self.memory.get(key)
        if payload is not None and self.enabled():
            try:
                os.utime(self.path(key))           # least-recently-used order for eviction
            except OSError:
                pass
        elif payload is None and self.enabled():
            payload = self._read(key)
        if payload is None:
            return None, None
        if payload["status"] == "failure":
            if _retry_failed():
                return None, None
            return payload, "failure"
        self.memory[key] = payload
        return payload["plan"], "ok"

    def get_or_compile(self, key, compile_fn):
        """The plan for ``key``: from memory, from disk, or compiled by ``compile_fn()`` under the key's file lock
        (and stored).  Returns (plan or failure payload, status) with status "hit", "miss" or "failure"."""
        plan, status = self.lookup(key)
        if status == "ok":
            return plan, "hit"
        if status == "failure":
            return plan, "failure"
        if not self.enabled():
            return compile_fn(), "miss"
        from filelock import FileLock
        os.makedirs(os.path.dirname(self.path(key)), exist_ok=True)
        with FileLock(self.path(key) + ".lock"):
            plan, status = self.lookup(key)          # another process may have compiled it meanwhile
            if status == "ok":
                return plan, "hit"
            if status == "failure":
                return plan, "failure"
            plan = compile_fn()
            self.store(key, plan)
            return plan, "miss"

    # -- writing ------------------------------------------------------------------------------------------------
    def _write(self, key, payload):
        payload = dict(payload, format=_ENTRY_FORMAT)
        self.memory[key] = payload
        if not self.enabled():
            return
        p = self.path(key)
        data = json.dumps({"checksum": _checksum(payload), "payload": payload}, sort_keys=True).encode()
        with atomic_write(p, "wb") as f:
            f.write(data)
        self._evict_if_due(len(data))

    def _evict_if_due(self, written):
        """After a store of ``written`` bytes: evict (listing the directory) when the size this process knows of
        passes the bound, or when it has not listed the directory for ``_RECOUNT_EVERY`` stores."""
        known = self._counted.get(cache_dir())
        if known is not None:
            known[0] += written
            known[1] += 1
            if known[0] <= self._max_bytes() and known[1] < _RECOUNT_EVERY:
                return
        self.evict()

    @staticmethod
    def _max_bytes():
        max_bytes = config.compile_cache_max_bytes
        return DEFAULT_MAX_BYTES if max_bytes is None else max_bytes

    def store(self, key, plan):
        self._write(key, {"status": "ok", "plan": plan})

    def store_failure(self, key, error, op=None, line=None):
        self._write(key, {"status": "failure", "error": error, "op": op, "line": line})

    def evict(self, max_bytes=None):
        """Delete least recently used entries until the cache holds at most ``max_bytes``; returns the number
        deleted."""
        if max_bytes is None:
            max_bytes = self._max_bytes()
        root = cache_dir()
        entries = []
        for dirpath, _, files in os.walk(root):
            for fn in files:
                if fn.endswith(".json") and not fn.startswith(".tmp-"):
                    fp = os.path.join(dirpath, fn)
                    try:
                        st = os.stat(fp)
                    except OSError:
                        continue
                    entries.append((st.st_mtime, st.st_size, fp))
        total = sum(e[1] for e in entries)
        removed = 0
        for _, size, fp in sorted(entries):
            if total <= max_bytes:
                break
            try:
                os.unlink(fp)
                removed += 1
                total -= size
            except OSError:
                pass
            self.memory.pop(os.path.basename(fp)[:-5], None)
        self._counted[root] = [total, 0]
        return removed

    def clear_memory(self):
        self.memory.clear()


CACHE = CompileCache()
