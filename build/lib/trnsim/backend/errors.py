"""Warnings and errors of the simulated ``neuron`` device."""


class NeuronFallbackWarning(UserWarning):
    """An op with no native lowering ran on the CPU (once per op and process)."""


class NeuronFallbackError(RuntimeError):
    """Raised instead of falling back when ``TORCHNEURON_FALLBACK=error`` (or ``--neuron-strict``)."""


class NeuronBackendConflict(RuntimeError):
    """A real Neuron PyTorch backend is already registered in this process."""
