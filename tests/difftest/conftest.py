import pytest

# The simulated device must be registered before any backward runs in this process: autograd sizes its per-device
# queues on the first backward (a later registration then fails an internal assert in torch 2.13).
from trnsim import backend

backend.register()


@pytest.fixture
def neuron():
    prev = backend.set_fallback_mode("warn")
    yield __import__("torch").device("neuron", 0)
    backend.set_fallback_mode(prev)
