"""The ``neuron`` backend in one process (a world of one rank): registration, the functional-collectives patch,
native (not fallback) c10d functional ops, profile rows, the topology the ranks are placed on."""

import datetime

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import trnsim  # noqa: E402
from trnsim.backend import distributed as D, patches  # noqa: E402


@pytest.fixture
def world1():
    assert dist.is_available()
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_backend_registered_and_named(world1):
    assert dist.get_backend() == "neuron"
    assert isinstance(world1, D.NeuronProcessGroup)
    assert "_functional_collectives._maybe_wrap_tensor" in patches.APPLIED


def test_functional_collective_on_neuron_is_native_and_plain(world1):
    import torch.distributed._functional_collectives as fc
    trnsim.backend.reset_fallback_counts()
    x = torch.arange(6.0, device="neuron")
    with trnsim.profile_torch() as prof:
        y = fc.all_reduce(x, "sum", world1)
    # the payload reached the group as a CPU tensor, inside the device's dispatch: still a device collective
    assert [(r.op, r.kind) for r in prof.rows if r.kind == "collective"] == [("c10d::all_reduce", "collective")]
    assert type(y).__name__ == "NeuronTensor" and y.device.type == "neuron"   # the patch: no AsyncCollectiveTensor
    assert torch.equal(y.to("cpu"), torch.arange(6.0))
    g = fc.all_gather_tensor(x, 0, world1)
    assert torch.equal(g.to("cpu"), torch.arange(6.0))
    assert not any("c10d" in k or "all_" in k or "wait" in k for k in trnsim.backend.fallback_counts())
    # CPU tensors keep torch's own path
    with trnsim.profile_torch() as prof:
        z = fc.wait_tensor(fc.all_reduce(torch.ones(3), "sum", world1))
    assert torch.equal(torch.as_tensor(z), torch.ones(3))
    assert not prof.rows                                        # host collectives cost no device time


def test_avg_and_profile_rows(world1):
    x = torch.full((8,), 3.0, device="neuron")
    with trnsim.profile_torch() as prof:
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        out = torch.empty(8, device="neuron")
        dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.AVG)
    assert torch.equal(out.to("cpu"), torch.full((8,), 3.0))
    rows = [r for r in prof.rows if r.kind == "collective"]
    assert [r.op for r in rows] == ["c10d::all_reduce", "c10d::reduce_scatter"]
    assert all(r.end_ns == r.start_ns for r in rows)          # one rank: nothing moves, no time
    assert rows[0].bytes == 32


def test_cluster_topology_from_world_size(monkeypatch):
    monkeypatch.delenv("TRNSIM_TOPOLOGY", raising=False)
    monkeypatch.delenv("TRNSIM_NODES", raising=False)
    assert D.cluster_topology(64).name == "trn2.48xlarge" and D.cluster_topology(64).nodes == 1
    assert D.cluster_topology(256).nodes == 4                 # 64 ranks per trn2.48xlarge at LNC=2
    monkeypatch.setenv("TRNSIM_TOPOLOGY", "trn2-ultraserver")
    assert D.cluster_topology(256).nodes == 1


def test_collectives_are_rows_in_torch_profiler(world1):
    x = torch.ones(16, device="neuron")
    with torch.profiler.profile() as prof:
        dist.all_reduce(x)
        dist.broadcast(x, 0)
    names = {e.key for e in prof.key_averages()}
    assert {"neuron::all_reduce", "neuron::broadcast"} <= names


def test_shutdown_releases_the_inner_gloo_group():
    """destroy_process_group (and interpreter exit, for scripts that never call it) release the inner gloo group,
    so its worker threads drop their finished works while the interpreter can still take their tensors back."""
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
    pg = dist.group.WORLD
    x = torch.ones(3, device="neuron")
    dist.all_reduce(x)
    assert pg in D._LIVE and pg._gloo is not None
    dist.destroy_process_group()
    assert pg._gloo is None and pg not in D._LIVE
    with pytest.raises(D.NeuronCollectiveError, match="after the process group was shut down"):
        pg.allreduce([x])
    # the exit hook releases groups nobody destroyed
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
    pg2 = dist.group.WORLD
    D._release_at_exit()
    assert pg2._gloo is None and not D._LIVE
    dist.destroy_process_group()
