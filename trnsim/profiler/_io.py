"""Atomic file writes: a reader never sees a half-written trace or picture."""

from __future__ import annotations

import contextlib
import os
import tempfile


def _umask():
    u = os.umask(0)
    os.umask(u)
    return u


@contextlib.contextmanager
def atomic_write(path, mode="w"):
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one rename."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())         # as an ordinary open() would create it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
