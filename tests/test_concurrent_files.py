"""Several processes writing into one place: two ``trnsim conformance`` runs sharing ``--out``, and
``profile_torch().to_chrome_trace()`` from several processes to one path.  Nothing crashes, every file left behind
is whole (one writer's complete document, never a mix), and no temporary file or crash marker is left over."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    env = dict(os.environ, TORCHNEURON_TARGET="sim", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NEURON_PLATFORM_TARGET_OVERRIDE", None)
    return env


def _leftovers(d):
    """Temporary files of the atomic writer, crash-marker directories: none may remain."""
    bad = []
    for dirpath, dirnames, files in os.walk(d):
        bad += [os.path.join(dirpath, x) for x in dirnames if x.startswith("running")]
        bad += [os.path.join(dirpath, f) for f in files if f.endswith(".tmp") or f.startswith(".tmp")]
    return bad


@pytest.mark.slow
def test_two_conformance_runs_sharing_out(tmp_path):
    # both runs sweep the same op, so they write the same record file and (before issue 15) the same crash
    # marker, which the first to finish deleted under the other one (FileNotFoundError in the second run)
    out = tmp_path / "shared"
    cmd = [sys.executable, "-m", "trnsim", "conformance", "--suite", "ops", "--ops", "abs", "--dtypes", "float32",
           "--modes", "forward", "--max-samples", "2", "-j", "1", "--out", str(out), "--no-fail"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                              cwd=str(tmp_path)) for _ in range(2)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    for so, se, rc in results:
        assert rc == 0, se
        assert "Traceback" not in se, se
        assert "ops 1 x 1 dtypes" in so, so
    doc = json.loads((out / "report.json").read_text())
    recs = doc["records"] if isinstance(doc, dict) else doc
    assert [(r["name"], r["dtype"], r["mode"], r["status"]) for r in recs] == [("abs", "float32", "forward",
                                                                                "native")]
    assert "abs" in (out / "report.md").read_text()
    rec_files = list((out / "records" / "ops").iterdir())
    assert len(rec_files) == 1 and json.loads(rec_files[0].read_text())[0]["name"] == "abs"
    assert _leftovers(out) == []


def test_conformance_unusable_out_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = subprocess.run([sys.executable, "-m", "trnsim", "conformance", "--suite", "nki", "--ops", "nisa.memset",
                        "--out", str(blocker / "sub")], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "not a directory" in lines[0].lower(), r.stderr


WRITER = textwrap.dedent("""
    import json, os, sys, time
    import torch, trnsim
    path, ready_dir, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    x = torch.ones(64, 32 + me, device="neuron")
    with trnsim.profile_torch() as p:
        for _ in range(200):          # a trace of some size, different in each process
            x = x * 1.0001 + 0.5
    open(os.path.join(ready_dir, str(me)), "w").close()
    while len(os.listdir(ready_dir)) < n:      # start writing together
        time.sleep(0.01)
    for _ in range(30):
        doc = p.to_chrome_trace(path)
    print(json.dumps(doc))
""")


def test_concurrent_chrome_trace_writes_from_processes(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    ready = tmp_path / "ready"
    ready.mkdir()
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir()
    path = trace_dir / "trace.json"
    n = 3
    outs = [open(tmp_path / f"out{i}.txt", "w+") for i in range(n)]       # files, not pipes: a full pipe blocks
    procs = [subprocess.Popen([sys.executable, str(script), str(path), str(ready), str(i), str(n)],
                              stdout=outs[i], stderr=subprocess.STDOUT, text=True, env=_env())
             for i in range(n)]
    # meanwhile read the file as a consumer would: every read is a whole document (a truncate-and-write writer
    # would show an empty or half-written file here)
    reads, deadline = 0, time.monotonic() + 300
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        try:
            text = path.read_text()
        except FileNotFoundError:
            time.sleep(0.002)
            continue
        json.loads(text)
        reads += 1
    docs = []
    for p, f in zip(procs, outs):
        p.wait(timeout=300)
        f.seek(0)
        so = f.read()
        f.close()
        assert p.returncode == 0, so
        docs.append(json.loads(so.strip().splitlines()[-1]))
    assert len({json.dumps(d, sort_keys=True) for d in docs}) == n      # three different documents
    final = json.loads(path.read_text())          # whole JSON: one writer's complete document
    assert final in docs
    assert len(final["traceEvents"]) == 1 + 2 * 200        # a mul and an add per step
    assert os.listdir(trace_dir) == ["trace.json"]       # no temporary file left behind
    assert reads > 0
