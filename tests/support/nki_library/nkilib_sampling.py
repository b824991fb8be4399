"""Which collected nki-library tests a run keeps (the runner's --every/--offset/--limit/--resume), as a pure
function the pytest plugin calls and trnsim's tests check.  Read by the plugin from the environment:
``TRNSIM_NKILIB_EVERY``, ``TRNSIM_NKILIB_OFFSET``, ``TRNSIM_NKILIB_LIMIT``, ``TRNSIM_NKILIB_DONE`` (a file of
node ids an earlier run recorded) and ``TRNSIM_NKILIB_ONLY`` (a file of the node ids to run, if given)."""

from __future__ import annotations

import os


def _ids(path):
    with open(path) as f:
        return {ln.strip() for ln in f if ln.strip()}


def from_env(environ=os.environ):
    """``(every, offset, limit, done, only)`` from the environment (``only`` None: no such list)."""
    done = _ids(environ["TRNSIM_NKILIB_DONE"]) if environ.get("TRNSIM_NKILIB_DONE") else set()
    only = _ids(environ["TRNSIM_NKILIB_ONLY"]) if environ.get("TRNSIM_NKILIB_ONLY") else None
    return (int(environ.get("TRNSIM_NKILIB_EVERY", "1") or 1), int(environ.get("TRNSIM_NKILIB_OFFSET", "0") or 0),
            int(environ.get("TRNSIM_NKILIB_LIMIT", "0") or 0), done, only)


def keep(nodeids, every=1, offset=0, limit=0, done=(), only=None):
    """The indices into ``nodeids`` to run: every ``every``-th in sorted node-id order (so every xdist worker
    keeps the same ones) from the ``offset``-th, at most ``limit`` of them (0: no limit), less those in ``done``;
    with ``only`` (the runner's ``--retry-memory``: ``TRNSIM_NKILIB_ONLY``), just those of them it names."""
    order = sorted(range(len(nodeids)), key=lambda i: nodeids[i])
    picked = order[offset::max(every, 1)][:limit or None]
    return {i for i in picked if nodeids[i] not in done and (only is None or nodeids[i] in only)}
