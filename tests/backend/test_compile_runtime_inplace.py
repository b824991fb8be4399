"""The generated function's shortcuts for functionalised writes (``runtime._copy_fresh``, ``runtime._slice_scatter_into``,
chosen by ``runtime._shortcuts``, and ``runtime._copy_into_slice`` for the pairs ``runtime._fused_writes`` joins):
bit-identical to the ops they stand for, applied only where the overwritten value is never read again, and charging
the same simulated time as the reference walk (``CompiledGraph._interpret``), which runs the ops as traced."""

import pytest
import torch

from trnsim import backend
from trnsim.backend.compile import runtime

from test_compile_runtime_direct import compile_recording  # noqa: E402  (tests/backend on sys.path)
from test_compile_runtime_generated import _charged  # noqa: E402


def _bits(t):
    """A tensor's values as raw bits (so NaN payloads and negative zero compare exactly)."""
    t = t.contiguous()
    if t.dtype.is_floating_point:
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert a.storage_offset() == b.storage_offset()
    assert torch.equal(_bits(a), _bits(b))


def _specials(n, dtype, gen):
    x = torch.randn(n, generator=gen, dtype=torch.float64) * 1e3
    x[::7] = float("nan")
    x[1::7] = float("inf")
    x[2::7] = -float("inf")
    x[3::7] = -0.0
    x[4::7] = 3.0e38
    return x.to(dtype)


def _values(n, dtype, gen):
    if dtype.is_floating_point:
        return _specials(n, dtype, gen)
    return torch.randint(-2**31, 2**31 - 1, (n,), generator=gen).to(dtype)


@pytest.mark.parametrize("dst_dtype", [torch.int32, torch.uint8, torch.int8, torch.float32, torch.bfloat16,
                                       torch.float16])
@pytest.mark.parametrize("src_dtype", [torch.uint8, torch.int64, torch.float32, torch.bfloat16])
def test_copy_fresh_is_the_functional_copy(dst_dtype, src_dtype):
    gen = torch.Generator().manual_seed(3)
    if src_dtype.is_floating_point:
        src = _specials(24, src_dtype, gen)
        if not dst_dtype.is_floating_point:      # float -> int of NaN/inf is undefined in C: finite values only
            src = torch.nan_to_num(src.float(), nan=0.0, posinf=100.0, neginf=-100.0).clamp(-100, 100).to(src_dtype)
    else:
        src = torch.randint(0, 120, (24,), generator=gen).to(src_dtype)
    base = torch.randint(0, 5, (48,), generator=gen).to(dst_dtype)
    for dst, s in [(base[1::2], src),                       # a strided view (bitsandbytes' out[1::2])
                   (base[:24], src),                        # dense
                   (base.view(6, 8)[:, ::2], src.view(6, 4)),
                   (base[:4].view(4, 1).expand(4, 6), src[:6]),   # an expanded dst, a broadcast src
                   (base[:0], src[:0])]:
        _same(runtime._copy_fresh(dst, s), torch.ops.aten.copy.default(dst, s))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.bfloat16])
def test_slice_scatter_into_is_slice_scatter(dtype):
    gen = torch.Generator().manual_seed(5)
    for shape, dim, start, end, step in [((20,), 0, 1, None, 2), ((20,), 0, None, None, 2), ((4, 10), 1, -7, -1, 3),
                                         ((4, 10), 0, 1, 3, 1), ((6, 5), 1, 0, 9223372036854775807, 2),
                                         ((6, 5), 0, 2, 2, 1)]:
        base = _values(torch.Size(shape).numel(), dtype, gen).view(shape)
        view = torch.ops.aten.slice.Tensor(base, dim, start, end, step)
        src = _values(view.numel(), dtype, gen).view(view.shape)
        want = torch.ops.aten.slice_scatter.default(base, src, dim, start, end, step)
        got = runtime._slice_scatter_into(base.clone(), src, dim, start, end, step)
        _same(got, want)


def test_slice_scatter_into_runs_the_op_for_another_dtype_or_shape():
    base = torch.zeros(8, dtype=torch.int32)
    # another dtype: the op's own behaviour (copy_ would convert silently)
    src = torch.ones(4, dtype=torch.float32)
    try:
        want = torch.ops.aten.slice_scatter.default(base, src, 0, 0, None, 2)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e)[:30]):
            runtime._slice_scatter_into(base.clone(), src, 0, 0, None, 2)
    else:
        _same(runtime._slice_scatter_into(base.clone(), src, 0, 0, None, 2), want)
    # a src that copy_ would broadcast: slice_scatter refuses it, and so must the shortcut
    with pytest.raises(RuntimeError):
        torch.ops.aten.slice_scatter.default(base, torch.ones(1, dtype=torch.int32), 0, 0, None, 2)
    with pytest.raises(RuntimeError):
        runtime._slice_scatter_into(base.clone(), torch.ones(1, dtype=torch.int32), 0, 0, None, 2)


# -- graphs: which scatters run in place, and the same results and charges as the reference walk --------------------

def _dequant(a, code, absmax):
    """bitsandbytes' 4-bit dequantisation with a remainder block (two writes into an ``empty``, then two more)."""
    out = torch.empty(a.numel() * 2, dtype=torch.int32, device=a.device)
    out[1::2] = a & 0xF
    out[::2] = a >> 4
    vals = code[out]
    full = torch.empty(vals.numel(), dtype=torch.float32, device=a.device)
    full[:16] = (vals[:16].view(-1, 8) * absmax[:2].view(-1, 1)).reshape(-1)
    full[16:] = vals[16:] * absmax[2]
    return full.to(torch.bfloat16)


def _reread(x, s):
    """The scattered base is read again after the write (its old value): must not run in place."""
    base = torch.zeros(8, device=x.device) + x
    twice = base * 2
    base[::2] = s
    return base + twice


def _returned(x, s):
    """The base of a scatter is itself an output: must not run in place (a clone's scatter may)."""
    base = torch.full((8,), 1.5, device=x.device)
    y = base.clone()
    y[1::2] = s
    return base, y + x, torch.slice_scatter(base, s, 0, 0, None, 2)


def _input_base(x, s):
    """A write into a graph input (functionalised into a scatter of the input and a copy back)."""
    x[::2] = s
    return x * 3


def _other_slice(x, s):
    """The copy's ``dst`` is another slice of the base than the one scattered back: the two writes stay apart."""
    base = torch.zeros(8, device=x.device)
    c = torch.ops.aten.copy.default(torch.ops.aten.slice.Tensor(base, 0, 0, None, 2), s)
    return torch.ops.aten.slice_scatter.default(base, c, 0, 1, None, 2) + x


def _converted(a, s):
    """Writes that convert (uint8 into int32, above the host-write size) and broadcast (one value into a slice)."""
    out = torch.empty(a.numel() * 2, dtype=torch.int32, device=a.device)
    out[1::2] = a & 0xF
    out[::2] = s
    return out * 3


def _cases():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 256, (10,), dtype=torch.uint8, generator=g)
    code = torch.linspace(-1, 1, 16)
    code[3] = -0.0
    absmax = torch.rand(3, generator=g) + 0.5
    x = torch.randn(8, generator=g)
    s = torch.randn(4, generator=g)
    s[0] = float("nan")
    big = torch.randint(0, 256, (runtime._HOST_WRITE_MIN + 3,), dtype=torch.uint8, generator=g)
    return {"dequant": (_dequant, (a, code, absmax)), "reread": (_reread, (x, s)), "returned": (_returned, (x, s)),
            "input_base": (_input_base, (x, s)), "other_slice": (_other_slice, (x, s)),
            "converted": (_converted, (big, torch.tensor([-7], dtype=torch.int64)))}


def _run(fn, inputs, generated, monkeypatch, graphs):
    cfn = compile_recording(fn, generated, monkeypatch, graphs)
    cfn(*[t.to("neuron") for t in inputs])
    dev = [t.to("neuron") for t in inputs]
    outs, charges = [], []
    for _ in range(3):          # a fixed sequence of calls: the clock after each
        out, ns = _charged(lambda: cfn(*dev))
        out = out if isinstance(out, tuple) else (out,)
        outs.append([o.cpu() for o in out] + [d.cpu() for d in dev])
        charges.append(ns)
    return outs, charges


@pytest.fixture(autouse=True)
def _device():
    backend.register()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("case,in_place,copies,fused", [("dequant", 4, 4, 4), ("reread", 0, 1, 0),
                                                        ("returned", 1, 1, 1), ("input_base", 0, 1, 0),
                                                        ("other_slice", 1, 1, 0), ("converted", 2, 2, 2)])
def test_shortcuts_only_where_unobservable(case, in_place, copies, fused, monkeypatch):
    fn, inputs = _cases()[case]
    ref, ref_ns = _run(fn, inputs, False, monkeypatch, [])
    graphs = []
    got, got_ns = _run(fn, inputs, True, monkeypatch, graphs)
    assert got_ns == ref_ns and all(ns > 0 for ns in ref_ns)
    for r_call, g_call in zip(ref, got, strict=True):
        for r, o in zip(r_call, g_call, strict=True):
            assert r.dtype == o.dtype and r.shape == o.shape
            assert torch.equal(_bits(r), _bits(o))
    found = [runtime._shortcuts(g, runtime._direct_steps(g)) for g in graphs]
    assert sum(len(sc) for sc, _ in found) == in_place
    assert sum(len(cp) for _, cp in found) == copies
    pairs = [runtime._fused_writes(g, *f) for g, f in zip(graphs, found)]
    assert sum(map(len, pairs)) == fused
    for g, p in zip(graphs, pairs):       # the generated function calls the joined write once per pair
        names = [n for n in g._run.__globals__ if g._run.__globals__[n] is runtime._copy_into_slice]
        assert sum(g._run.source.count(n + "(") for n in names) == len(p)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.bfloat16])
def test_copy_into_slice_is_the_scattered_copy(dtype):
    """The joined write gives the tensor the pair of ops gives: ``src`` of another dtype converted, a smaller one
    broadcast, every slice form (negative bounds, an end past the size, an empty slice)."""
    gen = torch.Generator().manual_seed(7)
    for shape, dim, start, end, step in [((20,), 0, 1, None, 2), ((4, 10), 1, -7, -1, 3), ((4, 10), 0, 1, 3, 1),
                                         ((6, 5), 1, 0, 9223372036854775807, 2), ((6, 5), 0, 2, 2, 1)]:
        base = _values(torch.Size(shape).numel(), dtype, gen).view(shape)
        view = torch.ops.aten.slice.Tensor(base, dim, start, end, step)
        for src in (_values(view.numel(), torch.float32, gen).view(view.shape),
                    torch.randint(0, 100, view.shape, generator=gen, dtype=torch.uint8),
                    _values(1, dtype, gen)):
            if not dtype.is_floating_point and src.dtype.is_floating_point:
                src = torch.nan_to_num(src, nan=0.0, posinf=9.0, neginf=-9.0).clamp(-1e6, 1e6)
            copied = torch.ops.aten.copy.default(view, src)
            want = torch.ops.aten.slice_scatter.default(base, copied, dim, start, end, step)
            got = runtime._copy_into_slice(base.clone(), src, dim, start, end, step)
            _same(got, want)


def test_dequant_in_place_against_float64():
    fn, (a, code, absmax) = _cases()["dequant"]
    torch._dynamo.reset()
    out = torch.compile(fn, backend="neuron")(a.to("neuron"), code.to("neuron"), absmax.to("neuron")).cpu()
    idx = torch.stack([a.long() >> 4, a.long() & 0xF], dim=1).reshape(-1)
    vals = code.double()[idx]
    ref = torch.cat([(vals[:16].view(-1, 8) * absmax.double()[:2].view(-1, 1)).reshape(-1), vals[16:] * absmax[2]])
    assert out.dtype == torch.bfloat16
    assert torch.all((out.double() - ref).abs() <= ref.abs() * 2.0 ** -8 + 1e-30)


# -- the host write (numpy on the same memory) and the overlap proof -------------------------------------------------

@pytest.mark.parametrize("shape,stride,offset,want", [
    ((8,), (2,), 1, True),                  # bitsandbytes' out[1::2]
    ((4, 3), (1, 4), 0, True),              # a transpose
    ((6, 4), (8, 2), 0, True),              # a strided slice of a 6x8
    ((3, 5), (5, 1), 0, True),              # dense
    ((4, 6), (1, 0), 0, False),             # an expanded dim: elements share memory
    ((3, 3), (1, 2), 0, False),             # rows overlap
    ((0, 5), (5, 1), 0, True),
    ((1, 7), (100, 1), 0, True)])
def test_no_self_overlap_proves_only_true_layouts(shape, stride, offset, want):
    t = torch.zeros(64).as_strided(shape, stride, offset)
    assert runtime._no_self_overlap(t) is want
    if want:      # cross-check: every element's address is distinct
        idx = torch.arange(64, dtype=torch.float64).as_strided(shape, stride, offset).reshape(-1)
        assert idx.unique().numel() == idx.numel()


@pytest.mark.parametrize("dst_dtype,src_dtype", [(torch.int32, torch.uint8), (torch.int64, torch.int8),
                                                 (torch.int32, torch.int32), (torch.float32, torch.float32),
                                                 (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
                                                 (torch.bool, torch.bool), (torch.float64, torch.float64)])
def test_host_write_writes_the_bytes_copy_does(dst_dtype, src_dtype):
    """Above the size threshold (and below it, called directly), numpy writes what ``copy_`` writes: NaN payloads,
    negative zero and integer signs included, into strided views; the bytes outside the view are untouched."""
    gen = torch.Generator().manual_seed(11)
    for n in (24, runtime._HOST_WRITE_MIN + 5):
        src = _values(n, src_dtype, gen) if src_dtype != torch.bool else torch.rand(n, generator=gen) > 0.5
        base = (_values(2 * n + 1, dst_dtype, gen) if dst_dtype != torch.bool
                else torch.rand(2 * n + 1, generator=gen) > 0.5)
        for view_of in (lambda b: b[1::2], lambda b: b[:2 * n].view(2, n)[1], lambda b: b[:n].flip(0).flip(0)):
            want, got = base.clone(), base.clone()
            view_of(want).copy_(src)
            assert runtime._host_write(view_of(got), src) is True
            _same(got, want)
            got2 = base.clone()
            runtime._write(view_of(got2), src)
            _same(got2, want)


def test_host_write_declines_what_it_cannot_copy_exactly():
    a = torch.zeros(10, dtype=torch.int32)
    assert runtime._host_write(a[::2], torch.ones(5, dtype=torch.float32)) is False      # a conversion
    assert runtime._host_write(a[::2], torch.ones(5, dtype=torch.int64)) is False        # a narrowing
    assert runtime._host_write(a[::2], torch.ones(1, dtype=torch.int32)) is False        # a broadcast
    assert runtime._host_write(a[::2], a[1::2]) is False                                # shared storage
    c = torch.zeros(4, dtype=torch.complex64)
    assert runtime._host_write(c, torch.ones(4, dtype=torch.complex64)) is False
    f = torch.zeros(4)
    assert runtime._host_write(f, torch.ones(4, requires_grad=True)) is False
    neg = torch.full((4,), 1 + 1j, dtype=torch.complex64).conj().imag                 # a lazily negated view
    assert neg.is_neg() and runtime._host_write(f, neg) is False
    assert torch.equal(a, torch.zeros(10, dtype=torch.int32)) and torch.equal(f, torch.zeros(4))


def test_copy_fresh_takes_the_shortcut_for_a_strided_view(monkeypatch):
    """A stride-2 view, which torch's overlap check calls too hard, is proven overlap-free: the functional copy is
    not run (it clones the whole storage), and the result is the op's."""
    base = torch.zeros(2 * 40000, dtype=torch.int32)
    src = torch.randint(0, 255, (40000,), dtype=torch.uint8)
    want = torch.ops.aten.copy.default(base[1::2], src)
    monkeypatch.setattr(runtime, "_COPY_OP", lambda *a: pytest.fail("ran the functional copy"))
    _same(runtime._copy_fresh(base[1::2], src), want)
