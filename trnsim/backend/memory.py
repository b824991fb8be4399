"""Device memory accounting: live tensor bytes against the target's HBM per logical core.

The CPU payload holds only what is really written; the simulated capacity is a number, never an allocation.
A storage is counted once however many wrappers (views) share it, and released when the last one dies.
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
        self._live = {}      # storage data_ptr -> [nbytes, wrapper count]
        self._refs = {}      # id(weakref) -> weakref to a wrapper (a dict: a set would compare tensors with ==)

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

    def track(self, wrapper, payload):
        st = payload.untyped_storage()
        nb = st.nbytes()
        if nb == 0:
            return
        key = st.data_ptr()
        e = self._live.get(key)
        if e is None:
            self.check(nb)
            self._live[key] = [nb, 1]
            self.allocated += nb
            self.num_alloc += 1
            if self.allocated > self.peak:
                self.peak = self.allocated
        else:
            e[1] += 1
        r = weakref.ref(wrapper, _releaser(key))
        self._refs[id(r)] = r

    def release(self, key, ref):
        self._refs.pop(id(ref), None)
        e = self._live.get(key)
        if e is None:
            return
        e[1] -= 1
        if e[1] <= 0:
            del self._live[key]
            self.allocated -= e[0]
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


def _releaser(key):
    return lambda ref: MEMORY.release(key, ref)


def _fmt(n):
    for unit, size in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"


MEMORY = _Memory()
