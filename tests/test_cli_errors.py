"""Every ordinary command-line mistake ends in one line on stderr, exit status 2, no traceback; a closed pipe
ends quietly; files are written atomically even by concurrent writers."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from trnsim.cli import main

KERNELS = textwrap.dedent("""
    import nki, nki.language as nl, nki.isa as nisa

    @nki.jit
    def add(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        ta = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        tb = nl.ndarray(b.shape, b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(ta, a)
        nisa.dma_copy(tb, b)
        nisa.tensor_tensor(ta, ta, tb, op=nl.add)
        nisa.dma_copy(out, ta)
        return out

    @nki.jit
    def nothing(a):
        return a

    @nki.jit
    def too_tall(a):
        t = nl.ndarray((256, 4), a.dtype, buffer=nl.sbuf)
        return a
""")


@pytest.fixture
def kfile(tmp_path):
    p = tmp_path / "kernels.py"
    p.write_text(KERNELS)
    return str(p)


def _one_line_error(capsys, argv, *fragments, code=2):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == code, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as e:      # argparse's own errors exit through SystemExit(2)
        return e.code


ARGS = ["--arg", "a=128x64", "--arg", "b=128x64", "--no-plot"]


@pytest.mark.parametrize("argv_tail, fragments", [
    (["::add", "--grid", "0"], ["--grid", "'0'", "positive integer"]),
    (["::add", "--grid", "2xq"], ["--grid", "'2xq'", "positive integers"]),
    (["::nope"], ["'nope'", "no such function", "add"]),
    (["::"], ["name after '::' is missing"]),
    ([""], ["FILE::KERNEL"]),
    (["::add", "--target", "trn9"], ["--target", "'trn9'", "trn1, trn2, trn3"]),
    (["::add", "--arg", "a=128xq"], ["--arg a", "'128xq'", "128x512"]),
    (["::add", "--arg", "a=128x0"], ["--arg a", "positive integer"]),
    (["::add", "--arg", "a=128x4:float99"], ["--arg a", "'float99'", "bfloat16"]),
    (["::add", "--arg", "a128x4"], ["NAME=SHAPE[:DTYPE]"]),
    (["::add", "--inputs", "missing_builder"], ["--inputs", "'missing_builder'"]),
])
def test_profile_mistakes_are_one_line(capsys, kfile, tmp_path, argv_tail, fragments):
    spec = kfile + argv_tail[0] if argv_tail[0] != "" else kfile
    argv = ["profile", spec, "--out", str(tmp_path / "o")] + argv_tail[1:]
    if "--arg" not in argv:
        argv += ARGS
    _one_line_error(capsys, argv, *fragments)


def test_missing_file(capsys, tmp_path):
    _one_line_error(capsys, ["profile", str(tmp_path / "nope.py") + "::add"] + ARGS, "does not exist")


def test_kernel_without_inputs(capsys, kfile, tmp_path):
    _one_line_error(capsys, ["profile", kfile + "::add", "--out", str(tmp_path)], "takes (a, b)",
                    "no inputs given (missing a, b)", "--arg")


def _def_line(name, text=KERNELS):
    return text.splitlines().index(f"def {name}(a, b):") + 1


@pytest.mark.parametrize("args, fragments", [
    # a name the kernel does not have, with the close one suggested, and the parameter left out by it
    (["--arg", "x=128x64", "--arg", "b=128x64"], ["--arg x is not one of its parameters (did you mean a?)",
                                                  "missing a"]),
    # one input missing
    (["--arg", "a=128x64"], ["missing b", "--arg NAME=SHAPE[:DTYPE]"]),
    # one input too many
    (["--arg", "a=128x64", "--arg", "b=128x64", "--arg", "c=128x64"], ["--arg c is not one of its parameters"]),
    # the same input twice
    (["--arg", "a=128x64", "--arg", "a=128x64", "--arg", "b=128x64"], ["--arg a is given twice"]),
    # --inputs gives too many positional inputs, or one that --arg gives again
    (["--inputs", "three"], ["--inputs three gives 3 positional inputs, it takes at most 2"]),
    (["--inputs", "two", "--arg", "b=128x64"], ["b is given twice (--inputs two and --arg b)"]),
    (["--inputs", "named", "--arg", "b=128x64"], ["b is given twice (by --inputs named (keyword b) and --arg b)"]),
    (["--inputs", "named_wrong"], ["--inputs named_wrong (keyword bb) is not one of its parameters "
                                   "(did you mean b?)", "missing b"]),
])
def test_profile_inputs_that_do_not_match_the_kernel(capsys, tmp_path, args, fragments):
    """A mismatch between the inputs and the kernel's parameters is one line naming the kernel, where it is
    defined, its parameters and what is wrong, and the kernel never runs."""
    text = KERNELS + textwrap.dedent("""
        import numpy as np

        def three():
            return tuple(np.zeros((128, 64), np.float32) for _ in range(3))

        def two():
            return np.zeros((128, 64), np.float32), np.zeros((128, 64), np.float32)

        def named():
            return {"a": np.zeros((128, 64), np.float32), "b": np.zeros((128, 64), np.float32)}

        def named_wrong():
            return {"a": np.zeros((128, 64), np.float32), "bb": np.zeros((128, 64), np.float32)}
    """)
    p = tmp_path / "kernels.py"
    p.write_text(text)
    out = tmp_path / "o"
    line = _one_line_error(capsys, ["profile", f"{p}::add", "--out", str(out), "--no-plot"] + args,
                           "trnsim profile: error: kernel add (", f"kernels.py:{_def_line('add')})",
                           "takes (a, b): ", *fragments)
    assert "TypeError" not in line
    assert not list(out.glob("*.json"))         # nothing ran, nothing written


LEGACY = textwrap.dedent("""
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def add_kernel(a_t, b, scale=1.0):
        c = nl.ndarray(a_t.shape, dtype=a_t.dtype, buffer=nl.shared_hbm)
        nl.store(c, value=nl.add(nl.load(a_t), nl.load(b)))
        return c
""")


def test_profile_legacy_kernel_inputs_are_checked_too(capsys, tmp_path):
    p = tmp_path / "legacy.py"
    p.write_text(LEGACY)
    line = _one_line_error(capsys, ["profile", f"{p}::add_kernel", "--grid", "2", "--arg", "a=128x64",
                                    "--arg", "b=128x64", "--out", str(tmp_path), "--no-plot"],
                           "kernel add_kernel (", "legacy.py:6)", "takes (a_t, b, scale=1.0)",
                           "--arg a is not one of its parameters (did you mean a_t?)", "missing a_t")
    assert "scale" not in line.split("missing")[1]      # a parameter with a default is never missing


def test_unusable_output_directory(capsys, kfile, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_line_error(capsys, ["profile", kfile + "::add", "--out", str(blocker / "sub")] + ARGS,
                    "cannot write", "Not a directory")


def test_hardware_rule_is_one_line_with_user_line(capsys, kfile, tmp_path):
    line = _one_line_error(capsys, ["profile", kfile + "::too_tall", "--arg", "a=128x4", "--no-plot",
                                    "--out", str(tmp_path)], "256", "128", "kernels.py:", code=1)
    assert "kernels.py:21" in line     # the ndarray call in too_tall


def test_kernel_that_issues_nothing_says_so(capsys, kfile, tmp_path):
    _one_line_error(capsys, ["profile", kfile + "::nothing", "--arg", "a=128x4", "--out", str(tmp_path)],
                    "issued no instruction", code=1)


@pytest.mark.parametrize("argv, fragments", [
    (["demo", "--m", "100"], ["--m 100", "multiple of 128", "try 128"]),
    (["demo", "--k", "300"], ["--k 300", "try 256 or 384"]),
    (["demo", "--n", "700"], ["--n 700", "512"]),
    (["demo", "--target", "x"], ["--target", "'x'"]),
])
def test_demo_mistakes_are_one_line(capsys, tmp_path, argv, fragments):
    _one_line_error(capsys, argv + ["--out", str(tmp_path), "--no-plot"], *fragments)


def test_argparse_errors_are_one_line(capsys):
    assert _exit_code(["profile"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "kernel" in err and "--help" in err
    assert _exit_code(["bogus"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'bogus'" in err


def _run(args, **kw):
    return subprocess.run([sys.executable, "-m", "trnsim", *args], capture_output=True, text=True, timeout=120,
                          **kw)


def test_version_and_python_m():
    import trnsim
    r = _run(["--version"])
    assert r.returncode == 0 and r.stdout.strip() == f"trnsim {trnsim.__version__}"
    r = _run(["profile", "--help"])
    assert r.returncode == 0 and "examples:" in r.stdout and "--shape-only" in r.stdout


def test_closed_pipe_ends_quietly(kfile, tmp_path):
    # the reader (head -1) exits after one line; trnsim must not print a BrokenPipeError traceback
    cmd = (f"{sys.executable} -m trnsim profile {kfile}::add --arg a=128x64 --arg b=128x64 --no-plot "
           f"--out {tmp_path} | head -1")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("trnsim profile: add")
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert r.returncode == 0


def test_concurrent_trace_writes_stay_whole(tmp_path):
    from trnsim.fileio import atomic_write_json
    path = tmp_path / "trace.json"
    docs = [{"traceEvents": [{"name": f"w{w}", "i": i} for i in range(20000)]} for w in range(4)]
    errors = []

    def writer(w):
        try:
            for _ in range(5):
                atomic_write_json(path, docs[w])
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert json.loads(path.read_text()) in docs          # one writer's whole document, never a mix
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]     # no temporary file left behind


def test_torch_profile_trace_is_written_atomically(tmp_path, monkeypatch):
    # to_chrome_trace goes through the atomic writer: a reader never sees a partial file
    import trnsim.fileio as fio
    calls = []
    real = fio.atomic_write
    monkeypatch.setattr(fio, "atomic_write", lambda p, m="w": (calls.append(p), real(p, m))[1])
    torch = pytest.importorskip("torch")
    from trnsim.backend.profiler import TorchProfile
    p = TorchProfile()
    p.add("add", ((2,),), ("float32",), 0.0, 10.0, "native", 8, 2, "x.py:1")
    p.to_chrome_trace(str(tmp_path / "t.json"))
    assert calls and json.loads((tmp_path / "t.json").read_text())["traceEvents"][1]["name"] == "add"
    del torch
