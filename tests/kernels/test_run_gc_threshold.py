"""run_kernel raises the cycle collector's youngest-generation threshold only while the launch runs."""

import gc

import numpy as np

import trnsim
from trnsim.kernels.jit import GC_YOUNG

trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


def test_threshold_raised_during_the_launch_and_restored():
    seen = []

    def k(x):
        seen.append(gc.get_threshold()[0])
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out

    old = gc.get_threshold()
    gc.set_threshold(700, old[1], old[2])
    try:
        x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
        res = trnsim.jit(k).run(x)
        assert np.array_equal(np.asarray(res.outputs), x)
        assert seen == [GC_YOUNG]
        assert gc.get_threshold() == (700, old[1], old[2])
        gc.set_threshold(0, old[1], old[2])         # a disabled threshold stays disabled
        trnsim.jit(k).run(x)
        assert seen[-1] == 0 and gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*old)
