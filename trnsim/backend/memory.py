"""Device memory accounting: live storage bytes against the target's HBM per logical core.

The CPU payload holds only what is really written; the simulated capacity is a number, never an allocation.
Accounting is per storage: a payload's ``UntypedStorage`` Python object lives exactly as long as its C++ storage
(torch keeps the Python object of a storage alive with it), so one weakref on it counts the bytes once however many
wrappers or views share it, and releases them when the last user dies.  No weakref is ever taken on a wrapper
(``torch.utils.swap_tensors``, which ``Module._apply`` uses, refuses tensors with weakrefs).

The set of tracked storages is also what makes a storage a *device* storage: ``storage.device`` reports ``neuron:0``
for them (see patches.py), so ``torch.save`` tags them ``neuron:0`` and ``storage.cpu()`` copies, as for CUDA.
"""

from __future__ import annotations

import weakref

import torch

from .device_state import STATE


class _Memory:
    def __init__(self):
        self.allocated = 0
        self.peak = 0
        self.num_alloc = 0
        self.num_free = 0
        self.fraction = 1.0
        self._cap_key = None
        self._cap = 0
        self._live = {}      # id(UntypedStorage) -> _Ref (a weakref to the storage holding its byte count)

    @property
    def capacity(self):
        key = (STATE.target, STATE.lnc, self.fraction)
        if self._cap_key != key:
            self._cap_key = key
            self._cap = int(STATE.target.hbm_bytes_per_logical_core(STATE.lnc) * self.fraction)
        return self._cap

    def check(self, nbytes):
        if self.allocated + nbytes > (self._cap if self._cap_key is not None else self.capacity):
            gib = 1024 ** 3
            cap = self.capacity
            raise torch.OutOfMemoryError(
                f"neuron out of memory. Tried to allocate {_fmt(nbytes)}. Device neuron:0 (simulated "
                f"{STATE.target.marketing_name}, LNC={STATE.lnc}) has a total capacity of {cap / gib:.2f} GiB of "
                f"which {_fmt(max(cap - self.allocated, 0))} is free. Of the allocated memory {_fmt(self.allocated)} "
                f"is allocated by tensors (peak {_fmt(self.peak)}).")

    def track(self, storage):
        """Count ``storage`` (an ``UntypedStorage``) as device memory, once; checked against the capacity."""
        if id(storage) not in self._live:
            self.track_new(storage, storage.nbytes())

    def track_new(self, storage, nb):
        """``track`` for a storage known to be untracked and to hold ``nb`` bytes (the dispatch fast path calls it
        directly for fresh elementwise results, whose byte count it memoises)."""
        a = self.allocated + nb
        if nb and a > (self._cap if self._cap_key is not None else self.capacity):
            self.check(nb)
        r = _Ref(storage, _release)
        r.key = key = id(storage)
        r.nbytes = nb
        self._live[key] = r
        self.allocated = a
        self.num_alloc += 1
        if a > self.peak:
            self.peak = a

    def is_device_storage(self, storage):
        e = self._live.get(id(storage))
        return e is not None and e() is storage

    def resized(self, storage):
        """A tracked storage changed size (``resize_``, ``set_``): account the difference (or start tracking)."""
        e = self._live.get(id(storage))
        if e is None or e() is not storage:
            self.track(storage)
            return
        nb = storage.nbytes()
        if nb > e.nbytes:
            self.check(nb - e.nbytes)
        self.allocated += nb - e.nbytes
        e.nbytes = nb
        if self.allocated > self.peak:
            self.peak = self.allocated

    def release(self, ref):
        if self._live.get(ref.key) is ref:
            del self._live[ref.key]
            self.allocated -= ref.nbytes
            self.num_free += 1

    def stats(self):
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak,
            "allocation.all.allocated": self.num_alloc,
            "allocation.all.freed": self.num_free,
            "allocation.all.current": len(self._live),
            "reserved_bytes.all.current": self.allocated,
            "reserved_bytes.all.peak": self.peak,
            "capacity_bytes": self.capacity,
        }


class _Ref(weakref.ref):
    __slots__ = ("key", "nbytes")


def _release(ref):
    # (the body of MEMORY.release, inlined: this runs once per freed device storage)
    m = MEMORY
    if m._live.get(ref.key) is ref:
        del m._live[ref.key]
        m.allocated -= ref.nbytes
        m.num_free += 1


def _fmt(n):
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"


MEMORY = _Memory()
