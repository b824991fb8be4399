"""The ``neuron`` torch.distributed backend: DDP, FSDP2 and DTensor TP on 4 simulated ranks equal the same job on
the CPU with gloo, rank by rank; collectives cost simulated time (ending when the last rank arrives) and appear in
profile_torch; faults raise on every rank instead of hanging."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 4


def _env():
    env = dict(os.environ, TORCHNEURON_TARGET="sim", TRNSIM_DIST_TIMEOUT="60", OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(os.path.dirname(HERE))] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(out):
    return [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False) for r in range(WORLD)]


# The device's own backward differs from the CPU's in the last bits (its matmuls reach BLAS with other operand
# layouts), so gradients agree to float32 rounding, not bit for bit; a single-process run shows the same.
RTOL, ATOL = 1e-5, 1e-7


def _assert_same(cpu, dev, what):
    assert dev["losses"] == pytest.approx(cpu["losses"], rel=1e-6), what
    for key in ("grads", "params"):
        assert cpu[key].keys() == dev[key].keys()
        for name in cpu[key]:
            torch.testing.assert_close(dev[key][name], cpu[key][name], rtol=RTOL, atol=ATOL,
                                       msg=lambda m: f"{what} {key} {name}: {m}")
    if "out" in cpu:
        torch.testing.assert_close(dev["out"], cpu["out"], rtol=RTOL, atol=ATOL)


def _check_jobs(results, jobs):
    for job in jobs:
        sims = []
        for r, res in enumerate(results):
            cpu, dev = res[(job, "cpu")], res[(job, "neuron")]
            _assert_same(cpu, dev, f"{job} rank {r}")
            assert dev["collective_rows"] > 0 and cpu["collective_rows"] == 0
            sims.append(dev["sim_ns"])
        # every collective ends when the slowest rank arrives: the ranks' clocks agree afterwards
        assert max(sims) - min(sims) < 1e-6 * max(sims), (job, sims)
    # data parallel ranks saw different batches: their losses differ, so the comparison is not trivial
    ddp = [res[("ddp", "neuron")]["losses"][0] for res in results] if "ddp" in jobs else []
    assert len(set(ddp)) == len(ddp)


@pytest.mark.slow       # 4 torchrun workers, each job twice: about 60 s on a loaded 2-core machine
def test_ddp_fsdp2_tp_under_torchrun_match_cpu_gloo(tmp_path):
    jobs = ["ddp", "fsdp", "tp"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD), "--master-port",
           str(_free_port()), os.path.join(HERE, "dist_jobs.py"), str(tmp_path), ",".join(jobs)]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check_jobs(_load(tmp_path), jobs)


def _spawn(fn, args, tmp_path):
    env = _env()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        mp.start_processes(fn, args=args, nprocs=WORLD, join=True, start_method="spawn")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.slow
def test_tp_under_mp_spawn(tmp_path):
    sys.path.insert(0, HERE)
    try:
        import dist_jobs
    finally:
        sys.path.remove(HERE)
    _spawn(dist_jobs.spawn_main, (WORLD, str(tmp_path), ["tp"], f"file://{tmp_path}/store"), tmp_path)
    _check_jobs(_load(tmp_path), ["tp"])


def _faults(case, tmp_path):
    sys.path.insert(0, HERE)
    try:
        import dist_faults
    finally:
        sys.path.remove(HERE)
    _spawn(dist_faults.scenario, (WORLD, str(tmp_path), f"file://{tmp_path}/store", case), tmp_path)
    return [json.load(open(os.path.join(tmp_path, f"rank{r}.json"))) for r in range(WORLD)]


def test_clock_imbalance_mismatches_subset_and_missing_rank(tmp_path):
    from trnsim.collectives import collective_time, get_topology
    res = _faults("clock_and_mismatch", tmp_path)
    # clock: the all-reduce starts at the latest arrival and lasts the model's time
    latest = max(r["arrive_ns"] for r in res)
    dur = collective_time("all_reduce", 4096, get_topology("trn2.48xlarge"), nranks=WORLD).time_ns
    assert res[1]["arrive_ns"] < res[0]["arrive_ns"]           # rank 0 did extra work first
    for r in res:
        assert r["after_ns"] == pytest.approx(latest + dur)
        (op, start, end, kind, nbytes), = r["rows"]
        assert op == "c10d::all_reduce" and kind == "collective" and nbytes == 4096
        assert start == pytest.approx(r["arrive_ns"]) and end == pytest.approx(latest + dur)
        assert r["value"] == 21 + 1 + 1 + 1                     # rank 0's 1+20 plus three ones
    for r, out in enumerate(res):
        assert not out["shape"]["ok"] and out["shape"]["type"] == "NeuronCollectiveError"
        assert "ranks [2] disagree" in out["shape"]["msg"] and "9 elements" in out["shape"]["msg"]
        assert "ranks [1] disagree" in out["dtype"]["msg"] and "bfloat16" in out["dtype"]["msg"]
        msg = out["subset"]["msg"]
        assert not out["subset"]["ok"] and "ranks [0, 1] issued all_reduce" in msg \
            and "ranks [2, 3] issued all_gather" in msg
        assert out["after_faults"] == 0 + 1 + 2 + 3
    assert res[1]["recv"] == [7.0] * 5
    for out in res[:3]:
        m = out["missing"]
        assert not m["ok"] and m["type"] == "NeuronCollectiveError" and "ranks [3] did not arrive" in m["msg"]
        assert 9 < m["secs"] < 60                   # TRNSIM_DIST_TIMEOUT=10, not the 30 minutes of torch


@pytest.mark.slow
def test_a_rank_that_dies_makes_the_others_fail(tmp_path):
    sys.path.insert(0, HERE)
    try:
        import dist_faults
    finally:
        sys.path.remove(HERE)
    env = _env()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        ctx = mp.start_processes(dist_faults.scenario, args=(WORLD, str(tmp_path), f"file://{tmp_path}/store",
                                                             "rank_dies"),
                                 nprocs=WORLD, join=False, start_method="spawn")
        for p in ctx.processes:
            p.join(120)
            assert p.exitcode is not None
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for r in range(3):
        out = json.load(open(os.path.join(tmp_path, f"rank{r}.json")))["dead"]
        assert not out["ok"] and out["type"] == "NeuronCollectiveError", out
        assert "all_reduce #2" in out["msg"] and out["secs"] < 30
