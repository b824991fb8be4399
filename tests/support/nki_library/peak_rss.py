"""Peak resident memory of one test, for the nki-library runner's per-test record.

On Linux the kernel keeps a process's peak resident set size (``VmHWM`` in ``/proc/self/status``) and resets it to
the current resident size when ``5`` is written to ``/proc/self/clear_refs`` (proc(5), "clear_refs", since Linux
4.0).  :func:`reset` does that before a test, :func:`peak` reads the peak after it: the figure covers that test
alone.  Where either file is missing or refuses (not Linux, a locked-down /proc), :func:`peak` falls back to
``getrusage(RUSAGE_SELF).ru_maxrss``, the process's peak since it started, and says so in its ``how``: that figure
is an upper bound of the test's peak (it includes every earlier test of the worker), not the test's own.
"""

from __future__ import annotations

STATUS = "/proc/self/status"
CLEAR_REFS = "/proc/self/clear_refs"
HOW_TEST = "VmHWM"                     # per-test peak, reset before the test
HOW_LIFETIME = "ru_maxrss"             # the process's peak since it started (fallback)


def reset(clear_refs=CLEAR_REFS) -> bool:
    """Reset the process's peak RSS to its current RSS; False when the system does not allow it."""
    try:
        with open(clear_refs, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _vmhwm_bytes(status=STATUS):
    try:
        with open(status) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    value, unit = line.split()[1:3]
                    if unit != "kB":
                        raise ValueError(f"{status}: VmHWM in unit {unit!r}, expected kB")
                    return int(value) * 1024
    except OSError:
        return None
    return None


def peak(was_reset: bool, status=STATUS):
    """``(bytes, how)``: the peak RSS since :func:`reset` (``how`` = ``"VmHWM"``) when the reset worked and
    ``VmHWM`` is readable, else the process's lifetime peak (``how`` = ``"ru_maxrss"``), else ``(None, None)``."""
    if was_reset:
        b = _vmhwm_bytes(status)
        if b is not None:
            return b, HOW_TEST
    try:
        import resource
        import sys
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in KiB on Linux and in bytes on macOS (getrusage(2) of each)
        return (kib if sys.platform == "darwin" else kib * 1024), HOW_LIFETIME
    except (ImportError, OSError):
        return None, None

