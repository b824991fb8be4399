"""trnsim's PyTorch device: eager ``neuron`` tensors on a simulated NeuronCore, with CPU fallback.

Registered by :func:`register` (which ``import torch`` runs under ``TORCHNEURON_TARGET=sim``).  Layering: this
package may import ``trnsim.kernels`` and below.
"""

import torch  # noqa: F401  (first, so that torch's device autoload sees this package before its names exist)

from .errors import NeuronBackendConflict, NeuronFallbackError, NeuronFallbackWarning
from .registration import is_registered, register, register_if_sim

__all__ = ["register", "register_if_sim", "is_registered", "NeuronFallbackWarning", "NeuronFallbackError",
           "NeuronBackendConflict", "fallback_counts", "reset_fallback_counts", "simulated_time_ns",
           "set_fallback_mode", "profile_torch"]


def fallback_counts():
    """``{"aten::op": calls}`` of the ops that ran on the CPU."""
    from .device_state import STATE
    return dict(STATE.fallback_counts)


def reset_fallback_counts():
    from .device_state import STATE
    STATE.fallback_counts.clear()


def set_fallback_mode(mode):
    """``"warn"`` (default) or ``"error"``; returns the previous mode."""
    from .device_state import STATE
    if mode not in ("warn", "error"):
        raise ValueError(f"fallback mode {mode!r}: expected 'warn' or 'error'")
    prev, STATE.fallback_mode = STATE.fallback_mode, mode
    return prev


def simulated_time_ns():
    """The simulated device clock (ns): the sum of the durations of every device op so far."""
    from .device_state import STATE
    return STATE.now_ns


def profile_torch(*args, **kwargs):
    from .profiler import profile_torch as _p
    return _p(*args, **kwargs)


def _finish_autoload():
    import sys
    al = sys.modules.get("trnsim_autoload")
    if al is not None and getattr(al, "pending", False):
        al.pending = False
        try:
            register_if_sim()
        except NeuronBackendConflict as e:
            import warnings
            warnings.warn(str(e), RuntimeWarning, stacklevel=2)


_finish_autoload()
