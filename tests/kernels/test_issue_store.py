"""The issue cache's store (trnsim/kernels/issue_cache.py ``_store``): a shape-only launch replays the layouts an
earlier launch of the process validated with the same settings, and its record, columns, interned patterns and timeline
are exactly those of a launch without the cache; launches that compute values, other targets and settings, and
other threads validate their own; a bad layout still fails as it does without the cache."""

import os
import threading

import numpy as np
import pytest

import trnsim
from trnsim.isa.errors import NkiValidationError
from trnsim.kernels import isa_api, issue_cache
from trnsim.kernels.jit import ShapeOnlyInput, run_kernel
from trnsim.kernels.library.elementwise import binary
from trnsim.kernels.library.matmul_blocked import blocked_matmul
from trnsim.machine import schedule

nki = trnsim.install_nki()
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from suite_files import load_file  # noqa: E402

HERE = os.path.dirname(__file__)
_IC = load_file("_ic_for_issue_store", os.path.join(HERE, "test_issue_cache.py"))
_SF = _IC._SF


@pytest.fixture(autouse=True)
def empty_store(monkeypatch):
    """A new process's state: no layout kept, no call site's function, the cache on; probes (first, validating
    runs of a layout) counted in ``probes``."""
    monkeypatch.setattr(isa_api, "_LOCS", {})
    prev = issue_cache.set_enabled(True)
    # (a process's first instruction meets the view class before it is known as one: its key is spelt otherwise)
    _launch((_tiles, (ShapeOnlyInput((128, 64), "float32"), False), {}))
    issue_cache.clear_store()
    made = []

    class Counted(issue_cache._Probe):
        __slots__ = ()

        def __init__(self, core):
            made.append(1)
            super().__init__(core)

    monkeypatch.setattr(issue_cache, "_Probe", Counted)
    yield made
    issue_cache.set_enabled(prev)
    issue_cache.clear_store()


def _mm():
    return (blocked_matmul, (ShapeOnlyInput((1024, 512), "bfloat16"), ShapeOnlyInput((1024, 1024), "bfloat16")),
            {"mb": 512, "nb": 512, "kc": 1024})


def _launch(case, target="trn2", execute=False, cached=True):
    fn, args, kw = case
    prev = issue_cache.set_enabled(cached)
    try:
        return run_kernel(fn, args, kw, (1,), target, execute=execute)
    finally:
        issue_cache.set_enabled(prev)


def _same(a, b):
    assert _IC._records(a) == _IC._records(b)
    assert _IC._columns(a) == _IC._columns(b)
    for ca, cb in zip(a.cores, b.cores):
        assert len(ca._views) == len(cb._views)      # each distinct access pattern interned once per core
    _SF.assert_same(schedule(a.cores, impl="python"), schedule(b.cores, impl="python"))


def test_a_later_launch_replays_the_layouts_an_earlier_one_validated(empty_store):
    probes = empty_store
    first = _launch(_mm())
    n_first = len(probes)
    assert n_first > 0
    second = _launch(_mm())
    assert len(probes) == n_first                  # nothing validated again
    assert len(second.cores[0].issue_cache) == len(first.cores[0].issue_cache)   # the core's own cache as before
    off = _launch(_mm(), cached=False)
    _same(first, off)
    _same(second, off)
    # another product of the same blocks: the layouts it shares are not validated again, its new ones are
    other = (blocked_matmul, (ShapeOnlyInput((1024, 1024), "bfloat16"), ShapeOnlyInput((1024, 1024), "bfloat16")),
             {"mb": 512, "nb": 512, "kc": 1024})
    n = len(probes)
    third = _launch(other)
    assert 0 <= len(probes) - n < n_first
    _same(third, _launch(other, cached=False))


def test_launches_that_compute_values_validate_their_own(empty_store):
    probes = empty_store
    a = np.zeros((128, 4096), np.float32)
    case = (binary, (a, a), {"op": "add"})
    _launch(case, execute=True)
    n = len(probes)
    assert n > 0
    _launch(case, execute=False)          # shape-only: validates (the store held nothing) and keeps its layouts
    assert len(probes) == 2 * n
    _launch(case, execute=True)           # values: validates again
    assert len(probes) == 3 * n
    _launch(case, execute=False)          # shape-only: from the store
    assert len(probes) == 3 * n


@pytest.mark.parametrize("other", [("trn1", None), ("trn2", "strict")])
def test_another_target_or_setting_has_its_own_store(empty_store, monkeypatch, other):
    probes = empty_store
    _launch(_mm())
    n = len(probes)
    target, strict = other
    if strict:
        monkeypatch.setenv("TRNSIM_STRICT_UNINIT", "1")
    got = _launch(_mm(), target=target)
    assert len(probes) == 2 * n           # validated anew
    _same(got, _launch(_mm(), target=target, cached=False))


def test_another_thread_has_its_own_store(empty_store):
    probes = empty_store
    _launch(_mm())
    n = len(probes)
    out = []
    th = threading.Thread(target=lambda: out.append(_launch(_mm())))
    th.start()
    th.join()
    assert len(probes) == 2 * n and out
    _same(out[0], _launch(_mm(), cached=False))


def _tiles(x, bad):
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in range(4):
        u = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        if bad and i == 3:
            nisa.tensor_scalar(u[0:64, :], t, nl.multiply, 2.0)      # partitions of dst and src differ
        else:
            nisa.tensor_scalar(u, t, nl.multiply, 2.0)
        nisa.dma_copy(out, u)
    return out


def test_a_bad_layout_fails_after_good_ones_were_kept(empty_store):
    x = ShapeOnlyInput((128, 64), "float32")
    _launch((_tiles, (x, False), {}))
    _launch((_tiles, (x, False), {}))
    errs = []
    for cached in (False, True):
        with pytest.raises(NkiValidationError) as ei:
            _launch((_tiles, (x, True), {}), cached=cached)
        errs.append((str(ei.value), ei.value.instruction, ei.value.operand, ei.value.location))
    assert errs[0] == errs[1] and errs[1][1] == "tensor_scalar"


def test_a_full_store_starts_again(empty_store, monkeypatch):
    monkeypatch.setattr(issue_cache, "STORE_ENTRIES", 3)
    _launch(_mm())
    got = _launch(_mm())
    assert all(len(st[1]) <= 3 for st in issue_cache._STORES.values())
    _same(got, _launch(_mm(), cached=False))
