"""Differential testing: record a test's tensors on any device, compare two recordings, find the first divergence.

Recording (:func:`record`, :func:`record_kernels`, pytest's ``--trnsim-record DIR``) imports only torch and NumPy,
so the same test harness runs unchanged on a Trainium instance, on trnsim's simulated ``neuron`` device and on CPU;
:func:`compare` (``trnsim compare A B``) and the reports read bundles without unpickling anything;
:func:`replay`/:func:`replay_kernel` re-run recorded inputs on the simulator.  See docs/guides/differential-testing.md.
"""

from .bundle import Bundle, BundleError, find_bundles, load_bundle
from .comparison import Comparison, EntryResult, compare
from .device import device_kind
from .recorder import Recorder, RecordingError, record, record_kernels
from .tolerance import DEFAULTS, Tolerance, Tolerances

__all__ = ["record", "record_kernels", "Recorder", "RecordingError", "compare", "Comparison", "EntryResult",
           "Tolerance", "Tolerances", "DEFAULTS", "Bundle", "BundleError", "load_bundle", "find_bundles",
           "device_kind", "replay", "replay_kernel", "markdown", "html_report", "text_summary"]


def __getattr__(name):
    if name in ("replay", "replay_kernel"):          # the simulator is imported only when replaying
        from . import replaying as _r
        return getattr(_r, name)
    if name in ("markdown", "html_report", "text_summary", "write_reports"):
        from . import report as _rep
        return getattr(_rep, name)
    raise AttributeError(f"module 'trnsim.difftest' has no attribute {name!r}")
