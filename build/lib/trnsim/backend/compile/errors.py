"""Errors and warnings of the ``neuron`` compile backend."""


class NeuronCompileError(RuntimeError):
    """A graph could not be compiled for the neuron device (``op`` and the user's ``line`` when known)."""

    def __init__(self, msg, op=None, line=None):
        super().__init__(msg)
        self.op = op
        self.line = line


class NeuronCompileWarning(UserWarning):
    """A compile option was ignored, or a graph that failed to compile runs eagerly."""


class NeuronCacheWarning(UserWarning):
    """A compile-cache entry was unreadable (corrupt or from another format) and was recompiled."""
