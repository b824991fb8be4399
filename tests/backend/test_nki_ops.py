"""NKI kernels called eagerly with ``neuron`` tensors (issue 21): results, views, dtypes, grids, legacy kernels,
memory accounting, the per-specialisation cache, the device timeline and profile, and bad input."""

import pytest
import torch

import trnsim
from trnsim.backend import nki_bridge
from trnsim.backend.device_state import STATE
from trnsim.backend.memory import MEMORY
from trnsim.backend.tensor import NeuronTensor

import nki_op_kernels as K  # tests/backend/ is on sys.path (pytest rootdir-relative import)


@pytest.fixture(autouse=True)
def _fresh_cache():
    nki_bridge.cache_clear()
    yield


def _r(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def test_kernel_on_neuron_tensors_returns_neuron_tensors():
    a, b = _r(128, 64), _r(128, 64, seed=1)
    out = K.scaled_add(a.to("neuron"), b.to("neuron"))
    assert type(out) is NeuronTensor and out.device.type == "neuron"
    assert out.dtype == torch.float32 and out.shape == (128, 64)
    ref = 2.0 * a.double() + b.double()
    assert (out.cpu().double() - ref).abs().max() < 1e-5
    assert trnsim.backend.fallback_counts() == {}


def test_bf16_output_is_the_fp32_result_rounded_once():
    a, b = _r(64, 32, dtype=torch.bfloat16), _r(64, 32, dtype=torch.bfloat16, seed=1)
    out = K.scaled_add(a.to("neuron"), b.to("neuron"), 3.0)
    assert out.dtype == torch.bfloat16
    ref = (3.0 * a.float() + b.float()).to(torch.bfloat16)
    assert torch.equal(out.cpu(), ref)


def test_views_and_non_contiguous_inputs_are_read_from_device_storage():
    base = _r(64, 128).to("neuron")
    t = base.t()                              # [128, 64], non-contiguous
    sl = _r(256, 64, seed=2).to("neuron")[64:192]   # a slice with a storage offset
    assert not t.is_contiguous()
    out = K.scaled_add(t, sl, 1.0)
    ref = base.cpu().t().double() + sl.cpu().double()
    assert (out.cpu().double() - ref).abs().max() < 1e-5


def test_non_tensor_arguments_and_legacy_kernels():
    a, b = _r(32, 16), _r(32, 16, seed=1)
    out = K.scaled_add(a.to("neuron"), b.to("neuron"), scale=-0.5)
    assert (out.cpu().double() - (-0.5 * a.double() + b.double())).abs().max() < 1e-5
    c = K.legacy_add(a.to("neuron"), b.to("neuron"))
    assert type(c) is NeuronTensor
    assert (c.cpu().double() - (a.double() + b.double())).abs().max() < 1e-5


def test_launch_grid_runs_every_program():
    a = _r(256, 32)
    out = K.rows_split[2](a.to("neuron"))
    assert torch.equal(out.cpu(), 2 * a)


def test_kernel_writing_into_its_input_updates_the_tensor_and_its_version():
    x = torch.zeros(16, 8).to("neuron")
    v0 = x._version
    res = K.add_into(x, torch.ones(16, 8).to("neuron"))
    assert res is None
    assert torch.equal(x.cpu(), torch.ones(16, 8))
    assert x._version > v0
    # into a slice of a bigger tensor: only that slice changes
    big = torch.zeros(32, 8).to("neuron")
    K.add_into(big[8:24], torch.full((16, 8), 3.0).to("neuron"))
    want = torch.zeros(32, 8)
    want[8:24] = 3.0
    assert torch.equal(big.cpu(), want)


def test_cache_hits_and_misses_per_specialisation():
    a, b = _r(32, 16).to("neuron"), _r(32, 16, seed=1).to("neuron")
    K.scaled_add(a, b)
    K.scaled_add(a, b)
    assert nki_bridge.cache_info() == {"hits": 1, "misses": 1, "entries": 1}
    K.scaled_add(a, b, 3.0)                         # a new non-tensor value: compiled again
    K.scaled_add(a.to(torch.bfloat16), b.to(torch.bfloat16))   # new dtypes
    K.scaled_add(a[:16], b[:16])                   # new shapes
    assert nki_bridge.cache_info() == {"hits": 1, "misses": 4, "entries": 4}
    assert torch.neuron.nki_cache_info() == nki_bridge.cache_info()


def test_cache_hit_reuses_the_timeline_and_gives_the_same_numbers_and_time():
    a, b = _r(128, 64).to("neuron"), _r(128, 64, seed=1).to("neuron")
    t0 = STATE.now_ns
    first = K.scaled_add(a, b)
    t1 = STATE.now_ns
    second = K.scaled_add(a, b)
    t2 = STATE.now_ns
    assert torch.equal(first.cpu(), second.cpu())
    assert t1 - t0 == t2 - t1 > 0
    (entry,) = nki_bridge._CACHE.values()
    from trnsim.backend import costs
    assert t1 - t0 == pytest.approx(costs.launch_ns(STATE.target) + entry.timeline.total_ns)


def test_profile_shows_the_kernel_as_one_operator_with_its_engines_and_lines():
    a, b = _r(128, 256).to("neuron"), _r(128, 256, seed=1).to("neuron")
    with trnsim.profile_torch() as p:
        c = a * 2
        d = K.scaled_add(c, b)
        e = d + 1                                   # noqa: F841
    ops = [r.op for r in p.rows]
    assert ops == ["aten::mul", "nki::scaled_add", "aten::add"]
    row = p.rows[1]
    assert row.kind == "native" and row.source.endswith("test_nki_ops.py:" + str(_line_of("d = K.scaled_add(c, b)")))
    assert p.rows[0].end_ns <= row.start_ns and row.end_ns <= p.rows[2].start_ns
    (k,) = p.kernels
    assert k.name == "scaled_add" and not k.hit
    engines = {r.engine for r in k.timeline.rows()}
    assert "dma" in engines and engines & {"vector", "scalar", "gpsimd"}
    kfile = K.__file__
    assert any(r.loc and r.loc[0] == kfile for r in k.timeline.rows())
    tl = p.timeline()
    # the kernel's instructions take the place of its op row, inside the op's time span
    kr = [r for r in tl.rows() if r.loc and r.loc[0] == kfile]
    assert len(kr) == len(k.timeline)
    assert min(r.start for r in kr) >= row.start_ns - p.rows[0].start_ns
    assert max(r.end for r in kr) <= row.end_ns - p.rows[0].start_ns + 1e-6
    trace = p.to_chrome_trace()
    lanes = {e["tid"] for e in trace["traceEvents"] if e.get("cat") == "nki"}
    assert any("dma q" in str(t) for t in lanes)
    assert "NKI kernels: 1 calls" in p.summary()


def _line_of(text):
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return i
    raise AssertionError(text)


def test_outputs_are_counted_in_device_memory_and_the_simulated_oom_applies():
    import gc
    a = _r(128, 64).to("neuron")
    gc.collect()                 # earlier tests' cyclic garbage must not be freed in the middle of the measurement
    before = MEMORY.allocated
    out = K.scale(a, 2.0)
    assert MEMORY.allocated - before == out.numel() * out.element_size()
    del out
    assert MEMORY.allocated == before
    prev = MEMORY.fraction
    gc.collect()
    try:
        MEMORY.fraction = (MEMORY.allocated + 1024) / STATE.target.hbm_bytes_per_logical_core(STATE.lnc)
        MEMORY._cap_key = None
        with pytest.raises(torch.OutOfMemoryError, match="neuron out of memory"):
            K.scale(a, 2.0)                          # 32 KiB output > 1 KiB free
        assert MEMORY.allocated == before
    finally:
        MEMORY.fraction = prev
        MEMORY._cap_key = None
    assert torch.equal(K.scale(a, 2.0).cpu(), 2 * a.cpu())


def test_cpu_tensor_mixed_with_neuron_tensors_gets_the_mixed_device_error():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, neuron:0 and cpu"):
        K.scaled_add(_r(8, 8).to("neuron"), _r(8, 8))


def test_exception_inside_a_kernel_leaves_the_device_usable():
    import gc
    a = _r(256, 8).to("neuron")
    gc.collect()                 # earlier tests' cyclic garbage must not be freed in the middle of the measurement
    before = MEMORY.allocated
    clock = STATE.now_ns
    from trnsim.isa.errors import NkiValidationError
    with pytest.raises(NkiValidationError, match="exceed architecture limitation of 128"):
        K.too_many_partitions(a)
    gc.collect()
    assert MEMORY.allocated == before and STATE.now_ns == clock
    from trnsim.kernels import context
    with pytest.raises(context.NoKernelError):
        context.current()                             # no kernel context left behind
    b = _r(128, 8).to("neuron")
    assert torch.equal(K.scale(b, 3.0).cpu(), 3 * b.cpu())
