"""Which collected nki-library tests a run keeps (the runner's --every/--offset/--limit/--resume), as a pure
function the pytest plugin calls and trnsim's tests check.  Read by the plugin from the environment:
``TRNSIM_NKILIB_EVERY``, ``TRNSIM_NKILIB_OFFSET``, ``TRNSIM_NKILIB_LIMIT`` and ``TRNSIM_NKILIB_DONE`` (a file of
node ids an earlier run recorded)."""

from __future__ import annotations

import os


def from_env(environ=os.environ):
    """``(every, offset, limit, done)`` from the environment."""
    done = set()
    if environ.get("TRNSIM_NKILIB_DONE"):
        with open(environ["TRNSIM_NKILIB_DONE"]) as f:
            done = {ln.strip() for ln in f if ln.strip()}
    return (int(environ.get("TRNSIM_NKILIB_EVERY", "1") or 1), int(environ.get("TRNSIM_NKILIB_OFFSET", "0") or 0),
            int(environ.get("TRNSIM_NKILIB_LIMIT", "0") or 0), done)


def keep(nodeids, every=1, offset=0, limit=0, done=()):
    """The indices into ``nodeids`` to run: every ``every``-th in sorted node-id order (so every xdist worker
    keeps the same ones) from the ``offset``-th, at most ``limit`` of them (0: no limit), less those in ``done``."""
    order = sorted(range(len(nodeids)), key=lambda i: nodeids[i])
    picked = order[offset::max(every, 1)][:limit or None]
    return {i for i in picked if nodeids[i] not in done}
