"""Pieces every ``trnsim`` command shares: an argument parser whose mistakes are one line, and the progress line.

Progress is shown on a terminal only: never when stderr is a pipe or a file (``| tee``, CI logs, pytest's capture),
and never when ``TRNSIM_PROGRESS=0``.  It is one line that rewrites itself (``\\r``), cleared when the work ends, so
the command's real output is not interleaved with it.

Imports nothing of trnsim, so every layer's command-line code may use it."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import threading
import time

from . import config

__all__ = ["OneLineParser", "progress_wanted", "ProgressLine"]


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (``trnsim X: error: ... (see 'trnsim X --help')``, exit status 2) and help
    text laid out as written (so an ``examples:`` epilog keeps its lines)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def progress_wanted(stream=None, force=None):
    """Whether to show progress on ``stream`` (default stderr): ``force`` if given, else only on a terminal and
    unless ``TRNSIM_PROGRESS=0``."""
    if force is not None:
        return bool(force)
    if not config.progress:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):        # closed or not a real stream
        return False


class ProgressLine:
    """One self-rewriting line on a terminal; every method does nothing when progress is not wanted.

    ``show(text)`` rewrites the line (at most every ``min_interval`` seconds unless ``force``), ``bar(done, total,
    label, extra)`` a counted bar with elapsed time and ETA, ``ticking(label, what)`` a context manager that
    refreshes ``label: <what()>, <elapsed> s`` from a background thread while slow work runs, ``clear()`` erases
    the line."""

    def __init__(self, enabled=None, stream=None, min_interval=0.1):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = progress_wanted(self.stream, enabled)
        self.min_interval = min_interval
        self.t0 = time.perf_counter()
        self._last = -1e9
        self._shown = False
        self._lock = threading.Lock()

    def _width(self):
        return max(20, min(160, shutil.get_terminal_size((100, 20)).columns - 1))

    def show(self, text, force=False):
        if not self.enabled:
            return
        now = time.perf_counter()
        with self._lock:
            if not force and now - self._last < self.min_interval:
                return
            self._last = now
            w = self._width()
            try:
                self.stream.write("\r" + text[:w].ljust(w))
                self.stream.flush()
            except (OSError, ValueError):       # the terminal went away: stop trying
                self.enabled = False
                return
            self._shown = True

    def bar(self, done, total, label, extra=""):
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        eta = el / done * (total - done) if done else 0.0
        width = 24
        fill = int(width * done / max(1, total))
        text = f"{label} [{'#' * fill}{'.' * (width - fill)}] {done:,}/{total:,} {el:.0f}s"
        if done < total:
            text += f" eta {eta:.0f}s"
        self.show(text + (f" | {extra}" if extra else ""), force=done >= total)

    @contextlib.contextmanager
    def ticking(self, label, what=None, every=0.25):
        if not self.enabled:
            yield self
            return
        stop = threading.Event()
        t0 = time.perf_counter()

        def run():
            while not stop.wait(every):
                extra = what() if what is not None else ""
                self.show(f"  {label}: {extra + ', ' if extra else ''}{time.perf_counter() - t0:.1f} s", force=True)
        th = threading.Thread(target=run, daemon=True)
        th.start()
        try:
            yield self
        finally:
            stop.set()
            th.join()

    def clear(self):
        if self.enabled and self._shown:
            with self._lock:
                try:
                    self.stream.write("\r" + " " * self._width() + "\r")
                    self.stream.flush()
                except (OSError, ValueError):
                    pass
                self._shown = False
