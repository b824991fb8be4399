"""Atomic file writes for the profiler's exporters (the shared implementation is :mod:`trnsim.fileio`)."""

from ..fileio import FileWriteError, atomic_write

__all__ = ["atomic_write", "FileWriteError"]
