"""The kernel being simulated: its cores, the current program id, and allocation on behalf of the kernel."""

from __future__ import annotations

import threading

__all__ = ["current", "KernelContext", "NoKernelError"]


class NoKernelError(RuntimeError):
    pass


class KernelContext:
    def __init__(self, cores, grid=(1,)):
        self.cores = cores
        self.grid = tuple(grid)
        self.program_id = (0,) * len(self.grid)
        self.core = cores[0]
        self.shared_outputs = []     # shared_hbm buffers in creation order, shared by all programs
        self._shared_index = 0
        self.mailbox = {}            # nisa.sendrecv: (pipe, sender, receiver, n) -> src tensor, shared by all programs
        self._sendrecv_seq = {}      # per program (rebound by each program's copy): (pipe, peer) -> messages sent


_local = threading.local()


def current() -> KernelContext:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise NoKernelError("this NKI call must run inside a kernel called through nki.jit/nki.simulate "
                            "(trnsim simulates kernels; it does not run NKI calls outside one)")
    return ctx


def push(ctx):
    prev = getattr(_local, "ctx", None)
    _local.ctx = ctx
    return prev


def pop(prev):
    _local.ctx = prev
