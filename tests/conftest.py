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
