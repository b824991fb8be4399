"""The wheel, not only the editable tree: ``pip install .`` must ship every data file the code opens at run time.

A copy of the sources is built into a wheel with setuptools' PEP 517 backend (offline, no build isolation, no
pip), then (1) every non-Python file inside the shipped package directories of the source tree must be in the
wheel, except the outputs of earlier conformance runs (conformance/reports/, which no code reads unless a user
names one), and (2) a fresh interpreter that imports the packages from the unpacked wheel must load each data
file through the code that opens it (issue 28: the known conformance mismatches were silently missing).
"""
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("trnsim", "conformance", "nki_cpu_simulator")       # pyproject.toml [tool.setuptools.packages.find]
TOP_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "trnsim_autoload.py", "trnsim_nki_hook.py",
             "trnsim_nki.pth")
NOT_SHIPPED = ("conformance/reports/",)                          # run outputs, read only when a user names one
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".hypothesis")


def _source_data_files():
    """Non-Python files in the package directories of the source tree (relative, '/'-separated)."""
    out = []
    for pkg in PACKAGES:
        for d, dirs, files in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = [x for x in dirs if x not in ("__pycache__", ".pytest_cache", ".hypothesis")]
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
                if f.endswith((".py", ".pyc")) or f == ".gitignore" or rel.startswith(NOT_SHIPPED):
                    continue
                out.append(rel)
    return sorted(out)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for f in TOP_FILES:
        shutil.copy2(os.path.join(ROOT, f), src / f)
    for pkg in PACKAGES:
        shutil.copytree(os.path.join(ROOT, pkg), src / pkg, ignore=_IGNORE)
    out = tmp / "dist"
    out.mkdir()
    code = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    path = out / r.stdout.strip().splitlines()[-1]
    unpacked = tmp / "site"
    with zipfile.ZipFile(path) as z:
        z.extractall(unpacked)
        names = set(z.namelist())
    return names, unpacked


def test_data_files_are_known():
    """The source tree's data files this test expects (so that the check below cannot pass vacuously)."""
    files = _source_data_files()
    for f in ("conformance/known_mismatches.json", "trnsim/cost/data/instances.json",
              "trnsim/cost/data/prices.json", "trnsim/cost/data/models.json"):
        assert f in files


def test_wheel_ships_every_data_file(wheel):
    names, _ = wheel
    missing = [f for f in _source_data_files() if f not in names]
    assert not missing, f"data files missing from the wheel (pyproject.toml [tool.setuptools.package-data]): {missing}"
    assert "trnsim_nki.pth" in names                      # the interpreter start hook (setup.py)


_PROBE = r"""
import json, os, sys
root = sys.argv[1]
sys.path.insert(0, root)
import conformance.report as report
import trnsim.cost.estimator as est
import trnsim.cost.models as models
out = {"files": [m.__file__ for m in (report, est, models)],
       "known": len(report.load_known()), "instances": len(est.INSTANCES), "prices": len(est.load_prices()),
       "models": len(models.BUILTIN)}
print(json.dumps(out))
"""


def test_installed_code_loads_its_data(wheel, tmp_path):
    _, unpacked = wheel
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NKI_SIMULATOR", "TORCHNEURON_TARGET")}
    r = subprocess.run([sys.executable, "-c", _PROBE, str(unpacked)], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for f in got["files"]:                                 # imported from the wheel, not the source tree
        assert os.path.realpath(f).startswith(os.path.realpath(unpacked)), f
    assert got["known"] > 0 and got["instances"] > 0 and got["prices"] > 0 and got["models"] > 0, got
