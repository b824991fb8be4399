"""All simulation state of a kernel is freed when it returns: 1,000 small kernels in one process keep RSS flat."""

import gc
import os
import sys
import warnings

import numpy as np
import pytest

import trnsim
import trnsim.kernels.neuronxcc.nki as nki1
import trnsim.kernels.neuronxcc.nki.language as nl1
import trnsim.kernels.nki as nki
import trnsim.kernels.nki.isa as nisa
import trnsim.kernels.nki.language as nl
from trnsim.machine.core import NeuronCore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _v2():
    def body(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        r = x.shape[0] // nl.num_programs(0)
        p = nl.program_id(0)
        t = nl.ndarray((r, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[p * r:(p + 1) * r, :])
        nisa.tensor_scalar(t, t, nl.add, 1.0)
        nisa.dma_copy(out[p * r:(p + 1) * r, :], t)
        return out
    return nki.jit(body)


def _v1():
    def body(a):
        out = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
        t = nl1.load(a)
        nl1.store(out, value=t * 2.0)
        return out
    return nki1.jit(body)


def _failing():
    def body(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        raise RuntimeError("kernel gives up")
    return nki.jit(body)


def test_thousand_kernels_keep_memory_flat():
    x = np.ones((128, 2048), np.float32)        # 1 MiB per tensor: a kernel's state leaking would show at once
    kernels = []                                 # kept alive, as a test module keeps its kernels

    def run(i):
        kind = i % 5
        if kind == 4:
            k = _failing()
            with pytest.raises(RuntimeError):
                k(x)
        elif kind == 3:
            k = _v2()
            trnsim.profile(k)(x)                 # scheduled: the timeline is returned, then dropped
        else:
            k = _v1() if kind == 0 else _v2()
            out = (k[2] if kind == 2 else k)(x)
            assert out.shape == x.shape
        kernels.append(k)

    with warnings.catch_warnings():
        warnings.simplefilter("error")           # none of these kernels races
        for i in range(100):
            run(i)
        gc.collect()
        base = _rss_mib()
        for i in range(100, 1000):
            run(i)
    gc.collect()
    grown = _rss_mib() - base
    assert not [o for o in gc.get_objects() if type(o) is NeuronCore], "a NeuronCore outlived its kernel"
    # each kernel handles ~4 MiB of tensors: keeping one kernel's state per kernel would add >= 900 MiB
    assert grown < 64, f"RSS grew {grown:.0f} MiB over 900 kernels"
