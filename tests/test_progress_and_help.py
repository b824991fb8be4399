"""Progress is shown on a terminal only: never when stdout/stderr are pipes (CI logs, ``| tee``), for every command
that can take long (demo, profile, conformance, estimate, the model sweep through conformance); and every command's
``--help`` ends with examples."""

import io
import json
import os
import pty
import select
import subprocess
import sys
import textwrap

import pytest

from trnsim.cli import main
from trnsim.cliutil import ProgressLine, progress_wanted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRESS_MARKS = ("\r", "simulating:", "scheduling:", "searching", "estimating", "[#", "eta ")


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def _env(**kw):
    env = dict(os.environ, TORCHNEURON_TARGET="sim", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRNSIM_PROGRESS", None)
    env.update(kw)
    return env


# -- the shared helper -------------------------------------------------------------------------------------
def test_progress_line_is_silent_off_a_terminal():
    s = _Stream(tty=False)
    line = ProgressLine(stream=s)
    line.show("x", force=True)
    line.bar(3, 10, "work")
    with line.ticking("slow", lambda: "n", every=0.001):
        pass
    line.clear()
    assert s.getvalue() == ""


def test_progress_line_on_a_terminal_rewrites_one_line_and_clears_it():
    s = _Stream(tty=True)
    line = ProgressLine(stream=s)
    line.bar(3, 10, "work", "abs")
    line.bar(10, 10, "work")               # the last step is always shown
    out = s.getvalue()
    assert out.startswith("\rwork [#######") and "3/10" in out and "| abs" in out and "10/10" in out
    assert "\n" not in out
    line.clear()
    assert s.getvalue().endswith("\r") and s.getvalue().rsplit("\r", 2)[1].strip() == ""


def test_progress_is_throttled_but_never_drops_the_end():
    s = _Stream(tty=True)
    line = ProgressLine(stream=s, min_interval=3600)
    for i in range(1, 101):
        line.bar(i, 100, "w")
    assert s.getvalue().count("\r") == 2 and "100/100" in s.getvalue()     # the first and the last


def test_scheduling_says_when_the_compiled_loop_is_loading(monkeypatch):
    """Before the compiled scheduler's first use in a process (numba loads it, or compiles it: about 1.5 min after
    an install, with no progress of its own) the line says which; then the bar."""
    from trnsim.cli import Progress
    from trnsim.machine import sched_fast
    s = _Stream(tty=True)
    p = Progress(True, s)
    p.line.min_interval = 0                              # (no throttling between the calls below)
    monkeypatch.setattr(sched_fast, "compiled", lambda: False)
    monkeypatch.setattr(sched_fast, "last_choice", lambda: "numba")
    monkeypatch.setattr(sched_fast, "cache_warm", lambda: True)
    p.scheduling(0, sched_fast.FAST_MIN)
    assert "loading the compiled scheduler" in s.getvalue()
    monkeypatch.setattr(sched_fast, "cache_warm", lambda: False)
    p.scheduling(0, sched_fast.FAST_MIN)
    assert "compiling the scheduler once (~1.5 min; 'trnsim warmup')" in s.getvalue()
    p.scheduling(0, sched_fast.FAST_MIN - 1)           # small records: the reference loop, its own bar
    assert s.getvalue().rstrip().endswith(f"0/{sched_fast.FAST_MIN - 1:,}")
    monkeypatch.setattr(sched_fast, "compiled", lambda: True)
    p.scheduling(0, sched_fast.FAST_MIN)
    assert s.getvalue().count("loading the compiled scheduler") == 1


def test_scheduling_says_a_large_run_goes_uncompiled_before_the_compile(monkeypatch):
    """Under ``auto`` with numba's cache cold, a large run schedules uncompiled (``sched_fast.choose``): its bar
    says so and names the command that compiles the loop."""
    from trnsim.cli import Progress
    from trnsim.machine import sched_fast
    monkeypatch.delenv("TRNSIM_SCHEDULER", raising=False)
    monkeypatch.delenv("TRNSIM_NO_NUMBA", raising=False)
    s = _Stream(tty=True)
    p = Progress(True, s)
    p.line.min_interval = 0
    monkeypatch.setattr(sched_fast, "compiled", lambda: False)
    monkeypatch.setattr(sched_fast, "fast_available", lambda: True)
    monkeypatch.setattr(sched_fast, "cache_warm", lambda: False)
    # what sched_fast.choose leaves after choosing the uncompiled loop for this run on a cold cache
    monkeypatch.setitem(sched_fast._STATE, "warm", False)
    monkeypatch.setitem(sched_fast._STATE, "py_rows", sched_fast.FAST_MIN)
    monkeypatch.setitem(sched_fast._STATE, "chosen", "python")
    assert sched_fast.ran_uncompiled_cold()
    p.scheduling(0, sched_fast.FAST_MIN)
    assert "scheduling, uncompiled ('trnsim warmup' compiles it once)" in s.getvalue()
    p.scheduling(1, sched_fast.FAST_MIN)
    assert s.getvalue().rstrip().endswith(f"scheduling, uncompiled: [{'.' * 30}] 1/{sched_fast.FAST_MIN:,}")
    monkeypatch.setitem(sched_fast._STATE, "warm", True)         # warm: a short run's plain bar
    p.scheduling(1, sched_fast.FAST_MIN)
    assert s.getvalue().rstrip().rsplit("\r", 1)[-1].strip().startswith("scheduling: [")


def test_progress_wanted(monkeypatch):
    monkeypatch.delenv("TRNSIM_PROGRESS", raising=False)
    assert progress_wanted(_Stream(True)) and not progress_wanted(_Stream(False))
    assert progress_wanted(_Stream(False), force=True) and not progress_wanted(_Stream(True), force=False)
    monkeypatch.setenv("TRNSIM_PROGRESS", "0")
    assert not progress_wanted(_Stream(True))


# -- the commands, in pipes and on a terminal ---------------------------------------------------------------
KERNEL = textwrap.dedent("""
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
""")
TINY_MODEL = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1024}


def _commands(tmp_path):
    (tmp_path / "k.py").write_text(KERNEL)
    (tmp_path / "tiny.json").write_text(json.dumps(TINY_MODEL))
    o = str(tmp_path / "out")
    return {
        "demo": ["demo", "--m", "128", "--k", "128", "--n", "512", "--no-plot", "--out", o],
        "profile": ["profile", f"{tmp_path / 'k.py'}::add", "--arg", "a=128x64", "--arg", "b=128x64", "--no-plot",
                    "--out", o],
        "conformance": ["conformance", "--suite", "nki", "--ops", "nisa.memset", "--out", o + "-conf"],
        "estimate": ["estimate", "--model", str(tmp_path / "tiny.json"), "--instance", "trn2.48xlarge", "--tp", "1",
                     "--pp", "1", "--dp", "64", "--seq", "256"],
    }


def _start(args, stderr):
    return subprocess.Popen([sys.executable, "-m", "trnsim", *args], stdout=subprocess.PIPE, stderr=stderr,
                            env=_env(), cwd=ROOT)


def test_no_progress_in_pipes(tmp_path):
    # all four at once (they only read their own inputs and write their own --out)
    procs = {name: _start(args, subprocess.PIPE) for name, args in _commands(tmp_path).items()}
    for name, p in procs.items():
        so, se = p.communicate(timeout=600)
        so, se = so.decode(), se.decode()
        assert p.returncode == 0, (name, se)
        for mark in PROGRESS_MARKS:
            assert mark not in se and mark not in so, (name, mark, se)


def _read_pty(fd, proc):
    chunks = []
    while True:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:            # the child closed its side
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize("name, mark", [("conformance", "nki ["), ("demo", "scheduling: [")])
def test_progress_on_a_terminal(tmp_path, name, mark):
    # stderr is a pseudo-terminal: the bar appears there (and is cleared), stdout (a pipe) stays clean
    master, slave = pty.openpty()
    p = _start(_commands(tmp_path)[name], slave)
    os.close(slave)
    err = _read_pty(master, p)
    so = p.communicate(timeout=600)[0].decode()
    os.close(master)
    assert p.returncode == 0, err
    assert mark in err and "\r" in err, err
    assert "\r" not in so


# -- help ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["demo", "profile", "conformance", "nccom-test", "estimate", "compare", "replay",
                                 None])
def test_help_has_examples(cmd, capsys):
    argv = [cmd, "--help"] if cmd else ["--help"]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    examples = out.split("examples:", 1)[1]
    assert f"trnsim {cmd or 'demo'}" in examples, examples


@pytest.mark.parametrize("argv, fragment", [
    (["conformance", "--suite", "bogus"], "--suite"),
    (["nccom-test", "bogus", "-r", "2"], "'bogus'"),
    (["compare"], "required"),
    (["replay"], "required"),
    (["estimate", "--instance", "trn2.48xlarge"], "--model"),
])
def test_delegated_argument_errors_are_one_line(argv, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err, err
