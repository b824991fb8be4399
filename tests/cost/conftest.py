import pytest

from trnsim import backend


@pytest.fixture(autouse=True)
def _neuron_device():
    backend.register()
    yield
