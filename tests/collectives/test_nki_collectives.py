"""nki.collectives inside kernels on several simulated ranks: numerics against float64, rank-lists, ring permutes,
mismatches and missing ranks, and the collective's time in each rank's Timeline."""

import importlib
import os
import sys

import numpy as np
import pytest

import trnsim
from trnsim import config
from trnsim.collectives import collective_time, get_topology

trnsim.install_nki()
import nki  # noqa: E402
import nki.collectives as ncc  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402
from nki.collectives import ReplicaGroup, rg_partition_op  # noqa: E402

from trnsim.kernels.collectives import CollectiveMismatch, CollectiveTimeout, run_ranks  # noqa: E402


def _xs(n=4, shape=(128, 64), seed=0):
    return [np.random.default_rng(seed + r).standard_normal(shape).astype(np.float32) for r in range(n)]


@nki.jit
def all_reduce_k(inp, rg):
    src = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm, name="dst")
    out = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=inp)
    ncc.all_reduce(dsts=[dst], srcs=[src], op=nl.add, replica_group=rg)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def gather_sbuf_k(inp, rg, n):
    h, w = inp.shape
    a = nl.ndarray((h, w), dtype=inp.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=inp)
    b = nl.ndarray((h, w * n), dtype=inp.dtype, buffer=nl.sbuf)
    ncc.all_gather(dsts=[b], srcs=[a], replica_group=rg, collective_dim=1)
    out = nl.ndarray((h, w * n), dtype=inp.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=b)
    return out


@nki.jit
def rs_a2a_k(inp, rg, n):
    h, w = inp.shape
    src = nl.ndarray((h, w), dtype=inp.dtype, buffer=nl.shared_hbm, name="src")
    nisa.dma_copy(dst=src, src=inp)
    rs = nl.ndarray((h // n, w), dtype=inp.dtype, buffer=nl.shared_hbm, name="rs")
    ncc.reduce_scatter(dsts=[rs], srcs=[src], replica_group=rg, op=nl.add, collective_dim=0)
    a2a = nl.ndarray((h, w), dtype=inp.dtype, buffer=nl.shared_hbm, name="a2a")
    ncc.all_to_all(dsts=[a2a], srcs=[src], replica_group=rg, collective_dim=0)
    o1 = nl.ndarray((h // n, w), dtype=inp.dtype, buffer=nl.shared_hbm)
    o2 = nl.ndarray((h, w), dtype=inp.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o1, src=rs)
    nisa.dma_copy(dst=o2, src=a2a)
    return o1, o2


@nki.jit
def ring_k(inp, rg, n):
    """Pass each rank's tile round the ring, accumulating; record whose data each step holds."""
    h, w = inp.shape
    cur = nl.ndarray((h, w), dtype=inp.dtype, buffer=nl.shared_hbm, name="cur")
    nisa.dma_copy(dst=cur, src=inp)
    acc = nl.ndarray((h, w), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=acc, src=inp)
    owners = []
    for it in range(1, n):
        nxt = nl.ndarray((h, w), dtype=inp.dtype, buffer=nl.shared_hbm, name=f"nxt{it}")
        ncc.collective_permute_implicit(srcs_by_channel=[[cur]], dsts_by_channel=[[nxt]], replica_group=rg)
        owners.append(ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=it, replica_group=rg))
        t = nl.ndarray((h, w), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=nxt)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
        cur = nxt
    out = nl.ndarray((h, w), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    ring_k.owners[ncc.rank_id()] = owners
    return out


ring_k.owners = {}


def test_all_reduce_matches_float64_and_costs_the_model():
    xs = _xs()
    rg = ReplicaGroup([[0, 1, 2, 3]])
    res = run_ranks(all_reduce_k, [(x, rg) for x in xs])
    ref = np.sum(np.stack(xs).astype(np.float64), axis=0)
    want_ns = collective_time("all_reduce", 128 * 64 * 4, get_topology("trn2.48xlarge"), nranks=4).time_ns
    for r in res:
        np.testing.assert_allclose(r.outputs, ref, rtol=1e-6, atol=1e-5)
        cc = [i for c in r.cores for i in c.instructions if i.opcode == "cc.all_reduce"]
        assert len(cc) == 1 and cc[0].ns == pytest.approx(want_ns) and cc[0].nbytes == 128 * 64 * 4
        assert r.timeline().total_ns >= want_ns


def test_rank_lists_run_independently():
    xs = _xs()
    rg = ReplicaGroup.from_partition_op(4, rg_partition_op.div, 2)
    assert rg.rank_lists == [[0, 1], [2, 3]]
    assert ReplicaGroup.from_partition_op(8, rg_partition_op.mod, 4).rank_lists == [[0, 4], [1, 5], [2, 6], [3, 7]]
    res = run_ranks(all_reduce_k, [(x, rg) for x in xs])
    np.testing.assert_allclose(res[1].outputs, xs[0].astype(np.float64) + xs[1], rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(res[2].outputs, xs[2].astype(np.float64) + xs[3], rtol=1e-6, atol=1e-5)
    with pytest.raises(ValueError, match="rank 1 is in rank-lists"):
        ReplicaGroup([[0, 1], [1, 2]])


def test_all_gather_sbuf_reduce_scatter_all_to_all():
    xs = _xs(4, (128, 16))
    rg = ReplicaGroup([[0, 1, 2, 3]])
    res = run_ranks(gather_sbuf_k, [(x, rg, 4) for x in xs])
    for r in res:
        np.testing.assert_array_equal(r.outputs, np.concatenate(xs, axis=1))
    res = run_ranks(rs_a2a_k, [(x, rg, 4) for x in xs])
    tot = np.sum(np.stack(xs).astype(np.float64), axis=0)
    for r in res:
        o1, o2 = r.outputs
        np.testing.assert_allclose(o1, tot[32 * r.rank:32 * (r.rank + 1)], rtol=1e-6, atol=1e-5)
        np.testing.assert_array_equal(o2, np.concatenate([x[32 * r.rank:32 * (r.rank + 1)] for x in xs]))


def test_ring_permute_and_processing_rank_id():
    xs = _xs(4, (32, 8))
    rg = ReplicaGroup([[0, 1, 2, 3]])
    ring_k.owners.clear()
    res = run_ranks(ring_k, [(x, rg, 4) for x in xs])
    ref = np.sum(np.stack(xs).astype(np.float64), axis=0)
    for r in res:
        np.testing.assert_allclose(r.outputs, ref, rtol=1e-6, atol=1e-5)
        # step i holds the data of the rank i places before it in the ring
        assert ring_k.owners[r.rank] == [(r.rank - i) % 4 for i in (1, 2, 3)]


def test_mismatch_and_missing_rank_raise():
    xs = _xs()
    xs[2] = xs[2][:64]
    rg = ReplicaGroup([[0, 1, 2, 3]])
    with pytest.raises(CollectiveMismatch, match=r"ranks \[2\] disagree"):
        run_ranks(all_reduce_k, [(x, rg) for x in xs])

    @nki.jit
    def skip_on_3(inp, rg):
        out = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm)
        if ncc.rank_id() != 3:
            ncc.all_reduce(dsts=[out], srcs=[inp], op=nl.add, replica_group=rg)
        else:
            nisa.dma_copy(dst=out, src=inp)
        return out
    with pytest.raises(CollectiveTimeout, match=r"ranks \[3\] did not arrive within 1 s"):
        run_ranks(skip_on_3, [(x, rg) for x in _xs()], timeout=1.0)


def test_compute_overlaps_the_collective_in_the_timeline():
    @nki.jit
    def overlap(inp, other, rg):
        src = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm, name="src")
        dst = nl.ndarray(inp.shape, dtype=inp.dtype, buffer=nl.shared_hbm, name="dst")
        nisa.dma_copy(dst=src, src=inp)
        a = nl.ndarray(other.shape, dtype=other.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=other)
        ncc.all_reduce(dsts=[dst], srcs=[src], op=nl.add, replica_group=rg)
        for _ in range(8):                       # independent of the collective
            nisa.activation(dst=a, data=a, op=nl.exp)
        out = nl.ndarray(other.shape, dtype=other.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        return out
    rg = ReplicaGroup([[0, 1, 2, 3]])
    big = _xs(4, (128, 4096))
    small = np.zeros((128, 512), np.float32)
    res = run_ranks(overlap, [(x, small, rg) for x in big])
    tl = res[0].timeline()
    rows = list(tl.rows())
    cc = [r for r in rows if r.opcode == "cc.all_reduce"][0]
    exps = [r for r in rows if r.engine == "scalar"]
    assert cc.end - cc.start > 10_000                  # 2 MiB all-reduce: RDH, tens of us
    assert len(exps) == 8
    # the exps ran while the all-reduce moved
    assert all(cc.start <= e.start and e.end <= cc.end for e in exps)


NKILIB = os.path.join(config.nki_library_path or "", "src")


@pytest.mark.skipif(not config.nki_library_path or not os.path.isdir(NKILIB),
                    reason="AWS nki-library is not here (set NKI_LIBRARY_PATH to a checkout)")
@pytest.mark.parametrize("mod", ["experimental.collectives.sb2sb_allgather", "experimental.collectives.fgcc",
                                 "experimental.collectives.fg_allgather",
                                 "experimental.transformer.attention_block_tkg_sharding"])
def test_nki_library_collective_files_import(mod):
    sys.path.insert(0, NKILIB)
    try:
        try:
            importlib.import_module(f"nkilib_src.nkilib.{mod}")
        except AttributeError as e:         # a front-end name trnsim lacks, not a collective one
            if "nki.collectives" in str(e) or "collectives" in str(e):
                raise
            pytest.xfail(f"front end gap outside nki.collectives: {e}")
    finally:
        sys.path.remove(NKILIB)
