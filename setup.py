"""Ships ``trnsim_nki.pth`` (the interpreter start hook, see ``trnsim_nki_hook.py``) at the root of site-packages,
for both ``pip install .`` (into the wheel's purelib) and ``pip install -e .`` (into the editable wheel).
Everything else is in pyproject.toml."""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "trnsim_nki.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=True):
        return list(super().get_outputs(include_bytecode)) + [os.path.join(self.build_lib, PTH)]


cmdclass = {"build_py": build_py_with_pth}

try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:                    # setuptools without PEP 660 editable wheels
    editable_wheel = None

if editable_wheel is not None and hasattr(editable_wheel, "_run_build_commands"):
    class editable_wheel_with_pth(editable_wheel):
        def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
            out = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
            shutil.copyfile(os.path.join(HERE, PTH), os.path.join(unpacked_wheel, PTH))
            return out

    cmdclass["editable_wheel"] = editable_wheel_with_pth

setup(cmdclass=cmdclass)
