"""The NKI v2 surface AWS's nki-library kernels rely on (issue 13), each checked with a small kernel of our own:
config records (``nl.NKIObject`` + ``@dataclass``), ``nl.tile_size`` figures as ints, ordered ``nc_version``,
``tensor.buffer == nl.sbuf``, ``nisa.core_barrier``, ``nl.shared_constant``, ``nl.shared_identity_matrix`` and the
``nki_cpu_simulator`` package the nki-library harness imports."""

import dataclasses
import importlib
import sys
import warnings
from typing import Optional

import numpy as np
import pytest

import trnsim
from trnsim.isa.errors import NkiValidationError
from trnsim.targets import TARGETS

trnsim.install_nki()
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

A = (np.arange(128 * 64, dtype=np.float32).reshape(128, 64) % 29) / 4 - 3


# -- NKIObject records -------------------------------------------------------------------------------------------
def test_nkiobject_dataclass_without_annotations_takes_keywords():
    @dataclasses.dataclass
    class Section(nl.NKIObject):
        idx = None
        offset = 5

    s = Section(idx=3)
    assert (s.idx, s.offset) == (3, 5)
    assert Section().idx is None


def test_nkiobject_dataclass_fields_positional_defaults_and_left_out():
    @dataclasses.dataclass
    class Dims(nl.NKIObject):
        P: int
        F: int
        rest: int
        tags: list = dataclasses.field(default_factory=list)
        K: Optional[int] = None

    d = Dims(128, F=512)                       # `rest` left out, as nki-library's MLP constants do
    assert (d.P, d.F, d.K, d.tags) == (128, 512, None, [])
    assert not hasattr(d, "rest")
    assert Dims(1, 2, 3).tags is not Dims(1, 2, 3).tags      # default_factory called per object
    with pytest.raises(TypeError, match="positional"):
        Dims(1, 2, 3, [], 4, 5)
    with pytest.raises(TypeError, match="both"):
        Dims(1, P=2)


def test_nkiobject_frozen_dataclass_runs_post_init():
    @dataclasses.dataclass(frozen=True)
    class Cfg(nl.NKIObject):
        n: int

        def __post_init__(self):
            object.__setattr__(self, "twice", 2 * self.n)

    c = Cfg(n=21)
    assert c.twice == 42
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.n = 1


def test_nkiobject_used_inside_a_kernel():
    @dataclasses.dataclass
    class Tile(nl.NKIObject):
        rows: int
        scale: float = 2.0

    @nki.jit
    def k(x):
        cfg = Tile(rows=x.shape[0])
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((cfg.rows, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=cfg.scale)
        nisa.dma_copy(dst=out, src=t)
        return out
    np.testing.assert_array_equal(k(A), A * 2)


# -- tile_size, nc_version, buffer -------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_tile_size_figures_are_ints_of_the_target(target):
    tg = TARGETS[target]

    @nki.jit
    def k(x):
        out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
        ts = nl.tile_size
        for i, v in enumerate((ts.total_available_sbuf_size - 1000, ts.sbuf_size_bytes // 1024,
                               ts.psum_num_banks, ts.total_available_sbuf_size())):
            nisa.memset(dst=t[:, i:i + 1], value=int(v))
        nisa.dma_copy(dst=out, src=t)
        return out
    got = nki.simulate(k, target=target)(A)
    sb = tg.sbuf_partition_bytes
    assert got.tolist() == [[sb - 1000, sb // 1024, tg.psum_banks, sb]]


def test_nc_version_is_ordered():
    v = nisa.nc_version
    assert v.gen2 < v.gen3 < v.gen4 and v.gen4 >= v.gen4 and not v.gen3 > v.gen4
    assert sorted([v.gen4, v.gen2, v.gen3]) == [v.gen2, v.gen3, v.gen4]
    with pytest.raises(TypeError):
        v.gen3 < 3


@pytest.mark.parametrize("target,gen", [("trn1", 2), ("trn2", 3), ("trn3", 4)])
def test_kernel_branches_on_nc_version(target, gen):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        scale = 3.0 if nisa.get_nc_version() >= nisa.nc_version.gen3 else 5.0
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=scale)
        nisa.dma_copy(dst=out, src=t)
        return out
    np.testing.assert_array_equal(nki.simulate(k, target=target)(A), A * (3.0 if gen >= 3 else 5.0))


def test_tensor_buffer_compares_with_memory_regions():
    seen = {}

    @nki.jit
    def k(x):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        seen["x"] = (x.buffer == nl.hbm, x.buffer == nl.shared_hbm, x.buffer == nl.sbuf)
        seen["t"] = (t.buffer == nl.sbuf, t.buffer != nl.sbuf, t.buffer == nl.psum, t[0:4, :].buffer == nl.sbuf)
        seen["p"] = (p.buffer == nl.psum, p.buffer == nl.sbuf)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        return out
    k(A)
    assert seen == {"x": (True, True, False), "t": (True, False, False, True), "p": (True, False)}
    assert len({nl.sbuf, nl.psum, nl.sbuf}) == 2          # still hashable enum members


# -- core_barrier -----------------------------------------------------------------------------------------------
def _exchange(barrier):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        swapped = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        t = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[pid * 64:(pid + 1) * 64, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[pid * 64:(pid + 1) * 64, :], src=t)
        if barrier:
            nisa.core_barrier(out, (0, 1))
        u = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        other = 1 - pid
        nisa.dma_copy(dst=u, src=out[other * 64:(other + 1) * 64, :])   # the other program's rows
        nisa.dma_copy(dst=swapped[pid * 64:(pid + 1) * 64, :], src=u)
        return out, swapped
    return k


def test_core_barrier_orders_the_two_programs_of_an_lnc2_launch():
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # a race would be a RaceWarning
        out, swapped = _exchange(True)[2](A)
    np.testing.assert_array_equal(out, A + 1)
    np.testing.assert_array_equal(swapped, np.concatenate([A[64:], A[:64]]) + 1)


def test_without_core_barrier_the_exchange_is_a_race():
    from trnsim.machine.races import RaceWarning
    with pytest.warns(RaceWarning):
        _exchange(False)[2](A)


@pytest.mark.parametrize("cores,msg", [((0, 2), "0 to 1"), ("ab", "core id"), ((), "0 to 1")])
def test_core_barrier_refuses_cores_outside_the_launch(cores, msg):
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        nisa.core_barrier(out, cores)
        return out
    with pytest.raises(NkiValidationError, match=msg) as ei:
        k[2](A)
    assert ei.value.location[0] == __file__


def test_core_barrier_with_one_core_id_in_a_one_program_launch():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=x)
        nisa.core_barrier(out, 0)
        return out
    np.testing.assert_array_equal(k(A), A)


# -- shared constants ------------------------------------------------------------------------------------------
def test_shared_constant_from_npy_file_and_array(tmp_path):
    c1 = (np.arange(32 * 16, dtype=np.float32).reshape(32, 16) - 100) / 7
    path = tmp_path / "c1.npy"
    np.save(path, c1)
    c2 = np.arange(32 * 16, dtype=np.int32).reshape(32, 16) * 3 - 5

    @nki.jit
    def k(x):
        a = nl.shared_constant(str(path))
        b = nl.shared_constant(c2)
        o1 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        o2 = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        nisa.dma_copy(dst=o1, src=t)
        nisa.dma_copy(dst=o2, src=b)
        return o1, o2
    o1, o2 = k(A)
    np.testing.assert_array_equal(o1, c1)
    assert o2.dtype == np.int32
    np.testing.assert_array_equal(o2, c2)


def test_shared_constant_bad_file_is_a_located_error(tmp_path):
    bad = tmp_path / "not.npy"
    bad.write_text("hello")

    @nki.jit
    def k(x):
        return nl.shared_constant(str(bad))
    with pytest.raises(NkiValidationError, match="cannot load") as ei:
        k(A)
    assert ei.value.location[0] == __file__


def test_shared_identity_matrix_transposes_with_nc_matmul():
    x = A[:64, :32]                                       # [K=64, M=32]

    @nki.jit
    def k(x):
        ident = nl.shared_identity_matrix(64, dtype=nl.float32)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        p = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=p, stationary=t, moving=ident)        # x.T @ I
        s = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=p)
        out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=s)
        e = nl.ndarray((64, 64), dtype=nl.uint8, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=e, src=nl.shared_identity_matrix(64))
        return out, e
    out, e = k(x)
    np.testing.assert_array_equal(out, x.T)
    np.testing.assert_array_equal(e, np.eye(64, dtype=np.uint8))


def test_shared_identity_matrix_refuses_more_than_the_partitions():
    @nki.jit
    def k(x):
        return nl.shared_identity_matrix(129)
    with pytest.raises(NkiValidationError, match="1 to 128"):
        k(A)


# -- nki_cpu_simulator -----------------------------------------------------------------------------------------
SUBMODULES = ("builtin", "compiler", "isa", "isa.constants", "language", "language.dtypes", "tensor", "typing")


def test_nki_cpu_simulator_is_an_alias_of_trnsims_nki():
    sim = importlib.import_module("nki_cpu_simulator")
    assert sim.nki is sys.modules["trnsim.kernels.nki"]
    for sub in SUBMODULES:
        mod = importlib.import_module(f"nki_cpu_simulator.nki.{sub}")
        assert mod is sys.modules[f"nki.{sub}"], sub
    assert sys.modules["nki_cpu_simulator.nki.language"].bfloat16 == nl.bfloat16
    assert importlib.import_module("nki_cpu_simulator.nki.language.dtypes").float8_e4m3 == "float8_e4m3"
    assert importlib.import_module("nki_cpu_simulator.nki.isa.constants").oob_mode is nisa.oob_mode
    assert sim.nki.dtype is importlib.import_module("nki_cpu_simulator.nki.language.dtypes")


@pytest.mark.parametrize("gen,sbuf", [("gen2", TARGETS["trn1"].sbuf_partition_bytes),
                                      ("gen4", TARGETS["trn3"].sbuf_partition_bytes)])
def test_cpu_simulate_takes_the_target_from_nki_nc_version(monkeypatch, gen, sbuf):
    from nki_cpu_simulator import nki as sim_nki
    monkeypatch.setenv("NKI_NC_VERSION", gen)

    def k(x, scale):                                      # a plain function, keyword inputs, as the harness calls
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=scale)
        nisa.memset(dst=t[:, 0:1], value=float(nl.tile_size.total_available_sbuf_size))
        nisa.dma_copy(dst=out, src=t)
        return out
    got = sim_nki.cpu_simulate(k)[1](x=A, scale=2.0)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got[:, 1:], A[:, 1:] * 2)
    assert (got[:, 0] == sbuf).all()


# -- .ap() with dynamic offsets ----------------------------------------------------------------------------------
def test_ap_scalar_offset_reads_the_row_from_a_tensor():
    x = A[:16, :8].copy()                                 # [16, 8] in HBM
    rows = np.array([[5], [11]], dtype=np.int32)

    @nki.jit
    def k(x, rows):
        r = nl.ndarray((2, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=r, src=rows)
        out = nl.ndarray((2, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        for i in range(2):
            nisa.dma_copy(dst=out[i:i + 1, :],
                          src=x.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=r[i:i + 1, 0:1],
                                   indirect_dim=0))
        shifted = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=shifted, src=x.ap(pattern=[[8, 1], [1, 4]], offset=8, scalar_offset=3, indirect_dim=1))
        return out, shifted
    out, shifted = k(x, rows)
    np.testing.assert_array_equal(out, x[[5, 11]])
    np.testing.assert_array_equal(shifted, x[1:2, 3:7])


def test_ap_vector_offset_places_rows_at_the_indices():
    cache = np.zeros((12, 4), dtype=np.float32)
    new = A[:3, :4].copy()

    def run(idx, gather=False):
        @nki.jit
        def k(cache, new, idx):
            ix = nl.ndarray((3, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=ix, src=idx)
            out = nl.ndarray(cache.shape, dtype=cache.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=cache)
            nisa.dma_copy(dst=out.ap(pattern=[[1, 3], [1, 4]], offset=0, vector_offset=ix, indirect_dim=0),
                          src=new)
            back = nl.ndarray((3, 4), dtype=cache.dtype, buffer=nl.sbuf)          # and gather them back
            nisa.dma_copy(dst=back, src=out.ap(pattern=[[1, 3], [1, 4]], offset=0, vector_offset=ix,
                                               indirect_dim=0))
            again = nl.ndarray((3, 4), dtype=cache.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=again, src=back)
            return out, again
        return k(cache, new, np.asarray(idx, dtype=np.int32).reshape(3, 1))
    for idx in ([2, 5, 8], [9, 1, 4]):                 # evenly spaced (a strided view) and a scatter/gather
        want = cache.copy()
        want[idx] = new
        out, again = run(idx)
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(again, new)
    with pytest.raises(IndexError, match="vector_offset row"):
        run([1, 12, 3])


def test_ap_vector_offset_out_of_range_rows_skipped_with_oob_mode_skip():
    cache = np.zeros((12, 4), dtype=np.float32)
    new = A[:3, :4].copy()

    @nki.jit
    def k(cache, new, idx, skip):
        ix = nl.ndarray((3, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ix, src=idx)
        out = nl.ndarray(cache.shape, dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=cache)
        kw = {"oob_mode": nisa.oob_mode.skip} if skip else {}
        nisa.dma_copy(dst=out.ap(pattern=[[1, 3], [1, 4]], offset=0, vector_offset=ix, indirect_dim=0),
                      src=new, **kw)
        return out
    for idx in ([2, 2**32 - 1, 7], [3, 4, 2**32 - 1], [8, 10, 12]):   # uint32 max: an invalid row (nki-library)
        got = k(cache, new, np.array(idx, dtype=np.uint32).reshape(3, 1), True)
        want = cache.copy()
        for r, i in enumerate(idx):
            if i < 12:
                want[i] = new[r]
        np.testing.assert_array_equal(got, want)
        with pytest.raises(IndexError, match="vector_offset row"):
            k(cache, new, np.array(idx, dtype=np.uint32).reshape(3, 1), False)


# -- sendrecv between the programs of an LNC=2 launch ----------------------------------------------------------
def test_sendrecv_swaps_tiles_between_the_two_programs():
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        mine = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        got = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=a[pid * 64:(pid + 1) * 64, :])
        nisa.sendrecv(src=mine, dst=got, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nisa.tensor_scalar(dst=mine, data=mine, op0=nl.add, operand0=100.0)   # after the send: not seen by peer
        nisa.dma_copy(dst=out[pid * 64:(pid + 1) * 64, :], src=got)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = k[2](A)
    np.testing.assert_array_equal(got, np.concatenate([A[64:], A[:64]]))


def test_sendrecv_refuses_itself_and_mismatched_shapes():
    def make(bad):
        @nki.jit
        def k(a):
            pid = nl.program_id(0)
            n = 32 if (bad == "shape" and pid == 1) else 64
            mine = nl.ndarray((n, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            got = nl.ndarray((64, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=mine, src=a[0:n, :])
            peer = pid if bad == "self" else 1 - pid
            nisa.sendrecv(src=mine, dst=got, send_to_rank=peer, recv_from_rank=peer, pipe_id=0)
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out[0:64, :], src=got)
            return out
        return k
    with pytest.raises(NkiValidationError, match="another program"):
        make("self")[2](A)
    with pytest.raises(NkiValidationError, match="sends float32"):
        make("shape")[2](A)


# -- registers --------------------------------------------------------------------------------------------------
def test_register_bounds_a_dynamic_loop_and_offsets_a_dma():
    x = A[:64, :8].copy()                                 # 4 tiles of 16 rows
    n_tiles = np.array([[3]], dtype=np.int32)             # only 3 are processed

    @nki.jit
    def k(x, n_tiles):
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=n_tiles)
        reg = nisa.register_alloc()
        nisa.register_load(reg, n_sb)
        row = nisa.register_alloc(0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        z = nl.ndarray((64, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=z, value=0.0)
        nisa.dma_copy(dst=out, src=z)
        for i in nl.dynamic_range(0, reg, 1):
            t = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 16], [1, 8]], offset=0, scalar_offset=row, indirect_dim=0))
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
            nisa.dma_copy(dst=out[i * 16:(i + 1) * 16, :], src=t)
            nisa.register_move(row, int(row) + 16)
        count = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(count, row)
        c = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=c, src=count)
        return out, c
    out, c = k(x, n_tiles)
    want = np.zeros_like(x)
    want[:48] = x[:48] + 1
    np.testing.assert_array_equal(out, want)
    assert c.tolist() == [[48]]


def test_register_load_refuses_a_tile_of_many_elements():
    @nki.jit
    def k(x):
        t = nl.ndarray((2, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=1)
        nisa.register_load(nisa.register_alloc(), t)
    with pytest.raises(NkiValidationError, match="one-element"):
        k(A)


def test_register_alloc_takes_its_value_from_a_one_element_tensor():
    # nki-library's moe_tkg kernels: nisa.register_alloc(decision_sb[0, 0])
    flags = np.array([[5, 9]], dtype=np.int32)

    @nki.jit
    def k(flags):
        sb = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=sb, src=flags)
        reg = nisa.register_alloc(sb[0, 1])
        out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.register_store(out, reg)
        o = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=out)
        return o
    assert k(flags).tolist() == [[9]]

    @nki.jit
    def many(flags):
        sb = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=sb, src=flags)
        nisa.register_alloc(sb)
    with pytest.raises(NkiValidationError, match="register_alloc: x.*one-element"):
        many(flags)


def test_nl_range_and_tensor_names():
    assert list(nl.range(2, 8, 3)) == [2, 5] and list(nl.range(3)) == [0, 1, 2]
    assert nl.tensor is nl.NkiTensor


# -- indexing a [P] on-chip view with its unit free dimension ---------------------------------------------------
def test_column_of_a_tile_indexed_again_with_its_unit_free_dim():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        col = t[:128, 5]                                  # an integer index drops the dimension: [128]
        assert tuple(col.shape) == (128,)
        c2 = col[:128, :1]                                # ... and the tile's unit free dim can be indexed again
        assert tuple(c2.shape) == (128, 1) and tuple(col[0:64, 0].shape) == (64,)
        out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=c2)
        return out
    np.testing.assert_array_equal(k(A), A[:, 5:6])


def test_extra_indices_still_refused_beyond_a_unit_dim_or_in_hbm():
    from trnsim.memory import IndexOutOfBounds

    @nki.jit
    def k(x, which):
        t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        if which == "range":
            t[:128, 5][:128, 0:2]
        else:
            x[:, 5][:, :1]
    for which in ("range", "hbm"):
        with pytest.raises(IndexOutOfBounds, match="too many indices"):
            k(A, which)


# -- vector engine reading a broadcast PSUM view --------------------------------------------------------------
def test_broadcast_psum_operand_is_bounded_by_its_footprint():
    @nki.jit
    def k(x, wide):
        p = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=p, value=0.5)
        t = nl.ndarray((128, 6144), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=t, value=2.0)
        if wide:                                   # 6144 distinct (bf16) PSUM elements per partition: refused
            q = nl.ndarray((128, 6144), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.memset(dst=q[:, 0:2048], value=0.0)
            nisa.tensor_tensor(dst=t, data1=t, data2=q, op=nl.subtract)
        nisa.tensor_tensor(dst=t, data1=t, data2=p.broadcast(1, 6144), op=nl.subtract)   # 1 element, re-read
        out = nl.ndarray((128, 6144), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    assert (k(A, False) == 1.5).all()
    with pytest.raises(NkiValidationError, match="exceeds maximum 4096 for PSUM"):
        k(A, True)
