import pytest

import trnsim


@pytest.fixture(scope="session")
def nki():
    return trnsim.install_nki()


@pytest.fixture(scope="session")
def nl(nki):
    import nki.language as nl
    return nl


@pytest.fixture(scope="session")
def nisa(nki):
    import nki.isa as nisa
    return nisa


# CI runs a fixed set of hypothesis examples (derandomized); local runs explore new ones.
import os as _os

from hypothesis import settings as _settings

_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if _os.environ.get("CI"):
    _settings.load_profile("ci")

# the suite is hermetic: no op cost is read from (or written to) the persistent cache of earlier processes
_os.environ.setdefault("TRNSIM_COST_CACHE", "0")
