"""Memory spaces (HBM, SBUF, PSUM), their buffers, and allocation with capacity accounting.

On-chip spaces (SBUF, PSUM) are two-dimensional: ``partitions x bytes-per-partition``.  A buffer there occupies
an address range ``[addr, addr + bytes_per_partition)`` on every partition (as NKI's allocator does) and its
elements are laid out partition-major: element ``e`` sits on partition ``e // pfree``.  HBM is one flat byte range
per chip, accounted but never allocated on the host beyond what a buffer really holds.

A buffer's host storage is released, and its capacity returned, when the last view of it goes away: a tile
allocated inside a loop body is a fresh buffer every iteration, as the compiler's multi-buffering makes it.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from .dtypes import DType

__all__ = ["MemorySpace", "Buffer", "OutOfMemory", "SBUF", "PSUM", "HBM"]

SBUF = "sbuf"
PSUM = "psum"
HBM = "hbm"
ON_CHIP = (SBUF, PSUM)

_ids = itertools.count(1)


class OutOfMemory(MemoryError):
    """An allocation does not fit the memory space's capacity."""


class MemorySpace:
    """One memory of a NeuronCore (or chip) with a first-fit allocator and live/peak accounting."""

    def __init__(self, kind: str, capacity_bytes: int, partitions: int = 0, align: int = 1,
                 bank_bytes: int = 0, name: str | None = None):
        self.kind = kind
        self.name = name or kind
        self.partitions = partitions
        self.capacity = capacity_bytes          # per partition on chip, total for HBM
        self.align = max(1, align)
        self.bank_bytes = bank_bytes
        self.live = 0
        self.peak = 0
        self._free = [(0, capacity_bytes)]      # sorted (start, size) free ranges
        self.on_chip = kind in ON_CHIP

    # -- allocation ---------------------------------------------------------------------------------
    def _place(self, size: int) -> int:
        align = self.align
        bank = self.bank_bytes
        for i, (start, fsize) in enumerate(self._free):
            addr = -(-start // align) * align
            if bank and size <= bank and (addr // bank) != ((addr + size - 1) // bank):
                addr = -(-addr // bank) * bank      # a tile that fits a bank never straddles two
            if addr + size <= start + fsize:
                self._carve(i, start, fsize, addr, size)
                return addr
        return -1

    def _carve(self, i, start, fsize, addr, size):
        pieces = []
        if addr > start:
            pieces.append((start, addr - start))
        end = addr + size
        if end < start + fsize:
            pieces.append((end, start + fsize - end))
        self._free[i:i + 1] = pieces

    def allocate(self, size: int, what: str = "tensor") -> int:
        """Reserve ``size`` bytes (per partition on chip); return the address.  Raises :class:`OutOfMemory`."""
        if size > self.capacity:
            raise OutOfMemory(self._oom_message(size, what))
        addr = self._place(size)
        if addr < 0:
            raise OutOfMemory(self._oom_message(size, what))
        self.live += size
        if self.live > self.peak:
            self.peak = self.live
        return addr

    def _oom_message(self, size, what):
        unit = " per partition" if self.on_chip else ""
        return (f"{self.name.upper()} allocation of {size} bytes{unit} for {what} does not fit: capacity "
                f"{self.capacity} bytes{unit}, {self.live} in use by live tensors (peak {self.peak})")

    def release(self, addr: int, size: int) -> None:
        self.live -= size
        free = self._free
        # insert and merge neighbours
        lo, hi = 0, len(free)
        while lo < hi:
            mid = (lo + hi) // 2
            if free[mid][0] < addr:
                lo = mid + 1
            else:
                hi = mid
        free.insert(lo, (addr, size))
        if lo + 1 < len(free) and free[lo][0] + free[lo][1] == free[lo + 1][0]:
            free[lo] = (free[lo][0], free[lo][1] + free[lo + 1][1])
            del free[lo + 1]
        if lo > 0 and free[lo - 1][0] + free[lo - 1][1] == free[lo][0]:
            free[lo - 1] = (free[lo - 1][0], free[lo - 1][1] + free[lo][1])
            del free[lo]

    def reset_peak(self):
        self.peak = self.live


class Buffer:
    """The storage behind tensors: one allocation in one memory space.

    ``data`` is a flat NumPy array in the dtype's storage type, or ``None`` in shape-only mode.  ``written``
    (a flat bool array) is kept when the space tracks initialisation (PSUM always, everything in strict mode).
    """

    __slots__ = ("id", "space", "kind", "dtype", "shape", "nelem", "pfree", "addr", "bytes_pp", "data",
                 "written", "all_written", "name", "__weakref__")

    def __init__(self, space: MemorySpace | None, dtype: DType, shape: tuple, *, name: str = "",
                 data: np.ndarray | None = None, execute: bool = True, track_written: bool = False,
                 fill: bool = True):
        self.id = next(_ids)
        self.space = space
        self.kind = space.kind if space is not None else HBM
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        n = 1
        for s in self.shape:
            n *= s
        self.nelem = n
        self.name = name
        on_chip = self.kind in ON_CHIP
        self.pfree = (n // self.shape[0] if self.shape and self.shape[0] else 0) if on_chip else n
        self.bytes_pp = self.pfree * dtype.itemsize if on_chip else n * dtype.itemsize
        self.addr = 0
        if space is not None:
            self.addr = space.allocate(self.bytes_pp, what=f"tensor {name!r}" if name else "a tensor")
            weakref.finalize(self, space.release, self.addr, self.bytes_pp)
        if data is not None:
            self.data = data
        elif execute:
            if fill:
                self.data = np.full(n, dtype.sentinel, dtype=dtype.storage)
            else:
                self.data = np.empty(n, dtype=dtype.storage)
        else:
            self.data = None
        self.all_written = data is not None
        self.written = None
        if track_written and execute:
            self.written = np.full(n, data is not None, dtype=np.bool_)

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.kind in ON_CHIP and self.shape else 0

    def __repr__(self):
        return f"Buffer#{self.id}({self.kind}, {self.dtype.name}{list(self.shape)}, name={self.name!r})"
