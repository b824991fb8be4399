"""Each process sees the simulated instance's logical NeuronCores and a rank runs on the one it picks (issue 28):
CUDA-style launch code (``torch.neuron.set_device(LOCAL_RANK)``, ``neuron:LOCAL_RANK``) trains FSDP2 under torchrun
on 2 and 4 ranks and on two torchrun "nodes" (c10d rendezvous on localhost), where the collective's simulated time
is the inter-instance (EFA) one."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import dist_jobs  # noqa: E402
finally:
    sys.path.remove(HERE)

ALLREDUCE_BYTES = 1 << 20      # dist_jobs.run_local_rank's timed all-reduce


def _env(**extra):
    env = dict(os.environ, TORCHNEURON_TARGET="sim", TRNSIM_DIST_TIMEOUT="60", OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    for k in ("TRNSIM_NODES", "TRNSIM_TOPOLOGY", "NEURON_LOGICAL_NC_CONFIG", "NEURON_PLATFORM_TARGET_OVERRIDE"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(os.path.dirname(HERE))] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- one process, several indices -----------------------------------------------------------------------------
_INDICES = r"""
import json, torch
import trnsim.backend.tensor as T
n, out = torch.neuron, {}
out["count"] = n.device_count()
try:
    n.set_device(out["count"])
except RuntimeError as e:
    out["past_end"] = str(e)
n.set_device(1)                                   # before any tensor: neuron:1 is this process's device
x = torch.ones(3, device="neuron", requires_grad=True)
(x * 2).sum().backward()
m = torch.nn.Linear(4, 2).to("neuron:1")
out["on1"] = [str(x.device), x.get_device(), str(x.grad.device), str(m.weight.device),
              str(m(torch.randn(3, 4, device="neuron:1")).device), torch.accelerator.current_device_index()]
out["same_index_is_noop"] = x.to("neuron:1") is x and x.to("neuron") is x
out["multi_before"] = T.MULTI
z = x.detach().to("neuron:0")                     # a move between indices, as between CUDA devices
out["moved"] = [str(z.device), str((z * 3).device), str((z + 1).device), str(z.sum().device), z.tolist(),
                str(torch.zeros_like(z).device), str(z.to("neuron:2").device)]
try:
    z + x.detach()
except RuntimeError as e:
    out["cross"] = str(e)
with n.device(0):
    out["scoped"] = [n.current_device(), str(torch.empty(2, device="neuron").device),
                     str(torch.ones(2).to("neuron").device)]
out["after"] = [n.current_device(), str(torch.empty(2, device="neuron").device)]
with n.device(0):
    w = torch.ones(3, device="neuron", requires_grad=True)   # autograd across a move: the gradient comes back
(w.to("neuron:2") * 2).sum().backward()
out["grad_back"] = [str(w.grad.device), w.grad.tolist()]
print("RESULT", json.dumps(out))
"""


def _run_indices(**env):
    proc = subprocess.run([sys.executable, "-c", _INDICES], env=_env(**env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


def test_a_process_sees_the_instance_and_tensors_carry_their_index():
    out = _run_indices()
    # trn2.48xlarge: 16 chips x 8 physical cores / LNC=2 (topology.py: trn2-arch; targets.py)
    assert out["count"] == 64
    assert "neuron:64 does not exist" in out["past_end"] and "64 logical NeuronCores" in out["past_end"]
    assert out["on1"] == ["neuron:1", 1, "neuron:1", "neuron:1", "neuron:1", 1]
    assert out["same_index_is_noop"] and not out["multi_before"]
    assert out["moved"] == ["neuron:0", "neuron:0", "neuron:0", "neuron:0", [1.0, 1.0, 1.0], "neuron:0",
                            "neuron:2"]
    assert "Expected all tensors to be on the same device" in out["cross"] and "neuron:0 and neuron:1" in out["cross"]
    assert out["scoped"] == [0, "neuron:0", "neuron:0"]
    assert out["after"] == [1, "neuron:1"]
    assert out["grad_back"] == ["neuron:0", [2.0, 2.0, 2.0]]


@pytest.mark.parametrize("env,count", [({"NEURON_LOGICAL_NC_CONFIG": "1"}, 128),          # 16 x 8 / 1
                                       ({"NEURON_PLATFORM_TARGET_OVERRIDE": "trn1"}, 32)])  # 16 chips x 2 cores
def test_device_count_follows_target_and_lnc(env, count):
    code = "import torch; print('RESULT', torch.neuron.device_count())"
    proc = subprocess.run([sys.executable, "-c", code], env=_env(**env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split("RESULT ", 1)[1]) == count


# -- torchrun ---------------------------------------------------------------------------------------------------
def _reference(world):
    """Data-parallel SGD on the CPU in float64: each step's per-rank losses, and the parameters after the last step
    (FSDP2 averages the ranks' gradients)."""
    model = dist_jobs.mlp_model().double()
    losses = []
    for step in range(dist_jobs.MLP_STEPS):
        model.zero_grad()
        per_rank = []
        for r in range(world):
            x, y = (t.double() for t in dist_jobs.mlp_batch(r, step))
            loss = torch.nn.functional.mse_loss(model(x), y)
            (loss / world).backward()
            per_rank.append(float(loss.detach()))
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        losses.append(per_rank)
    return losses, {n: p.detach() for n, p in model.named_parameters()}


def _check_training(results, world):
    losses, params = _reference(world)
    for res in results:
        r = res["rank"]
        assert res["losses"] == pytest.approx([step[r] for step in losses], rel=1e-5)
        for name, p in params.items():
            torch.testing.assert_close(res["params"][name].double(), p, rtol=1e-5, atol=1e-6)
        assert res["sum"] == world


def _load(out, world):
    return [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False) for r in range(world)]


def _collective_ns(nodes, positions):
    from trnsim.collectives import collective_time, get_topology
    topo = get_topology("trn2.48xlarge", nodes=nodes)
    return collective_time("all_reduce", ALLREDUCE_BYTES, topo, nranks=64 * nodes, group=positions).time_ns


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])   # 4 ranks: ~30 s loaded
def test_set_device_local_rank_fsdp2_under_torchrun(tmp_path, world):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world), "--master-port",
           str(_free_port()), os.path.join(HERE, "dist_jobs.py"), str(tmp_path), "local_rank_fsdp"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = _load(tmp_path, world)
    for r, res in enumerate(results):
        assert res["local"] == r and res["current"] == r and res["count"] == 64
        assert res["devices"] == [f"neuron:{r}"]        # parameters, gradients, inputs and loss on its own core
    _check_training(results, world)
    # ranks 0..world-1 on cores 0..world-1 of one trn2.48xlarge (4 logical cores per chip at LNC=2)
    want = _collective_ns(1, list(range(world)))
    assert [res["allreduce_ns"] for res in results] == pytest.approx([want] * world, rel=1e-9)


def test_two_torchrun_nodes_communicate_over_efa(tmp_path):
    port = _free_port()
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", f"trnsim-{port}", os.path.join(HERE, "dist_jobs.py"), str(tmp_path), "local_rank_fsdp"]
        procs.append(subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    results = _load(tmp_path, 2)
    assert sorted(res["group_rank"] for res in results) == [0, 1]
    for res in results:
        assert res["group_rank"] == res["rank"] and res["local"] == 0 and res["devices"] == ["neuron:0"]
    _check_training(results, 2)
    # each rank is neuron:0 of its own instance: the all-reduce crosses EFA (positions 0 and 64 of 2 x 64 cores)
    efa = _collective_ns(2, [0, 64])
    assert [res["allreduce_ns"] for res in results] == pytest.approx([efa, efa], rel=1e-9)
    assert efa > 5 * _collective_ns(1, [0, 1])      # the same two ranks on one instance: NeuronLink


def test_two_ranks_on_one_core_are_refused_on_every_rank(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(_free_port()), os.path.join(HERE, "dist_jobs.py"), str(tmp_path), "same_core"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for r in range(2):
        out = json.load(open(os.path.join(tmp_path, f"rank{r}.json")))
        assert not out["ok"] and out["type"] == "NeuronCollectiveError", out
        assert "two ranks on one core (ranks [0, 1] on node 0's neuron:0)" in out["msg"]


# -- placement without processes ----------------------------------------------------------------------------------
@pytest.fixture
def placement(monkeypatch):
    import trnsim.backend  # noqa: F401  (registers the device under the sim target)
    from trnsim.backend import distributed as D
    from trnsim.backend.device_state import STATE
    for k in ("TRNSIM_NODES", "TRNSIM_TOPOLOGY", "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(STATE, "selected", False)
    monkeypatch.setattr(STATE, "current", 0)
    return D, STATE, monkeypatch


def test_rank_positions_follow_launcher_nodes_and_selected_core(placement):
    D, STATE, mp = placement
    # no launcher: as few instances as hold the world, ranks in order (what the model always did)
    assert D.cluster_topology(8).nodes == 1 and [D.rank_position(r, 8) for r in range(8)] == list(range(8))
    mp.setenv("TRNSIM_NODES", "2")
    assert [D.rank_position(r, 8) for r in range(8)] == [0, 1, 2, 3, 64, 65, 66, 67]
    mp.delenv("TRNSIM_NODES")
    # torchrun with two nodes: this process is node 1, local rank 3
    mp.setenv("GROUP_WORLD_SIZE", "2")
    mp.setenv("GROUP_RANK", "1")
    mp.setenv("LOCAL_RANK", "3")
    assert D.cluster_topology(8).nodes == 2 and D.rank_position(7, 8) == 64 + 3
    mp.setattr(STATE, "selected", True)          # set_device(5): the core it chose
    mp.setattr(STATE, "current", 5)
    assert D.rank_position(7, 8) == 64 + 5
    mp.setenv("TRNSIM_NODES", "1")               # TRNSIM_NODES places the ranks itself, over the launcher
    assert D.cluster_topology(8).nodes == 1 and D.rank_position(7, 8) == 5
    mp.setenv("TRNSIM_NODES", "3")
    with pytest.raises(ValueError, match="8 ranks cannot be divided equally over TRNSIM_NODES=3"):
        D.rank_position(0, 8)
    mp.setenv("TRNSIM_NODES", "zero")
    with pytest.raises(ValueError, match="TRNSIM_NODES='zero': expected an integer"):
        D.cluster_topology(8)
