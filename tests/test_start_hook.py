"""The interpreter start hook (``trnsim_nki.pth`` + ``trnsim_nki_hook``): ``import nki`` / ``import neuronxcc.nki``
in a plain script under ``NKI_SIMULATOR=1`` or ``TORCHNEURON_TARGET=sim``; nothing aliased when unset."""

import glob
import os
import site
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pth_installed():
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    return any(os.path.exists(os.path.join(d, "trnsim_nki.pth")) for d in dirs)


needs_pth = pytest.mark.skipif(not _pth_installed(), reason="trnsim is not pip-installed here (no trnsim_nki.pth in "
                               "site-packages): the start hook only exists in an installed trnsim")

SCRIPT = """
import sys
assert 'trnsim' not in sys.modules and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'trnsim' in m)
import nki
import nki.language as nl
import nki.isa as nisa
import neuronxcc.nki as nki1
import neuronxcc.nki.language as nl1
assert nki.__name__ == 'trnsim.kernels.nki', nki.__name__
assert nki1.__name__ == 'trnsim.kernels.neuronxcc.nki', nki1.__name__
assert 'torch' not in sys.modules
import numpy as np
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.tensor_scalar(t, t, nl.add, 1.0)
    nisa.dma_copy(out, t)
    return out
print(float(k(np.zeros((4, 4), np.float32)).sum()))
"""


def _run(code, tmp_path, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("NKI_SIMULATOR", "TORCHNEURON_TARGET")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=e, capture_output=True, text=True,
                          timeout=120)


@needs_pth
@pytest.mark.parametrize("env", [{"NKI_SIMULATOR": "1"}, {"TORCHNEURON_TARGET": "sim"}])
def test_plain_script_imports_nki_under_the_simulator(tmp_path, env):
    r = _run(SCRIPT, tmp_path, **env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "16.0"


@needs_pth
def test_unset_nothing_is_aliased(tmp_path):
    code = ("import sys\n"
            "assert 'trnsim_nki_hook' not in sys.modules\n"
            "assert not any(type(f).__name__ == 'NkiFinder' for f in sys.meta_path)\n"
            "try:\n    import nki\nexcept ModuleNotFoundError:\n    print('no nki')\n"
            "try:\n    import neuronxcc\nexcept ModuleNotFoundError:\n    print('no neuronxcc')\n")
    r = _run(code, tmp_path, NKI_SIMULATOR="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["no", "nki", "no", "neuronxcc"]


def test_the_pth_line_only_reads_the_environment():
    with open(os.path.join(ROOT, "trnsim_nki.pth")) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("import os;")
    calls = []

    class FakeHook:
        @staticmethod
        def install():
            calls.append(1)

    def run(environ):
        fake_os = type("os", (), {"environ": environ})
        imp = lambda name, *a, **k: FakeHook if name == "trnsim_nki_hook" else __import__(name, *a, **k)  # noqa
        exec(lines[0].replace("import os;", "", 1).strip(), {"os": fake_os, "__builtins__": dict(__builtins__, __import__=imp)
                                                     if isinstance(__builtins__, dict) else
                                                     dict(vars(__builtins__), __import__=imp)})
        n = len(calls)
        calls.clear()
        return n

    assert run({}) == 0
    assert run({"NKI_SIMULATOR": "0", "TORCHNEURON_TARGET": "cpu"}) == 0
    assert run({"NKI_SIMULATOR": "1"}) == 1
    assert run({"TORCHNEURON_TARGET": "sim"}) == 1


@pytest.mark.slow
def test_a_built_wheel_ships_the_pth_at_its_root(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", ROOT, "-w", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    whl = glob.glob(str(tmp_path / "trnsim-*.whl"))[0]
    names = zipfile.ZipFile(whl).namelist()
    assert "trnsim_nki.pth" in names and "trnsim_nki_hook.py" in names
