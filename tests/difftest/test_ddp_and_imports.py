"""A 2-rank DDP job compared rank by rank; recording on CPU loads nothing of trnsim's simulator."""

import json
import os
import subprocess
import sys
import textwrap

import trnsim.difftest as dt

HERE = os.path.dirname(os.path.abspath(__file__))
SIMULATOR = ("trnsim.machine", "trnsim.isa", "trnsim.backend", "trnsim.kernels", "trnsim.memory")


def _env():
    env = dict(os.environ)
    env.pop("TORCHNEURON_TARGET", None)         # a CPU (or real hardware) process: no simulated device
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_ddp_two_ranks_first_divergence_rank_by_rank(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "ddp_job.py"), str(tmp_path)], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        loaded = json.load(open(tmp_path / f"loaded_rank{rank}.json"))
        assert not [m for m in loaded if m.startswith(SIMULATOR)], loaded
        man = json.load(open(tmp_path / "base" / "ddp_step" / f"rank{rank}" / "manifest.json"))
        assert (man["rank"], man["world_size"], man["device_kind"]) == (rank, 2, "cpu")
    # base vs base: equal; base vs perturbed: rank 1 goes wrong first, in the perturbed layer's op
    assert dt.compare(tmp_path / "base", tmp_path / "base").ok
    cmp = dt.compare(tmp_path / "base", tmp_path / "perturbed")
    assert cmp.exit_code == 1
    firsts = {p.rank: f for p, f in cmp.firsts}
    f1 = firsts[1]
    assert (f1.kind, f1.path, f1.op, f1.phase) == ("op", "module.2", "aten.addmm.default", "forward")
    # rank 0 computed its forward and backward correctly: it first diverges where DDP's all-reduce brought rank 1's
    # gradients in, the parameters' gradients
    f0 = firsts[0]
    assert f0.key.startswith("output/param.grad/") and f0.seq > f1.seq
    assert all(not r.failing for r in cmp.results if r.rank == 0 and not r.key.startswith("output/param.grad/"))
    assert cmp.first is f1
    text = dt.text_summary(cmp)
    assert "rank 1, op aten.addmm.default in module module.2 (forward)" in text and "also: ddp_step rank 0" in text


def test_recording_on_cpu_imports_no_simulator(tmp_path):
    code = textwrap.dedent(f"""
        import sys, torch
        import trnsim.difftest as dt
        from difftest_models import tiny_lm
        m = tiny_lm()
        idx = torch.randint(0, 32, (2, 8))
        with dt.record({str(tmp_path)!r}, name="cpu", modules=True, ops=True, backward=True) as rec:
            rec.input("idx", idx)
            m(idx).pow(2).mean().backward()
            rec.state(m)
        with dt.record_kernels({str(tmp_path)!r}, name="k") as rk:
            rk.kernel(lambda a: a * 2, torch.ones(3))
        cmp = dt.compare({str(tmp_path / "cpu")!r}, {str(tmp_path / "cpu")!r})
        import trnsim.difftest.report
        print(dt.text_summary(cmp).splitlines()[-1])
        print(" ".join(sorted(n for n in sys.modules if n.startswith("trnsim"))))
    """)
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    verdict, mods = r.stdout.strip().splitlines()[-2:]
    assert verdict.startswith("EQUAL")
    loaded = mods.split()
    assert "trnsim.difftest.recorder" in loaded
    assert not [m for m in loaded if m.startswith(SIMULATOR)], loaded
    man = json.load(open(tmp_path / "k" / "rank0" / "manifest.json"))
    assert man["kernel_calls"][0]["name"] == "<lambda>" and man["device_kind"] == "cpu"
