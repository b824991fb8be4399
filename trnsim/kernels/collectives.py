"""``nki.collectives`` on simulated ranks: collectives between the launches of one kernel on several ranks, run in
one process.

:func:`run_ranks` launches a kernel once per rank (:func:`simulate_ranks`: keyword inputs per rank, placed on the
machine of the kernel's target, as nki-library's harness launches its collective tests), each in its own thread
with its own cores; the threads take turns (one simulates at a time, so the simulator's shared state needs no locks) and hand over only where a rank
waits in a collective.  A collective (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
``collective_permute``, ``collective_permute_implicit``) completes when every rank of its rank-list has issued it;
the data move with :mod:`trnsim.collectives.functional` (float64 accumulation, one rounding to the destination's
dtype), and each rank's core records the collective as a DMA transfer lasting what
:func:`trnsim.collectives.collective_time` gives for its size, rank-list and topology, so compute issued around it
overlaps it in the rank's Timeline.

The n-th collective a rank issues on a rank-list pairs with the n-th of every other rank of that list (at LNC 2,
of the same program: physical core p of a rank exchanges with physical core p of the others); ranks that
disagree (shapes, dtypes, collective) raise :class:`CollectiveMismatch` naming the ranks; a rank that never arrives
makes the others raise after ``timeout`` seconds, naming it.

Not modelled: a collective starting only when the slowest rank arrives (each rank's Timeline is scheduled on its
own); ``nisa.sendrecv`` and ``nisa.core_barrier`` between the programs of one LNC launch (they need the programs
of a launch to run concurrently; ``run_kernel`` runs them one after another).
"""

from __future__ import annotations

import dataclasses
import enum
import threading

import numpy as np

from ..collectives import collective_time, get_topology
from ..collectives import functional as F
from ..collectives.functional import CollectiveMismatch
from ..isa.common import read, write
from ..isa.errors import caller_location
from .context import current

__all__ = ["ReplicaGroup", "rg_partition_op", "rank_id", "all_reduce", "all_gather", "reduce_scatter",
           "all_to_all", "collective_permute", "collective_permute_implicit",
           "collective_permute_implicit_reduce", "collective_permute_implicit_current_processing_rank_id",
           "run_ranks", "simulate_ranks", "machine_of", "RankResult", "CollectiveMismatch", "CollectiveTimeout"]


class CollectiveTimeout(RuntimeError):
    """Some ranks of a collective never arrived."""


class rg_partition_op(enum.Enum):
    """How :meth:`ReplicaGroup.from_partition_op` maps a rank to its rank-list."""
    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


@dataclasses.dataclass
class ReplicaGroup:
    """Rank-lists a collective runs on, each independently (a rank may be in only one list)."""

    rank_lists: list

    def __post_init__(self):
        lists = [[int(r) for r in lst] for lst in self.rank_lists]
        seen = {}
        for i, lst in enumerate(lists):
            for r in lst:
                if r in seen:
                    raise ValueError(f"ReplicaGroup: rank {r} is in rank-lists {seen[r]} and {i}")
                seen[r] = i
        self.rank_lists = lists

    @staticmethod
    def from_partition_op(world_size: int, op: rg_partition_op, operand: int) -> "ReplicaGroup":
        key = {rg_partition_op.bitwise_and: lambda r: r & operand, rg_partition_op.div: lambda r: r // operand,
               rg_partition_op.mod: lambda r: r % operand}[rg_partition_op(op)]
        lists = {}
        for r in range(world_size):
            lists.setdefault(key(r), []).append(r)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def list_of(self, rank: int) -> tuple:
        for lst in self.rank_lists:
            if rank in lst:
                return tuple(lst)
        raise ValueError(f"rank {rank} is in no rank-list of {self.rank_lists}")


def _as_group(replica_group) -> ReplicaGroup:
    if isinstance(replica_group, ReplicaGroup):
        return replica_group
    if isinstance(replica_group, (list, tuple)):
        if replica_group and not isinstance(replica_group[0], (list, tuple)):
            return ReplicaGroup([list(replica_group)])
        return ReplicaGroup([list(x) for x in replica_group])
    raise TypeError(f"replica_group must be a ReplicaGroup or a list of rank-lists, got {type(replica_group)}")


# -- the world of ranks ----------------------------------------------------------------------------------------
class _World:
    def __init__(self, nranks, topology, timeout):
        self.nranks = nranks
        self.topology = topology
        self.timeout = timeout
        self.turn = threading.Lock()          # held by the rank that is simulating
        self.cond = threading.Condition(threading.Lock())
        self.pending = {}                     # (rank-list, program, n) -> {rank: contribution}
        self.results = {}                     # (rank-list, program, n) -> {rank: result} or an exception
        self.counts = {}                      # (rank, rank-list, program) -> collectives issued
        self.failed = None


_tls = threading.local()


def _world_rank():
    w = getattr(_tls, "world", None)
    if w is None:
        raise RuntimeError("nki.collectives calls need several ranks: launch the kernel with "
                           "trnsim.kernels.collectives.run_ranks(kernel, per_rank_args)")
    return w, _tls.rank


def rank_id() -> int:
    """This rank's id (0 .. world size - 1)."""
    return _world_rank()[1]


def _program() -> int:
    """Which program of its rank's launch is calling (0 at LNC 1; 0 or 1 at LNC 2)."""
    try:
        return int(getattr(current().core, "core_id", 0) or 0)
    except Exception:           # noqa: BLE001 -- outside a launch (a direct call in a test): the rank itself
        return 0


def _exchange(kind, group, contribution, compute):
    """Deposit this rank's contribution for the next collective on its rank-list; wait (giving the turn away)
    until all of the list have; return this rank's share of ``compute({rank: contribution})``.

    At LNC 2 each program of a rank's launch (one per physical core) issues its own collectives, and program ``p``
    of a rank pairs with program ``p`` of the other ranks of the list: the physical cores at the same place in
    their logical cores exchange.  (nki-library's ``allgather_sb2sb_tiled`` relies on it: each program gathers its
    own tiles from its own SBUF; a kernel whose programs issue the same collective on the same shared-HBM tensors
    gets the same result on each.)"""
    world, rank = _world_rank()
    lst = _as_group(group).list_of(rank)
    prog = _program()
    ck = (rank, lst, prog)
    n = world.counts.get(ck, 0)
    world.counts[ck] = n + 1
    key = (lst, prog, n)
    with world.cond:
        world.pending.setdefault(key, {})[rank] = (kind, contribution)
        if len(world.pending[key]) == len(lst):
            got = world.pending.pop(key)
            kinds = {r: k for r, (k, _) in got.items()}
            if len(set(kinds.values())) > 1:
                by = {}
                for r, k in sorted(kinds.items()):
                    by.setdefault(k, []).append(r)
                res = CollectiveMismatch(f"collective #{n + 1} on rank-list {list(lst)}"
                                         + (f" (program {prog} of each rank)" if prog else "") + ": "
                                         + "; ".join(f"ranks {rs} issued {k}" for k, rs in by.items()))
            else:
                try:
                    res = compute({r: c for r, (_, c) in got.items()}, lst)
                except Exception as e:      # noqa: BLE001 -- delivered to every rank of the list
                    res = e
            world.results[key] = res
            world.cond.notify_all()
        waited = key not in world.results
        ok = True
        if waited:
            world.turn.release()     # let the other ranks simulate up to their collective
            ok = world.cond.wait_for(lambda: key in world.results or world.failed is not None, world.timeout)
    if waited:
        world.turn.acquire()
    if not ok:
        have = sorted(world.pending.get(key, {}))
        missing = [r for r in lst if r not in have]
        raise CollectiveTimeout(f"nki.collectives.{kind} #{n + 1} on rank-list {list(lst)} (rank {rank}"
                                + (f", program {prog}" if prog else "") + f"): ranks {missing} did not arrive "
                                f"within {world.timeout:g} s")
    if key not in world.results:
        raise CollectiveTimeout(f"nki.collectives.{kind} on rank-list {list(lst)}: another rank failed "
                                f"({world.failed})")
    res = world.results[key]
    if isinstance(res, Exception):
        raise type(res)(str(res))
    return res[rank]


def _arrays(core, tensors, what, kind):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"nki.collectives.{kind}: '{what}' must be a non-empty list of tensors")
    return [np.array(read(core, t)) if core.execute else np.zeros(t.shape, np.float32) for t in tensors]


def _record(core, kind, op, dsts, srcs, nbytes, lst, loc):
    world, _ = _world_rank()
    ns = collective_time(op, int(nbytes), world.topology, nranks=world.nranks, group=lst).time_ns \
        if len(lst) > 1 and nbytes else 0.0
    rows = max(1, min(int(dsts[0].shape[0]) if dsts[0].shape else 1, core.target.pmax))
    core.occupancy.fence(loc, "a collective")          # other cores take part: nothing moves across it
    core.record_dma(f"cc.{kind}", tuple(dsts), tuple(srcs), int(nbytes), rows, ns, loc)
    core.occupancy.fence(loc, "a collective")


def _store(core, dsts, values, kind):
    for d, v in zip(dsts, values):
        if tuple(d.shape) != tuple(v.shape):
            raise CollectiveMismatch(f"nki.collectives.{kind}: destination {d.name or ''} has shape "
                                     f"{tuple(d.shape)} but the result has {tuple(v.shape)}")
        if core.execute:
            write(core, d, v)


def _reduce_name(op):
    name = getattr(op, "__name__", str(op)).lower()
    for k in ("add", "maximum", "minimum", "max", "min", "multiply"):
        if name.endswith(k):
            return {"multiply": "prod"}.get(k, k)
    raise ValueError(f"nki.collectives: reduction {op!r} is not one of nl.add, nl.maximum, nl.minimum")


def _nbytes(ts):
    return sum(int(np.prod(t.shape)) * t.dtype.itemsize for t in ts)


def _collective(kind, op_model, srcs, dsts, replica_group, fn, size_of):
    core = current().core
    loc = caller_location()
    xs = _arrays(core, srcs, "srcs", kind)
    if len(dsts) != len(srcs):
        raise ValueError(f"nki.collectives.{kind}: {len(srcs)} srcs but {len(dsts)} dsts")
    sig = tuple((tuple(t.shape), str(t.dtype)) for t in srcs)

    def compute(got, lst):
        sigs = {r: s for r, (s, _) in got.items()}
        ref = sigs[lst[0]]
        bad = [r for r in lst if sigs[r] != ref]
        if bad:
            raise CollectiveMismatch(f"nki.collectives.{kind}: ranks {bad} disagree with rank {lst[0]} on the "
                                     f"sources ({'; '.join(f'rank {r}: {sigs[r]}' for r in [lst[0]] + bad)})")
        out = {r: [] for r in lst}
        for i in range(len(ref)):
            per = fn([got[r][1][i] for r in lst], lst)
            for j, r in enumerate(lst):
                out[r].append(per[j])
        return out

    vals = _exchange(kind, replica_group, (sig, xs), compute)
    _store(core, dsts, vals, kind)
    lst = _as_group(replica_group).list_of(rank_id())
    _record(core, kind, op_model, dsts, srcs, size_of(srcs, dsts), lst, loc)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Every rank of each rank-list gets the element-wise ``op`` (nl.add, nl.maximum, nl.minimum) of the
    rank-list's sources."""
    red = _reduce_name(op)
    _collective("all_reduce", "all_reduce", srcs, dsts, replica_group,
                lambda arrs, lst: F.all_reduce(arrs, red), lambda s, d: _nbytes(d))


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None):
    """Every rank gets the rank-list's sources concatenated along ``collective_dim`` in rank-list order."""
    _collective("all_gather", "all_gather", srcs, dsts, replica_group,
                lambda arrs, lst: F.all_gather(arrs, axis=collective_dim), lambda s, d: _nbytes(d))


def reduce_scatter(srcs, dsts, replica_group, op, collective_dim=0, priority=None, name=None):
    """The rank-list's sources reduced with ``op``, split along ``collective_dim``; the i-th rank of the list
    gets part i."""
    red = _reduce_name(op)
    _collective("reduce_scatter", "reduce_scatter", srcs, dsts, replica_group,
                lambda arrs, lst: F.reduce_scatter(arrs, red, axis=collective_dim), lambda s, d: _nbytes(s))


def all_to_all(srcs, dsts, replica_group, collective_dim=0, priority=None, name=None):
    """Part i (along ``collective_dim``) of rank j's source lands as part j of the i-th rank's destination."""
    _collective("all_to_all", "all_to_all", srcs, dsts, replica_group,
                lambda arrs, lst: F.all_to_all(arrs, axis=collective_dim), lambda s, d: _nbytes(s))


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """Each (source, target) pair sends the source rank's tensor to the target rank."""
    pairs = [(int(s), int(t)) for s, t in source_target_pairs]
    ranks = sorted({r for p in pairs for r in p})

    def fn(arrs, lst):
        idx = {r: i for i, r in enumerate(lst)}
        return F.permute(arrs, [(idx[s], idx[t]) for s, t in pairs])
    _collective("collective_permute", "permute", srcs, dsts, [ranks], fn, lambda s, d: _nbytes(s))


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=(0,), name=None):
    """Each rank sends its source to its successor in the rank-list (a ring) and receives its predecessor's."""
    for srcs, dsts in zip(srcs_by_channel, dsts_by_channel):
        _collective("collective_permute_implicit", "permute", srcs, dsts, replica_group,
                    lambda arrs, lst: F.permute(arrs, [(i, (i + 1) % len(lst)) for i in range(len(lst))]),
                    lambda s, d: _nbytes(s))
        _step_ring(replica_group)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=(0,), name=None):
    """Like :func:`collective_permute_implicit`, sending ``op(srcs0, srcs1)`` of each rank to its successor."""
    red = _reduce_name(op)
    for s0, s1, dsts in zip(srcs0_by_channel, srcs1_by_channel, dsts_by_channel):
        core = current().core
        both = [F.all_reduce([a, b], red)[0] for a, b in zip(_arrays(core, s0, "srcs0", "permute_reduce"),
                                                              _arrays(core, s1, "srcs1", "permute_reduce"))]
        sig = tuple((tuple(t.shape), str(t.dtype)) for t in s0)

        def compute(got, lst, both=both):
            n = len(lst)
            return {lst[(i + 1) % n]: got[lst[i]][1] for i in range(n)}
        vals = _exchange("collective_permute_implicit_reduce", replica_group, (sig, both), compute)
        _store(core, dsts, vals, "collective_permute_implicit_reduce")
        lst = _as_group(replica_group).list_of(rank_id())
        _record(core, "collective_permute_implicit_reduce", "permute", dsts, list(s0) + list(s1),
                _nbytes(dsts), lst, caller_location())
        _step_ring(replica_group)


def _step_ring(replica_group):
    world, rank = _world_rank()
    lst = _as_group(replica_group).list_of(rank)
    key = ("ring", rank, lst, _program())
    world.counts[key] = world.counts.get(key, 0) + 1


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0, name=None):
    """The rank whose data this rank holds at ring iteration ``iteration_id``: its own at 0, then its
    predecessors' one by one."""
    world, rank = _world_rank()
    lst = _as_group(replica_group).list_of(rank)
    i = lst.index(rank)
    return lst[(i - int(iteration_id)) % len(lst)]


# -- running ranks ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class RankResult:
    rank: int
    outputs: object
    cores: list

    def timeline(self):
        from ..machine import schedule
        return schedule(self.cores)


def _in_rank(kernel, world, rank):
    """``kernel`` whose every program (at LNC 2 each runs on its own thread) runs as ``rank`` of ``world``."""
    import functools
    from .jit import Kernel
    fn = kernel.fn

    @functools.wraps(fn)
    def as_rank(*args, **kwargs):
        prev = getattr(_tls, "world", None), getattr(_tls, "rank", None)
        _tls.world, _tls.rank = world, rank
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.world, _tls.rank = prev
    return Kernel(as_rank, kernel.grid, kernel.target, kernel.options)


def run_ranks(kernel, per_rank_args, per_rank_kwargs=None, topology="trn2.48xlarge", nodes=1, timeout=60.0):
    """Launch ``kernel`` (an ``nki.jit`` kernel, optionally ``kernel[lnc]``) once per rank with that rank's
    arguments, ranks placed on ``topology``; returns a :class:`RankResult` per rank.  An exception on any rank is
    re-raised (the first by rank) after every rank has stopped."""
    nranks = len(per_rank_args)
    topo = get_topology(topology, nodes=nodes)
    world = _World(nranks, topo, float(timeout))
    kwargs = per_rank_kwargs or [{} for _ in range(nranks)]
    results, errors = [None] * nranks, [None] * nranks

    def body(r):
        _tls.world, _tls.rank = world, r
        world.turn.acquire()
        try:
            res = _in_rank(kernel, world, r).run(*per_rank_args[r], **kwargs[r])
            results[r] = RankResult(r, res.outputs, res.cores)
        except BaseException as e:      # noqa: BLE001 -- re-raised in the caller
            errors[r] = e
            with world.cond:
                world.failed = f"rank {r}: {type(e).__name__}: {e}"
                world.cond.notify_all()
        finally:
            world.turn.release()
            _tls.world = None

    threads = [threading.Thread(target=body, args=(r,), name=f"trnsim-rank{r}", daemon=True)
               for r in range(nranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


# The one-instance machine whose NeuronCores a set of ranks runs on, by target (the topologies of
# trnsim.collectives.topology, each with its source there): nki-library's harness places a test's ranks on the
# cores of one instance (test/utils/host_management.py: logical_core_ids 0 .. collective_ranks - 1).
_MACHINE_OF_TARGET = {"trn1": "trn1.32xlarge", "trn2": "trn2.48xlarge", "trn3": "trn3-gen1-ultraserver"}


def machine_of(target) -> str:
    """The machine (topology name) the ranks of a kernel for ``target`` are placed on."""
    from ..targets import get_target
    name = get_target(target).name
    if name not in _MACHINE_OF_TARGET:
        raise ValueError(f"simulate_ranks: no multi-rank machine for target {name!r}; known: "
                         f"{sorted(_MACHINE_OF_TARGET)}")
    return _MACHINE_OF_TARGET[name]


def simulate_ranks(kernel, per_rank_inputs, timeout=600.0):
    """Run ``kernel`` (a kernel from ``nki.simulate``/``nki.cpu_simulate``, indexed by its LNC) on
    ``len(per_rank_inputs)`` ranks, rank ``r`` called with the keyword arguments ``per_rank_inputs[r]``, joined by
    this module's collectives, as a launch on that many NeuronCores of one instance runs it; returns each rank's
    outputs (what ``kernel(**inputs)`` returns) in rank order.

    The ranks are placed on the machine of the kernel's target (:func:`machine_of`) at the kernel's LNC; more ranks
    than it has logical cores is an error.  ``timeout``: seconds a rank waits in a collective for the others (they
    simulate one at a time, so it grows with the rank count)."""
    from ..collectives import get_topology
    n = len(per_rank_inputs)
    if n < 1:
        raise ValueError("simulate_ranks: no ranks (per_rank_inputs is empty)")
    lnc = int(kernel.grid[0]) if getattr(kernel, "grid", None) else 1
    topo = get_topology(machine_of(kernel.target), lnc=lnc)
    if n > topo.ranks:
        raise ValueError(f"simulate_ranks: {n} ranks, but a {topo.name} has {topo.ranks} logical cores at LNC {lnc}")
    res = run_ranks(kernel, [()] * n, [dict(kw) for kw in per_rank_inputs], topology=topo, timeout=timeout)
    return [r.outputs for r in res]
