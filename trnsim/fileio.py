"""Writing files safely: every file trnsim writes (traces, pictures, reports, records, caches) goes through
:func:`atomic_write`, so a reader never sees half a file and several processes writing into one directory never
corrupt each other (each writes its own temporary file; the last complete file wins the rename).

Imports nothing of trnsim, so every layer may use it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import warnings

__all__ = ["atomic_write", "atomic_write_json", "ensure_writable_dir", "FileWriteError", "read_json_memo",
           "flush_json_memo"]


class FileWriteError(OSError):
    """A file could not be written: names the path and why (not a directory, no permission, disk full...)."""


def _umask():
    u = os.umask(0)
    os.umask(u)
    return u


def _ensure_dir(d, path):
    try:
        os.makedirs(d, exist_ok=True)
    except FileExistsError:
        raise FileWriteError(f"cannot write {path}: {d} exists and is not a directory") from None
    except OSError as e:
        raise FileWriteError(f"cannot write {path}: cannot create the directory {d} ({e.strerror})") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise FileWriteError(f"cannot write {path}: the directory {d} is not writable")


def ensure_writable_dir(d):
    """Create ``d`` if needed and check that files can be written there; :class:`FileWriteError` otherwise."""
    _ensure_dir(os.path.abspath(os.fspath(d)), os.fspath(d))
    return d


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding=None):
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one rename.  Errors about the
    place (missing permission, a file where a directory should be, a full disk) raise :class:`FileWriteError`
    naming the path.  Text modes write UTF-8 unless ``encoding`` says otherwise."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    _ensure_dir(d, path)
    if os.path.isdir(path):
        raise FileWriteError(f"cannot write {path}: it is a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    except OSError as e:
        raise FileWriteError(f"cannot write {path}: {e.strerror}") from None
    try:
        if "b" not in mode and encoding is None:
            encoding = "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())         # as an ordinary open() would create it
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, FileWriteError) and e.errno is not None:
            raise FileWriteError(f"cannot write {path}: {e.strerror}") from e
        raise


def atomic_write_json(path, obj, **kw):
    """``json.dump(obj)`` into ``path`` atomically."""
    with atomic_write(path, "w") as f:
        json.dump(obj, f, **kw)
    return path


def read_json_memo(path, valid, what):
    """The JSON object of a memo file (a cache of ``key -> value`` entries; never pickle), ``{}`` when there is none.
    A file that is not JSON, or whose values fail ``valid``, is ignored with a warning naming ``what`` (it is
    rewritten by the next :func:`flush_json_memo`)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or not all(valid(v) for v in doc.values()):
            raise ValueError("unexpected layout")
        return doc
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        warnings.warn(f"trnsim: ignoring the unreadable {what} {path} ({e}); it will be rewritten", RuntimeWarning,
                      stacklevel=4)
        return {}


def flush_json_memo(state, read, what, encode=None):
    """Merge a process's memo (``state``: ``entries``, ``new`` since the last flush, ``path``) into its file: what
    ``read(path)`` finds there now, updated with this process's entries, written atomically, so concurrent
    processes lose none of each other's entries.  A place that cannot be written warns naming ``what``."""
    if not state["new"] or not state["path"]:
        return
    merged = read(state["path"])
    merged.update(state["entries"])
    try:
        atomic_write_json(state["path"], merged if encode is None else {k: encode(v) for k, v in merged.items()})
        state["new"] = 0
    except FileWriteError as e:
        warnings.warn(f"trnsim: {what} not saved: {e}", RuntimeWarning, stacklevel=3)


def replace_marked_section(text, new, begin, end):
    """``text`` with the section from marker ``begin`` to marker ``end`` (both included) replaced by ``new``; each
    marker must be there once, in order (``ValueError`` otherwise)."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i or text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError("the file needs the generated section's two markers once each, in order:\n"
                         f"  {begin}\n  {end}")
    return text[:i] + new + text[j + len(end):]


def update_generated_section(path, new, replace, *, check, prog, what):
    """Replace (or, with ``check``, compare) the generated section of the document at ``path``.

    ``replace(text, new)`` returns the document with its generated section set to ``new`` (raising ``ValueError``
    when the document has no such section).  Returns a command's exit status after printing what happened: 0 when
    written or current, 1 when ``check`` finds the section stale, 2 when the file cannot be read or has no
    section.  ``prog`` names the command (``python -m <prog> --write``), ``what`` the section, in messages."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        updated = replace(text, new)
    except (OSError, ValueError) as e:
        print(f"{prog}: error: {path}: {e}", file=sys.stderr)
        return 2
    if check:
        if updated != text:
            print(f"{path}: the {what} are stale; regenerate with python -m {prog} --write {path}", file=sys.stderr)
            return 1
        return 0
    with atomic_write(path, "w") as f:
        f.write(updated)
    print(f"wrote the {what} to {path}")
    return 0
