"""NKI suite entries for the instructions added for AWS's kernels (issue 13): a few cases each, float64
references, exact where the instruction is exact and bounded by fp32 summation otherwise.  Imported by
``nki_suite.run`` after the other families' registrations."""

from __future__ import annotations

import numpy as np

from .harness import _M, _gen, _ld, _new, _numerics, _sim, _st
from .references import _sum_bound, f64


@_numerics("nisa.nonzero_with_count", ["float32", "int32"])
def _nzc(dt, rng):
    nisa = _M["nisa"]

    def thunk():
        x = ((rng.random((128, 40)) < 0.3) * rng.integers(1, 5, (128, 40))).astype(dt)

        def body(a):
            d = _new((128, 41), "int32")
            nisa.memset(d, 0)
            nisa.nonzero_with_count(d, _ld(a), index_offset=5, padding_val=-1)
            return (_st(d),)
        got, = _sim(body, x, target="trn2")
        ref = np.zeros((128, 41))
        for p in range(0, 128, 16):
            nz = np.flatnonzero(x[p])
            ref[p] = np.concatenate([nz + 5, -np.ones(40 - nz.size), [nz.size]])
        return [("dst", got, ref, 0.0)]
    return [("[128,40] partitions 0,16,..", thunk)]


@_numerics("nisa.tensor_partition_reduce", ["float32"])
def _tpr(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    cases = []
    for p, f, op in ((128, 32, "add"), (7, 5, "maximum"), (64, 16, "average")):
        x = _gen(rng, (p, f), dt)

        def thunk(x=x, op=op):
            def body(a):
                d = _new((1, x.shape[1]), dt)
                nisa.tensor_partition_reduce(d, {"add": nl.add, "maximum": nl.maximum}.get(op, op), _ld(a))
                return (_st(d),)
            got, = _sim(body, x)
            x64 = f64(x)
            ref = {"add": x64.sum(0), "maximum": x64.max(0), "average": x64.mean(0)}[op][None]
            tol = 0.0 if op == "maximum" else _sum_bound(np.abs(x64), 0, x.shape[0])[None] * 2
            return [("dst", got, ref, tol)]
        cases.append((f"{op} [{p},{f}]", thunk))
    return cases


@_numerics("nisa.tensor_scalar_cumulative", ["float32"])
def _tsc(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    x = _gen(rng, (16, 50), dt, 0.0, 2.0)

    def thunk():
        def body(a):
            d = _new(a.shape, dt)
            nisa.tensor_scalar_cumulative(d, _ld(a), nl.multiply, nl.add, 0.5)
            return (_st(d),)
        got, = _sim(body, x)
        v = f64(x) * 0.5
        return [("dst", got, np.cumsum(v, axis=1), _sum_bound(np.abs(v), 1, 50)[:, None] * 2 + 1e-7)]
    return [("cumulative add [16,50]", thunk)]


@_numerics("nisa.dma_compute", ["float32"])
def _dmac(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    xs = [_gen(rng, (32, 64), dt) for _ in range(3)]

    def thunk():
        def body(a, b, c):
            d = _new((32, 64), dt)
            nisa.dma_compute(d, [a, b, c], nl.add, scales=[1.0, 1.0, 1.0])
            return (_st(d),)
        got, = _sim(body, *xs)
        ref = sum(f64(x) for x in xs)
        return [("dst", got, ref, _sum_bound(np.abs(np.stack([f64(x) for x in xs])), 0, 3))]
    return [("3 HBM sources", thunk)]


@_numerics("nisa.nc_n_gather", ["float32"])
def _ngather(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    x = _gen(rng, (64, 100), dt)
    ix = rng.integers(0, 100, (64, 24)).astype(np.uint32)

    def thunk():
        def body(a, i):
            d = _new((64, 24), dt)
            nisa.nc_n_gather(d, _ld(a), _ld(i))
            return (_st(d),)
        got, = _sim(body, x, ix)
        return [("dst", got, np.take_along_axis(f64(x), ix.astype(np.int64), 1), 0.0)]
    return [("[64,100] x 24 indices", thunk)]


@_numerics("nisa.local_gather", ["float32"])
def _lgather(dt, rng):
    nisa = _M["nisa"]
    x = _gen(rng, (32, 64), dt)
    ix = rng.integers(0, 60, (32, 2)).astype(np.uint16)

    def thunk():
        def body(a, i):
            d = _new((32, 32, 2), dt)
            nisa.local_gather(d, _ld(a), _ld(i), num_elem_per_idx=2)
            return (_st(d),)
        got, = _sim(body, x, ix)
        ref = np.empty((32, 32, 2))
        for c in range(2):
            rows = slice(16 * c, 16 * c + 16)
            idx = ix[rows].flatten(order="F").astype(np.int64)
            ref[rows] = f64(x)[rows][:, idx[:, None] + np.arange(2)[None, :]]
        return [("dst", got, ref, 0.0)]
    return [("2 cores, 2 elements per index", thunk)]


@_numerics("nisa.sequence_bounds", ["float32", "int32"])
def _seqb(dt, rng):
    nisa = _M["nisa"]
    s = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]]).astype(dt)

    def thunk():
        def body(a):
            d = _new((1, 2, 9), dt)
            nisa.sequence_bounds(d, _ld(a))
            return (_st(d),)
        got, = _sim(body, s)
        return [("dst", got, np.array([[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]]), 0.0)]
    return [("reference example", thunk)]


@_numerics("nisa.activate2", ["float32"])
def _act2(dt, rng):
    nisa, nl = _M["nisa"], _M["nl"]
    x = _gen(rng, (64, 48), dt)

    def thunk():
        def body(a):
            d = _new(a.shape, dt)
            nisa.activate2(d, nl.exp, _ld(a), 0.5, 1.0, nl.multiply, nl.subtract)
            return (_st(d),)
        got, = _sim(body, x, target="trn3")
        ref = np.exp(f64(x) * 0.5 - 1.0)
        return [("dst", got, ref, np.abs(ref) * 2.0 ** -21)]
    return [("exp(x*0.5 - 1)", thunk)]


@_numerics("nisa.quantize_mx", ["bfloat16"])
def _qmx(dt, rng):
    from trnsim.memory.dtypes import DTYPES, unpack_x4
    nisa, nl = _M["nisa"], _M["nl"]
    x = _gen(rng, (32, 32), dt)

    def thunk():
        def body(a):
            q = _new((32, 8), nl.float8_e4m3fn_x4)
            s = _new((32, 8), nl.uint8)
            nisa.memset(s, 0)
            nisa.quantize_mx(q, _ld(a), s)
            return _st(q), _st(s)
        q, s = _sim(body, x, target="trn3")
        scale = 2.0 ** (s[:4].astype(np.float64) - 127)                  # rows 0..3 of the quadrant
        deq = unpack_x4(DTYPES["float8_e4m3fn_x4"], q).astype(np.float64) * np.repeat(scale, 8, 0)[:, :, None]
        sc = np.repeat(scale, 8, 0)[:, :, None]
        x64 = np.clip(f64(x).reshape(32, 8, 4), -448 * sc, 448 * sc)     # OCP scale: the largest values saturate
        return [("dequantized", deq, x64, np.abs(x64) * 2.0 ** -4 + sc * 2.0 ** -9)]
    return [("[32,32] bf16 -> e4m3fn_x4", thunk)]


@_numerics("nisa.nc_matmul_mx", ["float8_e4m3fn_x4"])
def _mmx(dt, rng):
    from trnsim.memory.dtypes import DTYPES, pack_x4
    nisa, nl = _M["nisa"], _M["nl"]
    d = DTYPES["float8_e4m3fn_x4"]
    sv = rng.integers(-8, 8, (32, 16, 4)).astype(np.float32) / 4
    mv = rng.integers(-8, 8, (32, 24, 4)).astype(np.float32) / 4
    s_bits, m_bits = pack_x4(d, sv), pack_x4(d, mv)
    sc_s = np.full((32, 16), 127, np.uint8)
    sc_m = np.full((32, 24), 128, np.uint8)                            # factor 2

    def thunk():
        def body(a, b, c, e):
            out = _new((16, 24), nl.float32, "psum")
            nisa.nc_matmul_mx(out, _ld(a.view(nl.float8_e4m3fn_x4)), _ld(b.view(nl.float8_e4m3fn_x4)), _ld(c),
                              _ld(e))
            return (_st(out),)
        got, = _sim(body, s_bits, m_bits, sc_s, sc_m, target="trn3")
        ref = np.einsum("kmq,knq->mn", f64(sv), f64(mv) * 2)
        return [("dst", got, ref, 0.0)]                                # small exact values: exact in fp32
    return [("[32,16]x[32,24] unit scales", thunk)]
