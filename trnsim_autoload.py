"""Entry point of group ``torch.backends``, run at the end of ``import torch``.

Kept outside the ``trnsim`` package so that torch's autoload does not re-enter a half-imported trnsim.  It acts only
under ``TORCHNEURON_TARGET=sim``: then ``import nki`` resolves to trnsim's NKI and the simulated ``neuron`` PyTorch
device is registered (unless a real Neuron backend already is: then it warns and registers nothing).
"""


def autoload():
    from trnsim import config
    if config.torchneuron_target != "sim":
        if config.nki_simulator:
            # vLLM's CPU mode: kernels called with CPU tensors inside torch.compile become one graph node
            from trnsim.backend import nki_bridge
            nki_bridge.install_cpu()
        return
    import sys
    import trnsim
    trnsim.install_nki()
    if "trnsim.backend" in sys.modules and not hasattr(sys.modules["trnsim.backend"], "register"):
        # torch is being imported by trnsim.backend itself: it registers the device when its import completes
        global pending
        pending = True
        return
    from trnsim import backend
    try:
        backend.register()
    except backend.NeuronBackendConflict as e:
        import warnings
        warnings.warn(str(e), RuntimeWarning, stacklevel=2)


pending = False
