"""The ``neuron`` torch.distributed backend of the simulated device.

``dist.init_process_group("neuron")`` (registered under ``TORCHNEURON_TARGET=sim`` by :func:`register`) gives a
:class:`NeuronProcessGroup`: a Python ``ProcessGroup`` whose payloads move through an inner gloo group (the CPU
tensors behind the ``neuron`` wrappers), and which charges every collective its simulated time on each rank's
device clock.  A collective starts when the last rank arrives (the latest device clock among the ranks) and lasts
what :func:`trnsim.collectives.collective_time` gives for its size, group and the cluster's topology; so a rank
that reaches it early waits, and imbalance shows in its clock and in ``trnsim.profile_torch()`` rows
(``c10d::<collective>``, kind ``collective``).

Before its payload moves, every collective exchanges a small header among the group's ranks (sequence number,
collective, element count, dtype, shape, arrival time).  Ranks that disagree (shapes, dtypes, or a different
collective: one issued on a subset of the ranks while the others issue another) raise
:class:`NeuronCollectiveError` on every rank, naming the ranks.  A rank that never arrives (dead, or never issuing
the collective) makes the others raise after ``TRNSIM_DIST_TIMEOUT`` seconds (default: the process group's
timeout, at most 300 s), naming the ranks that did not arrive.

Placement: each rank runs on one logical NeuronCore of one instance (node) of the cluster topology, and the
collective model times a collective over the links between the group's cores (NeuronLink inside an instance, EFA
between instances).  The node of a rank is its launcher's node (torchrun's ``GROUP_RANK`` of ``GROUP_WORLD_SIZE``
nodes: ``--nnodes 2 --node-rank 1`` puts its ranks on instance 1) or, without a multi-node launcher, ranks fill
``TRNSIM_NODES`` instances in order (default: as few as hold the world).  Its core is the device it selected
(``torch.neuron.set_device(LOCAL_RANK)``, as CUDA code does), else its local rank.  Every collective's header
carries each rank's (node, core), so the time follows where the ranks are; two ranks of a group on one core raise
:class:`NeuronCollectiveError`.

Environment: ``TRNSIM_TOPOLOGY`` (default by target: trn1.32xlarge, trn2.48xlarge, trn3-gen1-ultraserver),
``TRNSIM_NODES`` (instances the world is spread over; default: the launcher's nodes, else as few as hold the
world), ``TRNSIM_DIST_TIMEOUT``.
"""

from __future__ import annotations

import atexit
import datetime
import os
import struct
import sys
import weakref
import zlib

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d
from torch._C._distributed_c10d import ProcessGroupGloo, ReduceOp

from .. import config
from .device_state import STATE

__all__ = ["NeuronProcessGroup", "NeuronCollectiveError", "register", "COLLECTIVE_OPS", "cluster_topology"]

BACKEND = "neuron"

# c10d functional collectives that reach the device's __torch_dispatch__: they run natively (their payload moves
# in the process group, which charges their time), never as a CPU fallback.
COLLECTIVE_OPS = ("all_reduce all_reduce_ all_reduce_coalesced all_reduce_coalesced_ all_gather_into_tensor "
                  "all_gather_into_tensor_out all_gather_into_tensor_coalesced reduce_scatter_tensor "
                  "reduce_scatter_tensor_out reduce_scatter_tensor_coalesced all_to_all_single broadcast broadcast_ "
                  "wait_tensor _wrap_tensor_autograd").split()

_OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "reduce", "gather",
        "scatter", "send_recv"]
_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2]
_MAX_DEFAULT_TIMEOUT_S = 300.0


class NeuronCollectiveError(RuntimeError):
    """A collective of the simulated ``neuron`` backend failed: ranks disagree, or some never arrived."""


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: expected an integer") from None


def _launcher_nodes():
    """``(node rank, nodes)`` from a multi-node launcher (torchrun's ``GROUP_RANK``/``GROUP_WORLD_SIZE``), or None
    (one node, or no launcher, or ``TRNSIM_NODES`` set, which places ranks itself)."""
    if config.nodes is not None:
        return None
    n, r = _env_int("GROUP_WORLD_SIZE"), _env_int("GROUP_RANK")
    if n is None or r is None or n < 2:
        return None
    return r, n


def cluster_topology(world_size: int):
    """The topology the world's ranks are placed on: the instance (``TRNSIM_TOPOLOGY``) repeated over the nodes
    (``TRNSIM_NODES``, else the launcher's nodes, else as few as hold ``world_size`` ranks with as many on each)."""
    from .device_module import instance_topology
    topo = instance_topology()
    per_node = topo.chips_per_domain * topo.logical_cores_per_chip
    nodes = config.nodes                       # validated by trnsim.config (a positive integer)
    if nodes is not None:
        pass
    elif _launcher_nodes() is not None:
        nodes = _launcher_nodes()[1]
    else:
        nodes = -(-world_size // per_node)
        while world_size % nodes:
            nodes += 1
    return topo.with_nodes(nodes) if nodes > 1 else topo


def rank_position(rank: int, world_size: int, topo=None) -> int:
    """Where global rank ``rank`` (this process) runs, as ``node * cores per node + core`` on
    :func:`cluster_topology` (see the module text)."""
    topo = topo or cluster_topology(world_size)
    per_node = topo.chips_per_domain * topo.logical_cores_per_chip
    launcher = _launcher_nodes()
    if launcher is not None:
        node = launcher[0]
        local = _env_int("LOCAL_RANK")
    else:
        if world_size % topo.nodes:
            raise ValueError(f"{world_size} ranks cannot be divided equally over TRNSIM_NODES={topo.nodes} instances")
        node, local = divmod(rank, world_size // topo.nodes)
    core = STATE.current if STATE.selected else (local if local is not None else rank % per_node)
    if not 0 <= node < topo.nodes:
        raise ValueError(f"rank {rank} is on node {node}, but the cluster has {topo.nodes} ({topo.name})")
    if not 0 <= core < per_node:
        raise ValueError(f"rank {rank} would run on core {core} of node {node}, but an instance of {topo.name} has "
                         f"{per_node} logical NeuronCores (torch.neuron.set_device(i) with i < {per_node})")
    return node * per_node + core


_KNOWN = {}     # global rank -> position, as the last header exchange said (point-to-point uses it)


def _payload(t):
    from .tensor import DEVICE_TYPES
    p = getattr(t, "_p", None)
    return p if p is not None and type(t) in DEVICE_TYPES else t


def _flat(xs):
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        elif isinstance(x, torch.Tensor):
            out.append(x)
    return out


def _on_device(ts):
    """Device data: neuron tensors, or the CPU payloads a c10d functional op on neuron tensors hands the group
    (its CPU kernel runs inside the device's ``__torch_dispatch__``, found on the stack)."""
    from .tensor import DEVICE_TYPES
    if any(type(t) in DEVICE_TYPES for t in ts):
        return True
    from .tensor import dispatch
    code = dispatch.__code__
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is code:
            return True
        f = f.f_back
    return False


def _shape_key(ts):
    text = ";".join(f"{tuple(t.shape)}" for t in ts)
    return zlib.crc32(text.encode())


def _describe(ts):
    if not ts:
        return "no tensors"
    if len(ts) == 1:
        return f"{tuple(ts[0].shape)} {str(ts[0].dtype).replace('torch.', '')}"
    return f"{len(ts)} tensors, first {tuple(ts[0].shape)} {str(ts[0].dtype).replace('torch.', '')}"


class NeuronProcessGroup(dist.ProcessGroup):
    """One process group of the simulated backend (see the module text)."""

    def __init__(self, store, rank, size, timeout, global_ranks=None, group_name=""):
        super().__init__(rank, size)
        self._store = store
        self._global = list(global_ranks) if global_ranks else list(range(size))
        secs = config.dist_timeout
        if secs is None:
            secs = min(timeout.total_seconds() if timeout else _MAX_DEFAULT_TIMEOUT_S, _MAX_DEFAULT_TIMEOUT_S)
        self._timeout = datetime.timedelta(seconds=secs)
        self._gloo = ProcessGroupGloo(store, rank, size, self._timeout)
        _LIVE.add(self)
        self._seq = 0
        self._name = group_name
        self._world = dist.get_world_size() if dist.is_initialized() else size
        self._topology = None
        self._positions = list(range(size))

    # -- names (functional collectives look the group up by name) --------------------------------------------
    def getBackendName(self):
        return BACKEND

    def setGroupName(self, name):
        self._name = name

    def getGroupName(self):
        return self._name

    @property
    def group_name(self):
        return self._name

    def _set_group_name(self, name):
        self._name = name

    # -- shutdown --------------------------------------------------------------------------------------------
    def shutdown(self):
        """Release the inner gloo group now (``dist.destroy_process_group`` calls this; so does interpreter exit).

        gloo's worker threads drop a finished work, and with it the Python objects of its tensors, only after
        ``wait()`` has returned.  If that happens while the interpreter is finalizing, the thread cannot take the
        GIL and the process aborts ("terminate called without an active exception").  Destroying the gloo group
        joins those threads first, while the interpreter is whole (its binding releases the GIL meanwhile)."""
        gloo, self._gloo = self._gloo, None
        _LIVE.discard(self)
        del gloo

    def _live_gloo(self, op):
        if self._gloo is None:
            raise NeuronCollectiveError(f"neuron backend: {op} on ranks {self._global} after the process group "
                                        "was shut down (dist.destroy_process_group)")
        return self._gloo

    # -- the protocol ----------------------------------------------------------------------------------------
    def _topo(self):
        if self._topology is None:
            world = max(self._world, max(self._global) + 1)
            topo = cluster_topology(world)
            self._topology = (topo, topo.nodes * topo.chips_per_domain * topo.logical_cores_per_chip, world)
        return self._topology

    def _my_position(self):
        topo, _, world = self._topo()
        return rank_position(self._global[self.rank()], world, topo)

    def _position_or_minus_one(self):
        """This rank's position for a header; -1 (and the reason kept) when it cannot be placed, so that every rank
        raises after the exchange instead of the others waiting for it."""
        try:
            self._misplaced = None
            return self._my_position()
        except ValueError as e:
            self._misplaced = str(e)
            return -1

    def _where(self, pos):
        topo = self._topo()[0]
        node, core = divmod(pos, topo.chips_per_domain * topo.logical_cores_per_chip)
        return f"node {node}'s neuron:{core}"

    def _header(self, op, ts, extra):
        dt = ts[0].dtype if ts else torch.float32
        code = _DTYPES.index(dt) if dt in _DTYPES else 99
        return torch.tensor([self._seq, _OPS.index(op), sum(t.numel() for t in ts), code, _shape_key(ts),
                             _f2i(STATE.now_ns), int(extra), self._position_or_minus_one()], dtype=torch.int64)

    def _fail_missing(self, op, exc):
        missing = []
        try:
            for r in range(self.size()):
                if not self._store.check([f"trnsim/{self._seq}/{r}"]):
                    missing.append(self._global[r])
        except Exception:      # the store itself is gone (its host rank died)
            missing = None
        who = (f"ranks {missing} did not arrive" if missing else
               "a rank left (its connection closed)" if missing == [] else "the rendezvous store is gone")
        raise NeuronCollectiveError(
            f"neuron backend: {op} #{self._seq} on ranks {self._global} (this is rank "
            f"{self._global[self.rank()]}): {who} within {self._timeout.total_seconds():g} s "
            f"(TRNSIM_DIST_TIMEOUT): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    def _arrive(self, op, ts, extra=0, check_shapes=True):
        """Exchange headers; raise on disagreement; return the latest arrival (ns) among the ranks."""
        self._live_gloo(op)
        self._seq += 1
        try:
            self._store.set(f"trnsim/{self._seq}/{self.rank()}", op)
        except Exception:
            pass
        mine = self._header(op, ts, extra)
        outs = [torch.empty_like(mine) for _ in range(self.size())]
        try:
            self._gloo.allgather([outs], [mine]).wait()
        except Exception as exc:     # noqa: BLE001 -- gloo raises RuntimeError/DistBackendError
            self._fail_missing(op, exc)
        heads = [o.tolist() for o in outs]
        self._positions = [h[7] for h in heads]
        if -1 in self._positions:
            bad = [self._global[r] for r, p in enumerate(self._positions) if p == -1]
            raise NeuronCollectiveError(f"neuron backend: {op} #{self._seq} on ranks {self._global}: ranks {bad} "
                                        f"cannot be placed on the cluster"
                                        + (f": {self._misplaced}" if getattr(self, "_misplaced", None) else ""))
        for r, pos in enumerate(self._positions):
            _KNOWN[self._global[r]] = pos
        if len(set(self._positions)) < len(heads):
            seen = {}
            for r, pos in enumerate(self._positions):
                seen.setdefault(pos, []).append(self._global[r])
            clash = "; ".join(f"ranks {rs} on {self._where(p)}" for p, rs in seen.items() if len(rs) > 1)
            raise NeuronCollectiveError(
                f"neuron backend: {op} #{self._seq} on ranks {self._global}: two ranks on one core ({clash}); give "
                "each rank of a node its own device (torch.neuron.set_device(LOCAL_RANK))")
        ops = [_OPS[h[1]] if 0 <= h[1] < len(_OPS) else "?" for h in heads]
        if len(set(ops)) > 1:
            groups = {}
            for r, o in enumerate(ops):
                groups.setdefault(o, []).append(self._global[r])
            raise NeuronCollectiveError(
                f"neuron backend: collective #{self._seq} on ranks {self._global} differs across ranks: "
                + "; ".join(f"ranks {rs} issued {o}" for o, rs in groups.items())
                + " (a collective issued on a subset of the ranks)")
        if check_shapes:
            keys = [(h[2], h[3], h[4], h[6]) for h in heads]
            if len(set(keys)) > 1:
                ref = keys[0]
                bad = [self._global[r] for r, k in enumerate(keys) if k != ref]
                desc = []
                for r, h in enumerate(heads):
                    dt = _DTYPES[h[3]] if h[3] < len(_DTYPES) else "?"
                    desc.append(f"rank {self._global[r]}: {h[2]} elements {str(dt).replace('torch.', '')}")
                raise NeuronCollectiveError(
                    f"neuron backend: {op} #{self._seq}: ranks {bad} disagree with rank {self._global[0]} on the "
                    f"tensors' shapes/dtypes ({'; '.join(desc)}; this rank {self._global[self.rank()]}: "
                    f"{_describe(ts)})")
        return max(_i2f(h[5]) for h in heads)

    def _charge(self, op, ts, size, latest, group=None, device=True):
        if not device:
            return
        from ..collectives import collective_time
        topo, world, _ = self._topo()      # collective_time's ranks are positions (node * cores per node + core)
        grp = group if group is not None else self._positions
        start = STATE.now_ns
        if len(grp) > 1 and size > 0 and op != "barrier":
            ns = collective_time(op if op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                              "broadcast", "send_recv") else "all_reduce",
                                 int(size), topo, nranks=world, group=grp).time_ns
        elif len(grp) > 1:
            ns = collective_time("all_reduce", 4, topo, nranks=world, group=grp).time_ns
        else:
            ns = 0.0
        end = max(latest, start) + ns
        STATE.now_ns = end
        if STATE.profilers:
            from .charging import caller_line
            shapes = tuple(tuple(t.shape) for t in ts)
            dtypes = tuple(str(t.dtype).replace("torch.", "") for t in ts)
            for p in STATE.profilers:
                p.add(f"c10d::{op}", shapes, dtypes, start, end, "collective", int(size), 0.0, caller_line())

    def _run(self, op, ts_in, ts_out, size, call, extra=0, check_shapes=True):
        device = _on_device(ts_in + ts_out)
        with torch.profiler.record_function(f"neuron::{op}"):     # a row in torch.profiler tables and traces
            latest = self._arrive(op, ts_in, extra, check_shapes)
            try:
                work = call()
                work.wait()
            except NeuronCollectiveError:
                raise
            except Exception as exc:     # noqa: BLE001
                self._fail_missing(op, exc)
            self._charge(op, ts_in + ts_out, size, latest, device=device)
        return work

    # -- collectives -----------------------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = _opts(_c10d.AllreduceOptions, opts)
        ts = _flat(tensors)
        ps = [_payload(t) for t in ts]
        avg = _red(opts.reduceOp) == int(ReduceOp.AVG)
        size = sum(t.numel() * t.element_size() for t in ts)

        def call():
            if avg:
                o = _c10d.AllreduceOptions()
                o.reduceOp = ReduceOp.SUM
                self._gloo.allreduce(ps, o).wait()
                for p in ps:
                    p.div_(self.size())
                return _Done()     # not gloo's work: waiting on it again would copy the sums out again
            return self._gloo.allreduce(ps, opts)
        return self._run("all_reduce", ts, [], size, call, extra=_red(opts.reduceOp))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = _opts(_c10d.AllreduceCoalescedOptions, opts)
        ts = _flat(tensors)
        ps = [_payload(t) for t in ts]
        size = sum(t.numel() * t.element_size() for t in ts)
        return self._run("all_reduce", ts, [], size, lambda: self._gloo.allreduce_coalesced(ps, opts))

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = _opts(_c10d.AllgatherOptions, opts)
        ins = _flat(input_tensors)
        outs = _flat(output_tensors)
        pin = [_payload(t) for t in ins]
        pout = [[_payload(t) for t in lst] for lst in output_tensors]
        size = sum(t.numel() * t.element_size() for t in outs)
        return self._run("all_gather", ins, outs, size, lambda: self._gloo.allgather(pout, pin, opts))

    def _allgather_base(self, output, input, opts=None):
        opts = _opts(_c10d.AllgatherOptions, opts)
        size = output.numel() * output.element_size()
        return self._run("all_gather", [input], [output], size,
                         lambda: self._gloo._allgather_base(_payload(output), _payload(input), opts))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = _opts(_c10d.AllgatherOptions, opts)
        size = sum(o.numel() * o.element_size() for o in outputs)
        return self._run("all_gather", list(inputs), list(outputs), size,
                         lambda: _each(self._gloo._allgather_base, [_payload(o) for o in outputs],
                                       [_payload(i) for i in inputs], opts))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        opts = _opts(_c10d.AllgatherOptions, opts)
        outs = _flat(output_lists)
        size = sum(o.numel() * o.element_size() for o in outs)
        return self._run("all_gather", list(input_list), outs, size,
                         lambda: self._gloo.allgather_coalesced([[_payload(t) for t in lst] for lst in output_lists],
                                                                [_payload(t) for t in input_list], opts))

    def _rs_call(self, fn, out_payloads, opts):
        """gloo has no AVG reduce-scatter: SUM, then divide (what the runtime's AVG computes)."""
        if _red(opts.reduceOp) == int(ReduceOp.AVG):
            o = _c10d.ReduceScatterOptions()
            o.reduceOp = ReduceOp.SUM
            fn(o).wait()
            for p in out_payloads:
                p.div_(self.size())
            return _Done()         # not gloo's work: waiting on it again would copy the sums out again
        return fn(opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = _opts(_c10d.ReduceScatterOptions, opts)
        outs = _flat(output_tensors)
        ins = _flat(input_tensors)
        size = sum(t.numel() * t.element_size() for t in ins)
        pout = [_payload(t) for t in output_tensors]
        pin = [[_payload(t) for t in lst] for lst in input_tensors]
        return self._run("reduce_scatter", outs, ins, size,
                         lambda: self._rs_call(lambda o: self._gloo.reduce_scatter(pout, pin, o), pout, opts),
                         extra=_red(opts.reduceOp))

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = _opts(_c10d.ReduceScatterOptions, opts)
        size = input.numel() * input.element_size()
        po, pi = _payload(output), _payload(input)
        return self._run("reduce_scatter", [input], [output], size,
                         lambda: self._rs_call(lambda o: self._gloo._reduce_scatter_base(po, pi, o), [po], opts),
                         extra=_red(opts.reduceOp))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = _opts(_c10d.ReduceScatterOptions, opts)
        size = sum(i.numel() * i.element_size() for i in inputs)
        po = [_payload(o) for o in outputs]
        pi = [_payload(i) for i in inputs]
        return self._run("reduce_scatter", list(inputs), list(outputs), size,
                         lambda: self._rs_call(lambda o: _each(self._gloo._reduce_scatter_base, po, pi, o),
                                               po, opts), extra=_red(opts.reduceOp))

    def broadcast(self, tensors, opts=None):
        opts = _opts(_c10d.BroadcastOptions, opts)
        ts = _flat(tensors)
        size = sum(t.numel() * t.element_size() for t in ts)
        return self._run("broadcast", ts, [], size,
                         lambda: self._gloo.broadcast([_payload(t) for t in ts], opts), extra=opts.rootRank)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = _opts(_c10d.AllToAllOptions, opts)
        size = input.numel() * input.element_size()
        return self._run("all_to_all", [input], [output], size,
                         lambda: self._gloo.alltoall_base(_payload(output), _payload(input),
                                                          output_split_sizes, input_split_sizes, opts),
                         check_shapes=not (output_split_sizes or input_split_sizes))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = _opts(_c10d.AllToAllOptions, opts)
        size = sum(t.numel() * t.element_size() for t in input_tensors)
        return self._run("all_to_all", list(input_tensors), list(output_tensors), size,
                         lambda: self._gloo.alltoall([_payload(t) for t in output_tensors],
                                                     [_payload(t) for t in input_tensors], opts),
                         check_shapes=False)

    def barrier(self, opts=None):
        latest = self._arrive("barrier", [])
        self._charge("barrier", [], 0, latest, device=True)
        return _Done()

    def reduce(self, tensors, opts=None):
        opts = _opts(_c10d.ReduceOptions, opts)
        ts = _flat(tensors)
        size = sum(t.numel() * t.element_size() for t in ts)
        return self._run("reduce", ts, [], size, lambda: self._gloo.reduce([_payload(t) for t in ts], opts),
                         extra=opts.rootRank)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = _opts(_c10d.GatherOptions, opts)
        ins = _flat(input_tensors)
        size = sum(t.numel() * t.element_size() for t in ins) * self.size()
        return self._run("gather", ins, [], size,
                         lambda: self._gloo.gather([[_payload(t) for t in lst] for lst in output_tensors],
                                                   [_payload(t) for t in ins], opts), extra=opts.rootRank)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = _opts(_c10d.ScatterOptions, opts)
        outs = _flat(output_tensors)
        size = sum(t.numel() * t.element_size() for t in outs) * self.size()
        return self._run("scatter", outs, [], size,
                         lambda: self._gloo.scatter([_payload(t) for t in outs],
                                                    [[_payload(t) for t in lst] for lst in input_tensors], opts),
                         extra=opts.rootRank)

    # torch 2.13's names for the single-tensor collectives
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def _peer_position(self, r):
        """The position of group rank ``r`` for a send: as its last collective header said, else where it would be
        without a device of its own choosing (its local rank's core)."""
        g = self._global[r]
        if g in _KNOWN:
            return _KNOWN[g]
        topo, _, world = self._topo()
        per_node = topo.chips_per_domain * topo.logical_cores_per_chip
        launcher = _launcher_nodes()
        if launcher is not None:      # torchrun's ranks: node after node, LOCAL_WORLD_SIZE each
            lws = _env_int("LOCAL_WORLD_SIZE") or -(-world // launcher[1])
            node, local = divmod(g, lws)
        else:
            node, local = divmod(g, world // topo.nodes)
        return node * per_node + local

    # point to point: the header travels with the payload (the sender's clock and position)
    def send(self, tensors, dst, tag=0):
        self._live_gloo("send")
        ts = _flat(tensors)
        head = torch.tensor([_f2i(STATE.now_ns), sum(t.numel() for t in ts), self._my_position()],
                            dtype=torch.int64)
        try:
            self._gloo.send([head], dst, tag).wait()
            w = self._gloo.send([_payload(t) for t in ts], dst, tag)
            w.wait()
        except Exception as exc:     # noqa: BLE001
            raise NeuronCollectiveError(f"neuron backend: send from rank {self._global[self.rank()]} to rank "
                                        f"{self._global[dst]} failed within {self._timeout.total_seconds():g} s: "
                                        f"{str(exc).splitlines()[0]}") from None
        size = sum(t.numel() * t.element_size() for t in ts)
        me = self._my_position()
        peer = self._peer_position(dst)
        self._charge("send_recv", ts, size, STATE.now_ns, group=[me, peer] if peer != me else [me],
                     device=_on_device(ts))
        return _Done()        # gloo's point-to-point work must not be waited on twice

    def recv(self, tensors, src, tag=0):
        self._live_gloo("recv")
        ts = _flat(tensors)
        head = torch.empty(3, dtype=torch.int64)
        try:
            self._gloo.recv([head], src, tag).wait()
            n = sum(t.numel() for t in ts)
            if int(head[1]) != n:
                raise NeuronCollectiveError(f"neuron backend: rank {self._global[self.rank()]} receives {n} "
                                            f"elements but rank {self._global[src]} sends {int(head[1])}")
            w = self._gloo.recv([_payload(t) for t in ts], src, tag)
            w.wait()
        except NeuronCollectiveError:
            raise
        except Exception as exc:     # noqa: BLE001
            raise NeuronCollectiveError(f"neuron backend: recv on rank {self._global[self.rank()]} from rank "
                                        f"{self._global[src]} failed within {self._timeout.total_seconds():g} s: "
                                        f"{str(exc).splitlines()[0]}") from None
        size = sum(t.numel() * t.element_size() for t in ts)
        me, peer = self._my_position(), int(head[2])
        _KNOWN[self._global[src]] = peer
        self._charge("send_recv", ts, size, _i2f(int(head[0])), group=[peer, me] if peer != me else [me],
                     device=_on_device(ts))
        return _Done()


class _Done(dist.Work if hasattr(dist, "Work") else object):
    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result([])
        return fut


def _each(fn, outs, ins, opts):
    """gloo binds no coalesced single-tensor collectives: run them one by one, return the last work."""
    w = None
    for o, i in zip(outs, ins):
        w = fn(o, i, opts)
        w.wait()
    return w if w is not None else _Done()


def _f2i(x):
    """A float64 clock reading carried exactly in an int64 header slot."""
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def _i2f(i):
    return struct.unpack("<d", struct.pack("<q", int(i)))[0]


def _red(op):
    """The reduction's type as an int (``ReduceOp`` objects wrap a ``RedOpType``)."""
    op = getattr(op, "op", op)
    return int(op)


def _opts(cls, opts):
    return opts if opts is not None else cls()


def _create(dist_opts, backend_options=None):
    return NeuronProcessGroup(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout,
                              dist_opts.global_ranks_in_group, dist_opts.group_id)


_REGISTERED = False
_LIVE = weakref.WeakSet()       # groups whose gloo group is not yet released


@atexit.register
def _release_at_exit():
    """Scripts that never call ``destroy_process_group``: release every group before finalization begins."""
    for pg in list(_LIVE):
        pg.shutdown()


def register():
    """Register the ``neuron`` backend with torch.distributed and the c10d functional collectives as native
    device ops.  Called by ``trnsim.backend.register()``; idempotent."""
    global _REGISTERED
    if _REGISTERED or not dist.is_available():
        return
    from .op_table import TABLE
    for name in COLLECTIVE_OPS:
        TABLE.setdefault(name, "collective")
    from . import patches
    patches._functional_collectives_wrap()
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["neuron", "cpu"])
    _REGISTERED = True
