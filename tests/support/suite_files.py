"""Loading one of the suite's files (another test module, a tool script, a stand-in package) as a module by its
path, for tests that share kernels or helpers with another test file or test a script that is not a package.
``tests/support`` is on ``sys.path`` through pytest's ``pythonpath`` setting (pyproject.toml)."""

import importlib.util

__all__ = ["load_file"]


def load_file(name, path):
    """The module made by running the file at ``path`` under the module name ``name`` (not entered in
    ``sys.modules``: two loads give two modules)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"no Python module at {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
