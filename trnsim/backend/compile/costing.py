"""Simulated time of each fused kernel of a compiled graph: the shape-only simulation of the ``library.fused``
kernel the group becomes (memoised per kernel signature), or, for a group with no fused kernel (an opaque op, a
reduction over leading dims), what the eager device charges that op minus its launch.

A group's kernel reads its external inputs from HBM once and writes its materialised outputs once; scalars
(one-element tensors) are immediates.  The compiler keeps the faster plan: a group costs the lesser of its fused
kernel and the eager device's kernels for its ops one by one (launches excluded), so fusion never makes a graph
slower than the same ops run eagerly (where the eager device's matmul or elementwise kernels beat the fused
kernel, the group is taken as not fused).  A matmul group's epilogue runs in the resident kernel
(``fused.matmul_epilogue``) when its operands fit SBUF, else in the blocked kernel per block
(``matmul_blocked.blocked_matmul`` with ``steps``).  Layout changes
between kernels (a permute feeding a matmul) are taken to be free access patterns of the DMAs, an optimistic
simplification.
"""

from __future__ import annotations

import math

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import charging, cost_cache, costs
from ..device_state import STATE
from ..op_table import TABLE
from ...kernels.library import fused, matmul_blocked
from . import collective
from . import ops as O
from .fusion import numel, tensor_inputs, val

_MEMO = {}


def _inp(shape, dtype):
    return costs._inp(shape, dtype)


def _sim(key, fn, args, kwargs, compute=None):
    """(ns, flops, bytes) of one fused kernel's shape-only simulation, memoised per ``key`` (the kernel, target,
    shapes, dtypes and options: everything ``args``/``kwargs`` carry) in this process and in the op-cost cache
    (``backend.cost_cache``: keyed under the fingerprint of the library kernels and the machine, which are all
    the value depends on), so a compile after a change to the compile backend re-lowers its graphs without
    simulating their kernels again."""
    r = _MEMO.get(key)
    if r is None:
        ck = ("fused",) + key
        r = cost_cache.lookup(ck)
        if r is None:
            r = costs._sim(fn, args, kwargs, STATE.target) if compute is None else compute()
            cost_cache.store(ck, r)
        _MEMO[key] = r
    return r


def _pointwise(key, R, C, full, small, kw):
    """(ns, flops, bytes) of ``library.fused.pointwise`` over ``(R, C)`` (R <= 128 rows, as ``costs._rows_cols``
    makes them) with inputs of dtypes ``full`` (of the whole shape) and ``small`` (broadcast, one tile each).  Its
    column chunks of ``FREE_TILE`` are identical steps, charged by ``costs._tiles``, the one rule of the kernels of
    repeated tiles (the eager elementwise and row kernels): whole below ``WARMUP + 2 PERIOD`` chunks, beyond from
    two runs past the start-up a whole period apart, each ending with the same partial chunk (exact where the
    kernel's per-chunk times repeat with a period dividing ``PERIOD``; a DMA-bound kernel whose compute chain is a
    little shorter than its transfers drifts against them with a longer period: tests/cost/test_estimate_speed.py).
    A compiled optimizer step over a rank's parameters is one such kernel of millions of columns: simulated whole
    it took about a second of CPU."""
    ft = fused.FREE_TILE
    P = STATE.target.pmax

    def run(c):
        args = [_inp((R, c), d) for d in full] + [_inp((min(P, R), min(c, ft)), d) for d in small]
        return costs._sim(fused.pointwise, args, dict(kw, shape=(R, c)), STATE.target)

    return _sim(key, None, None, None, compute=lambda: costs._tiles(run, C, ft))


def _dtype(node):
    v = val(node)
    if isinstance(v, torch.Tensor):
        return charging.kdtype(v.dtype)
    return "float32"


def _meta(x):
    if isinstance(x, torch.fx.Node):
        v = val(x)
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        if isinstance(v, (list, tuple)):
            return type(v)(torch.empty(t.shape, dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) else t
                           for t in v)
        return v
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(y) for y in x)
    return x


def eager_kernel_cost(node):
    """(ns, flops, bytes, estimated) the eager device charges ``node`` minus its per-op launch.

    Its arguments are priced as plain meta tensors of the node's shapes, dtypes and strides, made with the compile's
    fake-tensor mode set aside: under that mode each ``torch.empty_strided`` becomes a fake tensor through the
    mode's dispatch (about 0.3 ms each against 2 us: a third of the planning of bitsandbytes' small dequantize
    graphs, benchmarks/bench_bnb_new_shape.py); the charge reads only the shapes, dtypes and strides, the same
    either way."""
    name = O.op_name(node.target)
    cat = TABLE.get(name) or O._HOP_OPAQUE.get(name) or ("copy" if O.kind(node.target) in ("factory", "random", "pointwise") else "estimate")
    with unset_fake_temporarily():
        args = tuple(_meta(a) for a in node.args)
        out = _meta(node)
    if name in O._HOP_OPAQUE:
        args, out = args[:3], None          # q, k, v: the attention kernel's shapes
    ns, kind, fl, nb = charging.op_time(name, cat, args, out)
    ns = max(0.0, ns - costs.launch_ns(STATE.target)) if ns else 0.0
    return ns, fl, nb, kind == "estimated"


def aliased_write_back(node, fz=None):
    """Whether ``node`` is the write-back of an in-place update of a graph input (functionalisation's final
    ``copy_(input, new_value)``, e.g. an optimizer's ``p.add_(...)``) whose value a kernel of this graph computes:
    that kernel writes the value straight into the input's buffer (input/output aliasing: "it is often desirable
    to perform the update in-place ... you can specify the input aliasing", XLA docs, "Aliasing in XLA",
    openxla.org/xla/aliasing; the compiled program updates the buffer it was given), so the copy is no kernel."""
    if O.op_name(node.target) != "copy_" or len(node.args) < 2:
        return False
    dst, src = node.args[0], node.args[1]
    if not (isinstance(dst, torch.fx.Node) and dst.op == "placeholder" and isinstance(src, torch.fx.Node)
            and src.op == "call_function"):
        return False
    if fz is not None:          # through views: the value must be computed by a kernel of the graph, not an input
        root = fz._root(src)
        if not (isinstance(root, torch.fx.Node) and root.op == "call_function" and root in fz.group_of):
            return False
    dv, sv = val(dst), val(src)
    return isinstance(dv, torch.Tensor) and isinstance(sv, torch.Tensor) and dv.shape == sv.shape and \
        dv.dtype == sv.dtype and dv.is_contiguous() and sv.is_contiguous()


def _steps(fz, g):
    steps = []
    for n in g.nodes:
        k = O.kind(n.target)
        name = O.op_name(n.target)
        if name in O.FUSED_STEPS:
            steps += O.FUSED_STEPS[name]
        elif k in ("pointwise", "factory"):
            nt = sum(1 for a in tensor_inputs(n) if (numel(fz._root(a)) or 0) > 1)
            st = O.step(name, nt)
            if st is None:
                continue
            if g.kind == "rows" and numel(n) != g.R * g.C:
                st = "rowact" if st == "act" else "row"
            steps.append(st)
        elif k == "reduce":
            steps.append("red")
        elif k == "softmax":
            steps += ["red", "row", "act", "red", "rowact" if name == "_log_softmax" else "row", "vs"]
        elif k == "softmax_bw":
            steps += ["vec", "red", "vs", "vec"]
    return tuple(steps)


def _split_inputs(fz, g, full_numel, row_numel=None):
    full, small, row = [], [], []
    for r in fz.external_inputs(g):
        ne = numel(r)
        if ne is None or ne <= 1:
            continue                       # a scalar: an immediate operand
        if ne == full_numel:
            full.append(r)
        elif row_numel is not None and ne == row_numel:
            row.append(r)
        else:
            small.append(r)
    return full, small, row


def _eager_ops_cost(g):
    """(ns, flops, bytes, estimated) of the group's ops as the eager device runs them one by one, without their
    launches; None when one of them has no eager cost."""
    ns = fl = 0.0
    nb, est = 0, False
    for n in g.nodes:
        if n.op != "call_function":
            continue
        try:
            a, f, b, e = eager_kernel_cost(n)
        except Exception:       # noqa: BLE001 -- an op the eager charging cannot price: keep the fused cost
            return None
        ns, fl, nb, est = ns + a, fl + f, nb + b, est or e
    return ns, fl, nb, est


def group_cost(fz, g):
    """(ns, flops, bytes, estimated, label) of one group's kernel: the lesser of its fused kernel and the eager
    kernels of its ops (module docstring)."""
    r = _fused_group_cost(fz, g)
    if g.kind in ("pointwise", "rows", "matmul") and r[0] > 0:
        e = _eager_ops_cost(g)
        if e is not None and e[0] < r[0]:
            return e + (r[4],)
    return r


def _fused_group_cost(fz, g):
    outs = fz.outputs(g)
    if g.kind == "custom":        # timed when it runs, by the kernels it calls (nki_bridge)
        return 0.0, 0.0, 0, False, O.op_name(g.anchor.target)
    if g.kind == "collective":    # the collectives model's time (collective.py); the plan decides what is exposed
        ns, nb = collective.cost(g.anchor)
        return ns, 0.0, nb, False, collective.label(g.anchor)
    if g.kind == "opaque":
        if aliased_write_back(g.anchor, fz):
            return 0.0, 0.0, 0, False, "copy_ (aliased)"
        ns, fl, nb, est = eager_kernel_cost(g.anchor)
        return ns, fl, nb, est, O.op_name(g.anchor.target)
    if g.kind == "reduce":
        # the eager device's kernel for the reduction (minus its launch), so a compiled graph never pays more
        # for it than eager: that includes its choice of kernel, e.g. a sum over a short outer dimension (the
        # backward of a GQA head repeat) as a few elementwise adds, not a row reduction of 2-element rows
        ns, fl, nb, est = eager_kernel_cost(g.anchor)
        return ns, fl, nb, est, O.op_name(g.anchor.target)
    label = "+".join(O.op_name(n.target) for n in g.nodes)
    if not outs:
        return 0.0, 0.0, 0, False, label            # nothing of it is used: dead code, no kernel
    steps = _steps(fz, g)
    if g.kind == "pointwise":
        ne = g.numel or 0
        if ne == 0:
            return 0.0, 0.0, 0, False, label
        R, C = costs._rows_cols(ne)
        full, small, _ = _split_inputs(fz, g, ne)
        dt = _dtype(outs[0])
        fd, sd = tuple(_dtype(x) for x in full), tuple(_dtype(x) for x in small)
        key = ("pw", STATE.target.name, R, C, dt, fd, len(small), steps, len(outs)) + ((sd,) if small else ())
        ns, fl, nb = _pointwise(key, R, C, fd, sd, dict(dtype=dt, n_small=len(small), steps=steps, n_out=len(outs)))
        return ns, fl, nb, False, label
    if g.kind == "rows":
        R, C = g.R, g.C
        full, small, row = _split_inputs(fz, g, R * C, R)
        row += small
        fo = [n for n in outs if numel(n) == R * C]
        ro = [n for n in outs if numel(n) != R * C]
        dt = _dtype(fo[0]) if fo else "float32"
        args = [_inp((R, C), _dtype(x)) for x in full] + [_inp((R, 1), "float32") for _ in row]
        key = ("rows", STATE.target.name, R, C, dt, tuple(_dtype(x) for x in full), len(row), steps, len(fo), len(ro))
        ns, fl, nb = _sim(key, fused.rows, args, dict(shape=(R, C), dtype=dt, n_row=len(row), steps=steps,
                                                       n_out=len(fo), n_out_row=len(ro)))
        return ns, fl, nb, False, label
    return _matmul_cost(fz, g, outs, steps, label)


def _matmul_cost(fz, g, outs, steps, label):
    mm = g.anchor
    name = O.op_name(mm.target)
    a, b = (mm.args[1], mm.args[2]) if name == "addmm" else (mm.args[0], mm.args[1])
    av, bv = val(a), val(b)
    batch = av.shape[0] if name == "bmm" else 1
    M, K, N = av.shape[-2], av.shape[-1], bv.shape[-1]
    dt = charging.kdtype(av.dtype)
    # an fp32 product runs as neuronx-cc's auto-cast makes it (costs.auto_cast_matmul_cost: by default, --auto-cast
    # none, fp32 operands; --auto-cast matmult in NEURON_CC_FLAGS: operands cast to bf16 by the loading DMAs, fp32
    # accumulation and output)
    odt = costs.compiler_auto_cast() if dt == "float32" else None
    if not av.is_floating_point():
        ns, fl, nb, est = eager_kernel_cost(mm)
        return ns, fl, nb, est, label
    if M == 0 or K == 0 or N == 0 or batch == 0:
        return 0.0, 0.0, 0, False, label
    tg = STATE.target
    P = tg.pmax
    mp = max(P, math.ceil(M / P) * P)
    kp = max(P, math.ceil(K / P) * P)
    tn = tg.moving_fmax
    np_ = N if N <= tn else math.ceil(N / tn) * tn
    full, small, _ = _split_inputs(fz, g, M * N * batch)
    if name == "addmm":
        small = [x for x in small if x is not mm.args[0]] + [mm.args[0]]
        full = [x for x in full if x is not mm.args[0]]
    full = [x for x in full if x is not a and x is not b]
    small = [x for x in small if x is not a and x is not b]
    st = (("vec",) if name == "addmm" else ()) + steps
    item = costs._itemsize(odt or dt)        # what SBUF holds
    # unfused: the eager device's matmul kernel, then the epilogue (if any) as its own pointwise kernel
    ns, fl, nb = costs.auto_cast_matmul_cost(tg, M, K, N, dt, batch)
    if st:
        R, C = costs._rows_cols(M * N * batch)
        e = _pointwise(("pw", tg.name, R, C, dt, (dt,) * (1 + len(full)), 0, st, len(outs)), R, C,
                       (dt,) * (1 + len(full)), (), dict(dtype=dt, steps=st, n_out=len(outs)))
        ns, fl, nb = ns + e[0], fl + e[1], nb + e[2]
    if not fused.epilogue_fits(tg, mp, kp, np_, item, len(full)):
        # operands too large to stay resident: the blocked product with the epilogue applied per block
        if not st and len(outs) <= 1:
            return ns, fl, nb, False, label     # no epilogue: the eager device's blocked kernel itself
        fns, _, fnb = blocked_epilogue_cost(tg, mp, kp, np_, dt, odt, tuple(_dtype(x) for x in full),
                                            tuple(_dtype(x) for x in small), st, max(1, len(outs)))
        if fns * batch >= ns:
            return ns, fl, nb, False, label
        return fns * batch, 2.0 * M * K * N * batch, fnb * batch, False, label
    args = [_inp((kp, mp), dt), _inp((kp, np_), dt)] + [_inp((mp, np_), _dtype(x)) for x in full] + \
        [_inp((min(P, mp), np_), _dtype(x)) for x in small]
    key = ("mm", tg.name, mp, kp, np_, dt, tuple(_dtype(x) for x in full), len(small), st, len(outs)) + \
        ((odt,) if odt else ()) + ((("small",) + tuple(_dtype(x) for x in small),) if small else ())
    fns, ffl, fnb = _sim(key, fused.matmul_epilogue, args,
                         dict(n_small=len(small), steps=st, n_out=max(1, len(outs)),
                              **({"operand_dtype": odt} if odt else {})))
    if fns * batch >= ns:
        # the compiler keeps the faster plan: fusing the epilogue into the matmul kernel only when that beats
        # the eager matmul kernel followed by the epilogue's own kernel
        return ns, fl, nb, False, label
    return fns * batch, 2.0 * M * K * N * batch, fnb * batch, False, label


def blocked_epilogue_cost(tg, m, k, n, dt, odt, full, small, steps, n_out, extrapolate=True):
    """(ns, flops, bytes) of ``library.matmul_blocked.blocked_matmul`` with an epilogue on padded ``[m, k] x [k, n]``
    of ``dt`` (operands held in ``odt`` when given), full inputs of dtypes ``full`` and small ones ``small``,
    in the block plan ``block_shape`` chooses with the epilogue's SBUF (``matmul_blocked.epilogue_bytes``).  Its
    blocks are identical steps and each block's work grows linearly with the contraction, so a large product is
    extrapolated by ``costs._linear`` (the rule of every repeated-step kernel) in each of its three dimensions:
    rows and columns from one and two blocks (a last partial block pro rata), the contraction from 8 and 16 tiles
    (whole-K plan) or whole numbers of chunks of at least 8 and 16 tiles (chunked plan); up to those sizes it is
    simulated whole.
    ``extrapolate=False`` simulates the whole product (tests compare the two)."""
    P = tg.pmax
    item = costs._itemsize(odt or dt)
    epi = matmul_blocked.epilogue_bytes(tuple(costs._itemsize(d) for d in full), costs._itemsize(dt), n_out,
                                        bool(steps), tuple(costs._itemsize(d) for d in small))
    mb, nb, kc = matmul_blocked.block_shape(tg, m, n, k, item, epi)
    whole = kc >= k
    kw = dict(mb=mb, nb=nb, n_small=len(small), steps=steps, n_out=n_out, **({"operand_dtype": odt} if odt else {}))
    key = ("mmblk", tg.name, dt, odt, full, small, steps, n_out, mb, nb, None if whole else kc)

    def run(mm, kk, nn):
        args = [_inp((kk, mm), dt), _inp((kk, nn), dt)] + [_inp((mm, nn), d) for d in full] + \
            [_inp((min(P, mm), nn), d) for d in small]
        return _sim(key + (mm, kk, nn), None, None, None, compute=lambda: costs._sim(
            matmul_blocked.blocked_matmul, args, dict(kw, kc=kk if whole else kc), tg))

    if not extrapolate:
        return run(m, k, n)
    c = 1 if whole else -(-8 * P // kc)     # chunks: whole ones, at least 8 tiles, past the start-up
    k1, k2 = (8 * P, 16 * P) if whole else (c * kc, 2 * c * kc)
    return costs._linear(lambda kk: costs._linear(
        lambda mm: costs._linear(lambda nn: run(mm, kk, nn), n, nb, 2 * nb), m, mb, 2 * mb), k, k1, k2)


def clear_memo():
    _MEMO.clear()
