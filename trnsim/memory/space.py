"""Memory spaces (HBM, SBUF, PSUM), their buffers, and allocation with capacity accounting.

On-chip spaces (SBUF, PSUM) are two-dimensional: ``partitions x bytes-per-partition``.  A buffer there occupies
an address range ``[addr, addr + bytes_per_partition)`` on every partition (as NKI's allocator does) and its
elements are laid out partition-major: element ``e`` sits on partition ``e // pfree``.  HBM is one flat byte range
per chip, accounted but never allocated on the host beyond what a buffer really holds.

A buffer's host storage is released, and its address range returned, when the last view of it goes away: a tile
allocated inside a loop body is a fresh buffer every iteration, as the compiler's multi-buffering makes it.  A
NeuronCore's SBUF and PSUM overcommit (``overcommit=True``): whether the tiles fit is decided by their live ranges
in program order (``trnsim/machine/capacity.py``), as the compiler decides it.

A tile placed at an explicit address (``nl.ndarray(..., address=(partition, byte))``: "optional memory address
``(partition_offset, free_offset)``", nki.language.ndarray reference, NKI 0.2+) holds the bytes ``[byte, byte +
bytes per partition)`` of partitions ``[partition, partition + partitions)``, as on the hardware, whose SBUF and
PSUM are plain addressed memories: two tiles placed on the same range alias.  Every tile placed at one
``(partition, byte)`` with the same geometry (dtype, bytes per partition, at most as many partitions) shares one
storage (:class:`PlacedStorage`): a write through one is read through the others.  Each tile stays a buffer of its
own (its own id), as each is a tensor of its own for the compiler: its own live range, which the capacity model
counts at the placement and refuses when it overlaps another placement's on the same bytes
(``machine/capacity.py``), so the bytes of a range are counted once at any time; and, in PSUM, its own record of
which elements it wrote (a new tile at a used PSUM address starts a new accumulation group, as a new tensor does;
a strict-mode read of a PSUM tile checks that tile's writes; SBUF tiles share the record with their storage).  A
tile placed over part of an earlier placement with another geometry gets new storage, and the earlier storage takes
no more tiles (bytes are not reinterpreted between geometries: trnsim's simplification).  The scheduler orders an
access through one tile after the accesses through every other tile on the same bytes, whatever their geometry
(``machine/deps.py`` ``alias_groups``).  Not modelled: a placed tile's start-partition rule (docs/hardware.md
"Memory rules"), which instructions check within the tile.
"""

from __future__ import annotations

import bisect
import itertools
import weakref

import numpy as np

from .dtypes import DType

__all__ = ["MemorySpace", "Buffer", "OutOfMemory", "PlacedStorage", "SBUF", "PSUM", "HBM", "next_buffer_id",
           "skip_buffer_ids"]

SBUF = "sbuf"
PSUM = "psum"
HBM = "hbm"
ON_CHIP = (SBUF, PSUM)

_ids = itertools.count(1)
_storage_ids = itertools.count(1)      # PlacedStorage numbers
_SHAPES: dict = {}     # a shape as given -> (the shape as a tuple of ints, its element count), worked out once
# (shape as given, id(dtype), kind) -> (dtype, shape as ints, elements, elements per partition, bytes per partition)
# of an on-chip buffer already made by the general constructor: Buffer.tile's geometry
_TILE_GEOM: dict = {}
_TILE_LAST = (None, None, None, None)    # Buffer.tile's last (shape, dtype, kind, geometry): the objects themselves


def next_buffer_id() -> int:
    """The id the next buffer made will get (read without taking it)."""
    global _ids
    n = next(_ids)
    _ids = itertools.count(n)
    return n


def skip_buffer_ids(n: int) -> None:
    """Advance the buffer id counter by ``n``, as ``n`` buffers made and dropped would (the loop replay's bulk
    append, trnsim/kernels/loop_replay.py)."""
    global _ids
    if n < 0:
        raise ValueError(f"skip_buffer_ids: n={n} must be >= 0")
    _ids = itertools.count(next(_ids) + n)


class OutOfMemory(MemoryError):
    """An allocation does not fit the memory space's capacity."""


class MemorySpace:
    """One memory of a NeuronCore (or chip) with a first-fit allocator and live/peak accounting."""

    def __init__(self, kind: str, capacity_bytes: int, partitions: int = 0, align: int = 1,
                 bank_bytes: int = 0, name: str | None = None, overcommit: bool = False):
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
        # overcommit: an allocation that finds no free range is not refused (returns -1): a NeuronCore's SBUF and
        # PSUM are refused by live range in program order instead (trnsim/machine/capacity.py), not by how many
        # tile objects Python still holds.  A tile larger than the whole capacity is always refused.
        self.overcommit = overcommit
        # (first partition, byte address) -> weakref to the PlacedStorage of the latest placement there: what a
        # new tile placed at that address with the same geometry shares (kept only while a tile holds it)
        self._placed: dict = {}

    def state(self) -> tuple:
        """``(free ranges, live bytes, peak bytes)``: the allocator's whole state, as a hashable value (equal
        states allocate alike from then on)."""
        return (tuple(self._free), self.live, self.peak)

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
            if self.overcommit:
                return -1
            raise OutOfMemory(self._oom_message(size, what))
        self.live += size
        if self.live > self.peak:
            self.peak = self.live
        return addr

    def take(self, size: int, what: str = "tensor") -> int:
        """:meth:`allocate`, quicker when the first free range starts on an aligned address that places the tile
        there (the usual case: the bottom of the space is free); otherwise :meth:`allocate` itself."""
        free = self._free
        if free and size <= self.capacity:
            start, fsize = free[0]
            bank = self.bank_bytes
            # what _place decides for the first range when its start needs no rounding up: the tile goes there
            if size <= fsize and not start % self.align and (
                    not bank or size > bank or start // bank == (start + size - 1) // bank):
                if size < fsize:
                    free[0] = (start + size, fsize - size)
                else:
                    del free[0]
                live = self.live + size
                self.live = live
                if live > self.peak:
                    self.peak = live
                return start
        return self.allocate(size, what)

    def _oom_message(self, size, what):
        unit = " per partition" if self.on_chip else ""
        return (f"{self.name.upper()} allocation of {size} bytes{unit} for {what} does not fit: capacity "
                f"{self.capacity} bytes{unit}, {self.live} in use by live tensors (peak {self.peak})")

    def check_placement(self, partition: int, partitions: int, addr: int, size: int, what: str = "tensor"):
        """Check an explicit placement ``[addr, addr + size)`` on partitions ``[partition, partition +
        partitions)`` lies inside the space; raises :class:`OutOfMemory` naming the limit."""
        unit = " per partition" if self.on_chip else ""
        if addr < 0:
            raise OutOfMemory(f"{self.name.upper()} placement of {what} at byte {addr}: a byte address is >= 0 "
                              f"(the memory holds bytes [0, {self.capacity}){unit})")
        if addr + size > self.capacity:
            raise OutOfMemory(f"{self.name.upper()} placement of {what} at byte {addr} ({size} bytes{unit}) ends at "
                              f"{addr + size}, beyond the capacity of {self.capacity} bytes{unit}")
        if self.on_chip and (partition < 0 or partition + partitions > self.partitions):
            raise OutOfMemory(f"{self.name.upper()} placement of {what} on partitions [{partition}, "
                              f"{partition + partitions}) is outside the {self.partitions} partitions")

    def placed_storage(self, p0: int, parts: int, addr: int, bytes_pp: int, dtype: DType, execute: bool):
        """``(storage, shared)``: the :class:`PlacedStorage` a tile of ``parts`` partitions and ``bytes_pp`` bytes
        per partition of ``dtype`` placed at ``(p0, addr)`` uses -- the live one at that address when its geometry
        matches (``shared`` True), else a new one, which replaces every placement it overlaps (on the same
        partitions) as the one a later tile there can share."""
        ref = self._placed.get((p0, addr))
        st = ref() if ref is not None else None
        if st is not None and st.bytes_pp == bytes_pp and st.dtype is dtype and parts <= st.parts \
                and (st.data is not None) == execute:
            return st, True
        end, pend = addr + bytes_pp, p0 + parts
        for key, r in list(self._placed.items()):
            o = r()
            if o is None or (o.p0 < pend and p0 < o.p0 + o.parts and o.addr < end and addr < o.addr + o.bytes_pp):
                del self._placed[key]
        st = PlacedStorage(self.kind, p0, parts, addr, bytes_pp, dtype, execute)
        self._placed[(p0, addr)] = weakref.ref(st)
        return st, False

    def release(self, addr: int, size: int) -> None:
        self.live -= size
        free = self._free
        if free:
            start, fsize = free[0]
            if addr + size == start:        # just below the first free range (a loop's tiles): joined to it
                free[0] = (addr, size + fsize)
                return
            lo = 0 if addr < start else bisect.bisect_left(free, (addr,))    # (the first range from addr on)
        else:
            lo = 0
        # insert and merge neighbours
        free.insert(lo, (addr, size))
        if lo + 1 < len(free) and free[lo][0] + free[lo][1] == free[lo + 1][0]:
            free[lo] = (free[lo][0], free[lo][1] + free[lo + 1][1])
            del free[lo + 1]
        if lo > 0 and free[lo - 1][0] + free[lo - 1][1] == free[lo][0]:
            free[lo - 1] = (free[lo - 1][0], free[lo - 1][1] + free[lo][1])
            del free[lo]


# how many separate runs a fresh buffer keeps claimed (Buffer.claim_range) before it does its pending fill:
# trnsim's choice, bounding the bookkeeping (a buffer written in order keeps one run)
MAX_CLAIMED_RUNS = 64

# narrow-float HBM tensors (bf16, fp16, fp8, e8m0) of this many bytes or more are held in their own encoding rather
# than as float32 (``Buffer.native``): trnsim's choice, so that small tensors, read often, keep zero-copy views
NATIVE_MIN_BYTES = 1 << 20


def native_ok(dtype: DType, nelem: int, execute: bool, precise: bool) -> bool:
    """Whether a new HBM buffer of ``nelem`` elements of ``dtype`` is held natively: a narrow float, large, in a
    run that computes values with rounding (imprecise runs store unrounded float32 values no narrow encoding
    holds)."""
    return bool(execute and precise and dtype.is_float and dtype.storage != dtype.np
                and nelem * dtype.itemsize >= NATIVE_MIN_BYTES)


class PlacedStorage:
    """The storage of an explicitly placed on-chip range, shared by the tiles placed there (module docstring):
    a number of its own (``id``) and, when values are computed, one flat array in the dtype's storage type,
    partition-major, read as the sentinel until written."""

    __slots__ = ("id", "kind", "p0", "parts", "addr", "bytes_pp", "dtype", "data", "_written", "__weakref__")

    def __init__(self, kind, p0, parts, addr, bytes_pp, dtype, execute):
        self.id = next(_storage_ids)
        self.kind = kind
        self.p0, self.parts, self.addr, self.bytes_pp, self.dtype = p0, parts, addr, bytes_pp, dtype
        n = parts * (bytes_pp // dtype.itemsize)
        self.data = np.full(n, dtype.sentinel, dtype=dtype.storage) if execute else None
        self._written = None

    def written(self, n):
        """The first ``n`` elements of the storage's record of which elements were written, made on first use:
        shared by the SBUF tiles placed here (what a strict-mode read checks is whether the bytes were written,
        through whichever tile)."""
        if self._written is None:
            self._written = np.zeros(self.data.size, dtype=np.bool_)
        return self._written[:n]

    def __repr__(self):
        return (f"PlacedStorage#{self.id}({self.kind}, {self.dtype.name}, partitions [{self.p0}, "
                f"{self.p0 + self.parts}), bytes [{self.addr}, {self.addr + self.bytes_pp}))")


class Buffer:
    """The storage behind tensors: one allocation in one memory space.

    ``data`` is a flat NumPy array in the dtype's storage type (its real encoding for a ``native`` buffer), or
    ``None`` in shape-only mode.  ``written``
    (a flat bool array) is kept when the space tracks initialisation (PSUM always, everything in strict mode).

    A new buffer reads as its dtype's sentinel (never-written memory), but the fill is deferred (``fresh``): it
    happens the first time ``data`` is read, unless a write covering every element comes first
    (``trnsim.isa.common``'s writers claim the buffer with :meth:`claim_whole`), which then needs no fill.  A
    writer storing a contiguous run of elements claims just that run (:meth:`claim_range`: the writes into a
    natively held buffer, ``reinterpret.Native.store``); the fill then waits for the first read and covers only
    the elements no claimed write stored (none, once the runs cover the buffer).

    ``data`` given read-only is an array the buffer borrows (``borrowed``: a caller's kernel input, which the
    kernel must not change, ``kernels/jit.py``): it is read as it is and copied on the first write, which asks
    for the storage with :meth:`writable` (the writers of natively held buffers, ``reinterpret.py``, do; a
    borrowed buffer in the shadow store would be refused by NumPy at the write, never written through).
    """

    __slots__ = ("id", "space", "kind", "dtype", "shape", "nelem", "pfree", "addr", "bytes_pp", "_data", "fresh",
                 "written", "all_written", "name", "block", "block_shape", "placement", "layout_key", "_release",
                 "native", "storage", "borrowed", "_claimed", "live", "__weakref__")

    def __init__(self, space: MemorySpace | None, dtype: DType, shape: tuple, *, name: str = "",
                 data: np.ndarray | None = None, execute: bool = True, track_written: bool = False,
                 fill: bool = True, address=None, block: int = 0, block_shape=None, native: bool = False):
        # a tile at an explicit (partition, byte) address shares the storage placed there (module docstring)
        shares = (address is not None and space is not None and space.on_chip and not callable(address)
                  and not block and data is None)
        self.id = next(_ids)
        self.storage = None
        # native: ``data`` holds the dtype's real encoding (bf16/fp16/fp8 bits, ``dtype.np``) instead of the shadow
        # float32 store; every view of the buffer converts at access (reinterpret.Native).  Only HBM buffers of
        # narrow floats are held so (large kernel inputs: jit._to_input)
        if native and not (dtype.is_float and dtype.storage != dtype.np and (space is None or not space.on_chip)):
            raise ValueError(f"Buffer {name!r}: native storage is for HBM buffers of narrow float dtypes, not "
                             f"{dtype.name} in {space.kind if space is not None else HBM}")
        if native and data is not None and data.dtype != dtype.np:
            raise ValueError(f"Buffer {name!r}: native data must be in {dtype.name}'s real encoding "
                             f"({dtype.np}), got {data.dtype}")
        self.native = bool(native)
        self.space = space
        self.kind = space.kind if space is not None else HBM
        self.dtype = dtype
        try:
            sn = _SHAPES.get(shape)
        except TypeError:          # an unhashable spelling (a list)
            sn = None
        if sn is None:
            shp = tuple(int(s) for s in shape)
            n = 1
            for s in shp:
                n *= s
            sn = (shp, n)
            if type(shape) is tuple and len(_SHAPES) < 4096:
                _SHAPES[shape] = sn
        self.shape, n = sn
        self.nelem = n
        self.name = name
        on_chip = self.kind in ON_CHIP
        self.pfree = (n // self.shape[0] if self.shape and self.shape[0] else 0) if on_chip else n
        self.bytes_pp = self.pfree * dtype.itemsize if on_chip else n * dtype.itemsize
        if on_chip and sn is not None and type(shape) is tuple and len(_TILE_GEOM) < 4096:
            # what Buffer.tile needs to make the next buffer of this shape, dtype and kind (the dtype object kept,
            # so its id is not reused while the entry lives; a hit checks it)
            # (and the entry a core's buffer table keeps for it, one tuple shared by every tile of the geometry)
            _TILE_GEOM.setdefault((shape, id(dtype), self.kind), (
                dtype, self.shape, n, self.pfree, self.bytes_pp,
                (self.kind, self.bytes_pp, self.shape[0] if self.shape else 0, dtype.itemsize)))
        self.addr = 0
        # block tensors ([B, par_dim(P), F] laid out as P partitions of B blocks): elements per partition of one
        # block (0: not a block tensor) and the block dims; set by the front end.  placement: an explicit
        # (partition, byte address), or a callable (block index, partitions, bytes) -> (partition, byte address)
        self.block = int(block or 0)
        self.block_shape = tuple(block_shape) if block_shape else None
        self.placement = None
        self.layout_key = None     # the buffer's part of an operand layout (kernels/issue_cache.py), made on use
        # the tile's live-range entry in the occupancy of the core whose space holds it (capacity.Occupancy.ranges'
        # list for key (id, -1)), kept here by the issue paths at its first touch so later touches need no lookup
        self.live = None
        self._release = None       # (space, addr, bytes): returned to the space when the buffer goes (__del__)
        if space is not None:
            what = f"tensor {name!r}" if name else "a tensor"
            if address is not None and space.on_chip:
                self.placement = address
                if not callable(address):
                    p0, a0 = (int(address[0]), int(address[1])) if len(address) == 2 else (0, int(address[0]))
                    space.check_placement(p0, self.shape[0] if self.shape else 1, a0, self.bytes_pp, what)
                    self.placement = (p0, a0)
                    self.addr = a0
                    if shares:
                        st, _ = space.placed_storage(p0, self.shape[0] if self.shape else 1, a0, self.bytes_pp,
                                                     dtype, execute)
                        self.storage = st
            else:
                one = self.block * dtype.itemsize if self.block else self.bytes_pp   # a block is one tile
                if space.on_chip and one > space.capacity:
                    raise OutOfMemory(space._oom_message(one, what))
                addr = space.allocate(self.bytes_pp, what=what) if self.bytes_pp <= space.capacity else -1
                if addr >= 0:
                    self.addr = addr
                    self._release = (space, addr, self.bytes_pp)
        self.fresh = False
        self._claimed = None
        self.borrowed = data is not None and not data.flags.writeable
        if data is not None:
            self._data = data
        elif self.storage is not None:
            # the placed storage's first elements (the same partitions from the same first one, the same bytes
            # per partition): already read as the sentinel until written, so no deferred fill
            self._data = self.storage.data[:n] if execute else None
        elif execute:
            self._data = np.empty(n, dtype=dtype.np if self.native else dtype.storage)
            self.fresh = fill        # the sentinel fill, deferred to the first read (``data``)
        else:
            self._data = None
        self.all_written = data is not None
        self.written = None
        if track_written and execute:
            if self.storage is not None and self.kind == SBUF:
                self.written = self.storage.written(n)
            else:
                # (np.zeros: pages of a tile never written are never touched).  A placed PSUM tile keeps its own:
                # a matmul with accumulate=None adds to what this tile wrote, not to what another tile there did
                self.written = (np.full(n, True, dtype=np.bool_) if data is not None
                                else np.zeros(n, dtype=np.bool_))

    @classmethod
    def tile(cls, space: MemorySpace, dtype: DType, shape: tuple, name: str, execute: bool, track_written: bool,
             table: dict | None = None):
        """``Buffer(space, dtype, shape, name=name, execute=execute, track_written=track_written)`` for an on-chip
        ``space`` (no data, no explicit address, not a block tensor): the same buffer, made without the general
        constructor's branches (a loop body allocates its tiles through here every iteration).  Its entry in the
        core's buffer table ``table`` (if given) is made here: ``id -> (kind, bytes per partition, partitions,
        itemsize)``."""
        global _TILE_LAST
        last = _TILE_LAST
        kind = space.kind
        if shape is last[0] and dtype is last[1] and kind is last[2]:
            g = last[3]               # the last geometry asked for (the same shape and dtype objects)
        else:
            g = _TILE_GEOM.get((shape, id(dtype), kind))
            if g is None or g[0] is not dtype:
                self = cls(space, dtype, shape, name=name, execute=execute, track_written=track_written)
                if table is not None:
                    shp = self.shape
                    table[self.id] = (self.kind, self.bytes_pp, shp[0] if shp else 0, dtype.itemsize)
                return self
            _TILE_LAST = (shape, dtype, kind, g)
        _, shp, n, pfree, bpp, entry = g
        self = object.__new__(cls)
        self.id = i = next(_ids)
        if table is not None:
            table[i] = entry
        self.space = space
        self.kind = kind
        self.dtype = dtype
        self.shape = shp
        self.nelem = n
        self.name = name
        self.pfree = pfree
        self.bytes_pp = bpp
        self.addr = 0
        self.block = 0
        self.block_shape = None
        self.placement = None
        self.layout_key = None
        self.live = None
        self._release = None
        self.native = False
        self.storage = None
        self.borrowed = False
        self._claimed = None
        if bpp > space.capacity:
            raise OutOfMemory(space._oom_message(bpp, f"tensor {name!r}" if name else "a tensor"))
        addr = space.take(bpp, f"tensor {name!r}" if name else "a tensor")
        if addr >= 0:
            self.addr = addr
            self._release = (space, addr, bpp)
        self.all_written = False
        self.written = None
        if execute:
            self._data = np.empty(n, dtype=dtype.storage)
            self.fresh = True
            if track_written:
                self.written = np.full(n, False, dtype=np.bool_)
        else:
            self._data = None
            self.fresh = False
        return self

    @property
    def data(self):
        if self.fresh:
            self._fill()
        return self._data

    def _fill(self):
        """The deferred sentinel fill: every element, or those outside the runs claimed meanwhile."""
        self.fresh = False
        runs = self._claimed
        if runs is None:
            self._data.fill(self.dtype.sentinel)
            return
        self._claimed = None
        d = self._data
        s = self.dtype.sentinel
        lo = 0
        for a, b in runs:
            if a > lo:
                d[lo:a] = s
            lo = b
        if lo < d.size:
            d[lo:] = s

    def claim_range(self, lo: int, hi: int):
        """A write is about to store every element of the flat run ``[lo, hi)``: the storage to write into (a
        borrowed array copied first, as :meth:`writable`), with the run left out of a sentinel fill still pending
        (which then waits for the first read and fills only what no claimed run covers).  The runs are kept merged
        and sorted; past ``MAX_CLAIMED_RUNS`` of them the pending fill is done (the gaps filled) and claiming
        stops."""
        if not self.fresh:
            return self.writable()
        if not 0 <= lo <= hi <= self.nelem:
            raise ValueError(f"Buffer {self.name!r}: claimed run [{lo}, {hi}) is outside its {self.nelem} elements")
        runs = self._claimed
        if runs is None:
            runs = self._claimed = []
        i = bisect.bisect_left(runs, (lo,))
        if i and runs[i - 1][1] >= lo:          # overlaps or touches the run before
            i -= 1
        j = i
        while j < len(runs) and runs[j][0] <= hi:
            lo, hi = min(lo, runs[j][0]), max(hi, runs[j][1])
            j += 1
        runs[i:j] = [(lo, hi)]
        if runs[0] == (0, self.nelem):
            self.fresh = False                  # every element stored before any read: no fill at all
            self._claimed = None
        elif len(runs) > MAX_CLAIMED_RUNS:
            self._fill()
        return self._data

    @data.setter
    def data(self, a):
        self.fresh = False
        self.borrowed = False
        self._claimed = None
        self._data = a

    def writable(self):
        """``data`` for a write: a borrowed array (``borrowed``) is copied first, so the write never reaches the
        array the buffer was made from."""
        if self.borrowed:
            self._data = np.array(self._data, copy=True)
            self.borrowed = False
        return self.data

    def claim_whole(self):
        """A write is about to store every element of the buffer: a fill still pending is not needed.  Returns
        whether it was pending (the caller then :meth:`unclaim` s if the write fails before storing).  A buffer
        with claimed runs (:meth:`claim_range`) gets its gaps filled and returns False: a failed write must not
        undo those runs' stores."""
        if self._claimed is not None:
            self._fill()
            return False
        f = self.fresh
        self.fresh = False
        return f

    def unclaim(self):
        """A write that claimed the buffer failed: it reads as never written again (the sentinel)."""
        self._data.fill(self.dtype.sentinel)

    def __del__(self):
        # the address range goes back to the space when the last view of the buffer goes (a __del__ rather than
        # weakref.finalize: the same moment, at a fraction of the cost per tile)
        try:
            r = self._release
        except AttributeError:                   # (unset if __init__ raised before it)
            return
        if r is not None:
            self._release = None
            r[0].release(r[1], r[2])

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.kind in ON_CHIP and self.shape else 0

    def __repr__(self):
        return f"Buffer#{self.id}({self.kind}, {self.dtype.name}{list(self.shape)}, name={self.name!r})"
