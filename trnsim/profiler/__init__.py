"""Views of a :class:`~trnsim.machine.timeline.Timeline`: a Chrome/Perfetto trace, a PNG timeline, a summary table.

This package reads a Timeline and knows nothing of who made it (docs/ARCHITECTURE.md#layers)."""

from .summary import format_summary
from .trace import trace_events, write_trace
from .plot import plot_timeline

__all__ = ["format_summary", "trace_events", "write_trace", "plot_timeline", "atomic_write"]

from ._io import atomic_write  # noqa: E402
