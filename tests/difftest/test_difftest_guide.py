"""The code blocks of docs/guides/differential-testing.md run as written (Python blocks in order, then the shell lines)."""

import os
import re
import shlex
import subprocess
import sys

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "guides", "differential-testing.md")


def _blocks(lang):
    return re.findall(r"```%s\n(.*?)```" % lang, open(DOC).read(), re.S)


def _env():
    env = dict(os.environ)
    env.pop("TORCHNEURON_TARGET", None)
    return env


def _shell_lines(pytest_lines):
    for block in _blocks("bash"):
        for line in block.strip().splitlines():
            is_pytest = "pytest " in line.split("#")[0]
            if is_pytest == pytest_lines:
                yield line


def _run_line(line, cwd):
    line = re.sub(r"(^|\s)trnsim compare", r"\1" + shlex.quote(sys.executable) + " -m trnsim.cli compare", line)
    line = re.sub(r"(^|\s)pytest ", r"\1" + shlex.quote(sys.executable) + " -m pytest -p no:xdist ", line)
    r = subprocess.run(line, shell=True, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
    return r.stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("doc")
    os.makedirs(cwd / "difftest-demo")
    r = subprocess.run([sys.executable, "-c", "\n".join(_blocks("python"))], cwd=cwd, env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return cwd, r.stdout


def test_python_blocks_run(demo):
    cwd, out = demo
    assert "op aten.addmm.default in module 2 (forward)" in out
    assert out.strip().endswith("True")


def test_compare_lines_run(demo, monkeypatch, capsys):
    """The `trnsim compare` lines, run in this process (same arguments, same exit codes as the shell)."""
    from trnsim.cli import main
    cwd, _ = demo
    monkeypatch.chdir(cwd)
    codes = []
    for line in _shell_lines(pytest_lines=False):
        if "pytest-" in line:
            continue
        cmd, _, tail = line.partition("||")
        argv = shlex.split(cmd.split(" #")[0])
        assert argv[0] == "trnsim"
        code = main(argv[1:])
        assert code == 0 or tail, line            # a non-zero exit only where the doc says `|| echo "exit $?"`
        codes.append(code)
    assert codes == [0, 1, 0]
    assert "EQUAL" in capsys.readouterr().out
    assert (cwd / "difftest-demo" / "report" / "report.html").exists()


@pytest.mark.slow
def test_pytest_lines_run(demo):
    cwd, _ = demo
    for line in _shell_lines(pytest_lines=True):
        _run_line(line, cwd)
    out = [_run_line(line, cwd) for line in _shell_lines(pytest_lines=False) if "pytest-" in line]
    assert "EQUAL" in out[0]
