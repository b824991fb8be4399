import os
import subprocess
import sys

import pytest

from trnsim.cli import main


def test_demo_runs_and_checks(capsys, tmp_path):
    assert main(["demo", "--m", "128", "--k", "256", "--n", "512", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "simulated Trainium2 NeuronCore (trn2)" in out
    assert "tensor.nc_matmul x2" in out and "-> OK" in out


def test_demo_trn3(capsys, tmp_path):
    assert main(["demo", "--target", "trn3", "--m", "128", "--k", "128", "--n", "512", "--out", str(tmp_path),
                 "--no-plot"]) == 0
    assert "(trn3)" in capsys.readouterr().out


def _py(code, **env):
    e = {k: v for k, v in os.environ.items() if k != "TORCHNEURON_TARGET"}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


def test_nothing_shadowed_without_sim_target():
    r = _py("import trnsim, sys\ntry:\n import nki\n print('imported', nki.__name__)\nexcept ImportError:\n"
            " print('no nki')")
    assert r.returncode == 0, r.stderr
    assert "no nki" in r.stdout or "trnsim" not in r.stdout


def test_sim_target_resolves_nki_to_trnsim():
    r = _py("import trnsim\nimport nki, nki.language as nl, nki.isa as nisa\n"
            "print(nki.__name__, nl.__name__, nisa.NkiValidationError.__module__)", TORCHNEURON_TARGET="sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["trnsim.kernels.nki", "trnsim.kernels.nki.language", "trnsim.isa.errors"]


def test_import_torch_under_sim_resolves_nki():
    r = _py("import torch\nimport nki.isa as nisa\nprint(nisa.__name__)", TORCHNEURON_TARGET="sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "trnsim.kernels.nki.isa"


def test_unmodified_kernel_test_file_runs_under_sim_pytest(tmp_path):
    (tmp_path / "test_user_kernel.py").write_text(
        "import numpy as np\n"
        "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n"
        "@nki.jit\ndef double(x):\n"
        "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(t, x)\n"
        "    nisa.tensor_scalar(t, t, nl.multiply, 2.0)\n"
        "    nisa.dma_copy(out, t)\n"
        "    return out\n\n"
        "def test_double():\n"
        "    x = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)\n"
        "    np.testing.assert_array_equal(nki.simulate(double)(x), 2 * x)\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    e["TORCHNEURON_TARGET"] = "sim"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)], env=e,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout


def test_the_console_script_is_command_and_freezes_the_collector_before_exit(tmp_path):
    """The ``trnsim`` script (pyproject) and ``python -m trnsim`` run ``cli.command``: ``main``'s exit code, with
    the collector's thresholds raised and its objects frozen for the shutdown; ``main`` itself (called in-process,
    as tests do) leaves the collector alone."""
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["trnsim"] == "trnsim.cli:command"
    r = _py("import gc, trnsim.cli as c\nn, t = gc.get_freeze_count(), gc.get_threshold()\ncode = c.main([])\n"
            "a = gc.get_freeze_count()\nsame = (n, t) == (a, gc.get_threshold())\ncode2 = c.command([])\n"
            "print(same, code, code2, gc.get_freeze_count() > a, gc.get_threshold() == c.COLLECTOR_THRESHOLDS)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-5:] == ["True", "2", "2", "True", "True"]
    r = subprocess.run([sys.executable, "-m", "trnsim", "estimate", "--bogus"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and "trnsim estimate: error" in r.stderr
