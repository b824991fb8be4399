"""Simulated time of device ops: the single cost function of the PyTorch device.

An op with a library kernel (``trnsim/kernels/library/``) is charged the instruction-level simulation of that
kernel in shape-only mode, memoised per (kernel, shapes, dtypes, target): each distinct shape is simulated once.
Ops without one get a roofline estimate from the target, marked ``estimated``.  Eager execution adds a per-op
launch cost; a CPU fallback adds its device-to-host and host-to-device transfers.

The duration of a simulated kernel is the total time of the timeline ``trnsim.machine.schedule`` makes of its
record: the one timing model, with dependencies between engines and DMA queues.
"""

from __future__ import annotations

import math

import numpy as np

from .. import machine as _machine
from .. import config
from . import cost_cache
from ..kernels.jit import ShapeOnlyInput, run_kernel
from ..kernels.library import (attention, elementwise, matmul, matmul_batched, matmul_blocked, matmul_resident,
                               normalization, reduction, softmax)

_MEMO = {}


def kernel_duration_ns(result) -> float:
    """Simulated duration of one shape-only kernel launch: its scheduled timeline's total (ns)."""
    return float(_machine.schedule(result.cores).total_ns)


def _itemsize(dtype_name):
    from ..memory import dtype_of
    return dtype_of(dtype_name).itemsize


def _inp(shape, dtype_name):
    # Shape-only inputs: a shape and a dtype, no array (the kernel never reads values: execute=False)
    return ShapeOnlyInput(shape, dtype_name)


# One shape-only launch's (ns, flops, bytes) per (kernel, input shapes and dtypes, options, target): the costs of
# different ops share launches (every head count past two groups extrapolates from the same one- and two-group
# attention runs; a layer's weight gradients share their blocked-matmul block runs), so each is simulated once
# per process.  A shape-only launch reads no values, so its result depends on nothing else.
_SIMS = {}
_PLAIN = (int, float, str, bool, type(None))


def _plain(v):
    if isinstance(v, _PLAIN):
        return True
    if isinstance(v, (tuple, list)):
        return all(_plain(x) for x in v)
    return False


def _sim_key(fn, args, kwargs, target):
    """The memo key of a launch, or None when an argument is not a plain value or a shape-only array (then the
    launch is not memoised: an object's repr could name a reused address)."""
    ins = []
    for a in args:
        if isinstance(a, ShapeOnlyInput):
            ins.append((a.shape, a.dtype.name))
        elif isinstance(a, np.ndarray):
            ins.append((a.shape, a.dtype.str, a.dtype.name))
        elif _plain(a):
            ins.append(("v", repr(a)))
        else:
            return None
    if not all(_plain(v) for v in kwargs.values()):
        return None
    # fn itself: kept alive by the key; the switch that changes a simulation's time (config.py) is part of it
    return (fn, tuple(ins), repr(sorted(kwargs.items())), target.name, config.dma_round_robin)


def _sim(fn, args, kwargs, target):
    key = _sim_key(fn, args, kwargs, target)
    r = _SIMS.get(key) if key is not None else None
    if r is None:
        r = _simulate(fn, args, kwargs, target)
        if key is not None:
            _SIMS[key] = r
    return r


def _simulate(fn, args, kwargs, target):
    res = run_kernel(fn, args, kwargs, target=target, execute=False)
    # from the record's columns (machine/record_cols.py), in record order, without making record objects;
    # nbytes: only DMA rows carry bytes (the others' records say 0)
    flops = sum(f for c in res.cores for f in c.columns.flops)
    nbytes = sum(b for c in res.cores for b in c.columns.nbytes)
    return kernel_duration_ns(res), flops, nbytes


def _linear(run, n, n1, n2):
    """(ns, flops, bytes) of a kernel whose work is ``n`` identical steps (row tiles, column chunks): simulated
    whole up to ``n2`` steps; beyond, extrapolated from the simulations at ``n1`` and ``n2`` steps (the steady
    state adds the same time per step; tests compare it with the whole simulation)."""
    if n <= n2:
        return run(n)
    a, b = run(n1), run(n2)
    return tuple(x + (y - x) * (n - n1) / (n2 - n1) for x, y in zip(a, b))


PERIOD = 12     # tiles: a multiple of every period (1 to 4 tiles) the library kernels' per-tile times repeat with
               # in their steady state (64-column row reductions: two tiles of 852 ns, then one of 3,409 ns, on trn2;
               # bf16 exp on trn2: 1,707, 1,707, 5,152 ns a 2,048-column chunk); trnsim's choice
WARMUP = PERIOD  # tiles simulated before the first of the two runs an extrapolation compares: the pipeline's start-up
                 # lasts up to 9 tiles in the library kernels (trn3 bf16 exp: 2,048-column chunks of 1,707 ns until
                 # the 8th, then 1,990, 1,707, 1,707, 2,557 ns repeating); trnsim's choice, a whole period


def _tiles(run, n, P):
    """(ns, flops, bytes) of a kernel over ``n`` units (rows of a row kernel, columns of an elementwise one;
    ``run(m)``: its simulation on ``m`` units), one step per tile of ``P`` units, the last tile partial when ``P``
    does not divide ``n``.  Below ``WARMUP + 2 PERIOD`` full tiles it is simulated whole; beyond, from two runs
    past the start-up (``WARMUP`` to ``WARMUP + 2 PERIOD - 1`` full tiles) whose full tiles differ by
    :data:`PERIOD` and are congruent with the kernel's modulo it, each ending with the same partial tile: their
    difference is whole periods of the steady state, so a repeating pattern of per-tile times is followed exactly
    (tests/machine/test_kernel_cost_extrapolation.py compares with whole simulations)."""
    full, rem = divmod(n, P)
    if full < WARMUP + 2 * PERIOD:
        return run(n)
    k1 = WARMUP + (full - WARMUP) % PERIOD
    return _linear(lambda k: run(k * P + rem), full, k1, k1 + PERIOD)


def _rows_cols(n):
    rows = min(128, max(int(n), 1))
    return rows, max(1, math.ceil(int(n) / rows))


# When a dict (see :func:`deferring`): a cost neither memoised nor cached is not simulated but recorded here
# (key -> compute) and charged zero, so that a caller can collect every missing kernel simulation of a run,
# simulate them together (in parallel), and run again with all of them memoised (trnsim.cost.step.prepare).
_DEFERRED = None


def _memo(key, compute):
    v = _MEMO.get(key)
    if v is None:
        v = cost_cache.lookup(key)          # simulated by an earlier process (see cost_cache.py)
        if v is None:
            if _DEFERRED is not None:
                _DEFERRED.setdefault(key, compute)
                return _EMPTY
            v = compute()
            cost_cache.store(key, v)
        _MEMO[key] = v
    return v


# -- kernel-backed costs: each returns (ns, flops, bytes) ------------------------------------------
def matmul_cost(target, m, k, n, dtype, batch=1, operand_dtype=None):
    """``batch`` matmuls [m, k] @ [k, n] through ``library.matmul_resident.resident_matmul`` when the operands fit
    its SBUF budget, else ``library.matmul_blocked.blocked_matmul`` (dims padded to the kernels' tiles).  An empty
    product (a zero dimension) launches no matmul kernel.  Large blocked products are extrapolated from the
    simulation of one and two of their blocks (:func:`blocked_matmul_ns`).  A batch of resident products is one
    launch of ``library.matmul_batched.batched_matmul`` (:func:`_batched_cost`); a batch of blocked products is
    ``batch`` times one (each is long enough that its launch overheads are a small part).  ``operand_dtype``: the
    operands are read from HBM in ``dtype`` and held and multiplied in this dtype (cast by the loading DMAs), the
    product written in ``dtype`` (:func:`auto_cast_matmul_cost`)."""
    if operand_dtype == dtype:
        operand_dtype = None
    if m == 0 or k == 0 or n == 0 or batch == 0:
        return 0.0, 0.0, 0
    P = target.pmax
    mp = max(P, math.ceil(m / P) * P)
    kp = max(P, math.ceil(k / P) * P)
    tn = target.moving_fmax
    np_ = n if n <= tn else math.ceil(n / tn) * tn
    item = _itemsize(operand_dtype or dtype)        # what SBUF holds
    odt = {"operand_dtype": operand_dtype} if operand_dtype else {}
    if batch > 1 and matmul_resident.fits(target, mp, kp, np_, item):
        return _batched_cost(target, int(batch), m, k, n, mp, kp, np_, dtype, item, operand_dtype)

    def compute():
        if matmul_resident.fits(target, mp, kp, np_, item):
            return _sim(matmul_resident.resident_matmul, (_inp((kp, mp), dtype), _inp((kp, np_), dtype)),
                        {"chunk": matmul_resident.a_chunk(target, mp, item), **odt}, target)
        return blocked_matmul_ns(target, mp, kp, np_, dtype, operand_dtype=operand_dtype)
    ns, fl, nb = _memo(("mm", target.name, m, k, n, dtype) + ((operand_dtype,) if operand_dtype else ()), compute)
    return ns * batch, 2.0 * m * k * n * batch, nb * batch


# neuronx-cc's auto-cast of fp32 work.  Options: "--auto-cast <cast_mode>" and "--auto-cast-type <data_type>"
# (Neuron docs, "Neuron Compiler CLI Reference Guide (neuronx-cc)"; given to torch-neuronx through NEURON_CC_FLAGS).
# The default is "none" ("Leave all data types as defined in the model", same page: "(Default: none)"); it was
# "matmult" (fp32 matmuls cast to bf16) before Neuron 2.27.0, whose compiler release notes (Neuron Compiler
# 2.22.12471.0) say "The --auto-cast flag now defaults to none (previously matmul)" and "To restore previous
# behavior, explicitly set --auto-cast=matmult".  Every published run this project compares with is of a later
# release (the trn1 training tables: Neuron 2.28.0), so the default is none; --auto-cast-type defaults to bf16.
# The hardware multiplies "using FP16, BF16, TF32, and FP32 ... and accumulations using FP32" (Neuron docs,
# "Mixed Precision and Performance-accuracy Tuning (neuronx-cc)").
AUTO_CAST_DEFAULT = ("none", "bf16")
AUTO_CAST_MODES = ("none", "matmult")                     # modelled; "all" casts every op (not modelled)
AUTO_CAST_TYPES = {"bf16": "bfloat16", "fp16": "float16"}  # modelled; tf32 and fp8_e4m3 are not


def compiler_auto_cast(flags=None):
    """The operand dtype (``"bfloat16"``/``"float16"``) neuronx-cc gives an fp32 matmul under the auto-cast
    options of ``flags`` (default: ``NEURON_CC_FLAGS``), or None with ``--auto-cast none``.  A mode or type
    trnsim does not model is an error naming it."""
    import shlex
    from .. import config
    words = shlex.split(config.neuron_cc_flags if flags is None else flags)
    got = {}
    for i, w in enumerate(words):
        for opt in ("--auto-cast-type", "--auto-cast"):
            if w == opt or w.startswith(opt + "="):
                v = w.split("=", 1)[1] if "=" in w else (words[i + 1] if i + 1 < len(words) else "")
                got[opt] = v
                break
    mode = got.get("--auto-cast", AUTO_CAST_DEFAULT[0])
    kind = got.get("--auto-cast-type", AUTO_CAST_DEFAULT[1])
    if mode not in AUTO_CAST_MODES:
        raise ValueError(f"NEURON_CC_FLAGS --auto-cast {mode!r}: trnsim models {', '.join(AUTO_CAST_MODES)} "
                         f"(the compiler's options are none, matmult, all)")
    if kind not in AUTO_CAST_TYPES:
        raise ValueError(f"NEURON_CC_FLAGS --auto-cast-type {kind!r}: trnsim models {', '.join(AUTO_CAST_TYPES)}")
    return None if mode == "none" else AUTO_CAST_TYPES[kind]


def auto_cast_matmul_cost(target, m, k, n, dtype, batch=1, operand_dtype=None):
    """(ns, flops, bytes) of ``batch`` [m, k] x [k, n] products of ``dtype`` as a compiled graph runs them under
    neuronx-cc's auto-cast (:func:`compiler_auto_cast`; ``operand_dtype`` overrides it): an fp32 product's operands
    are read from HBM as fp32 and cast to the auto-cast type by the loading DMAs ("casting inside a DMA goes
    through FP32", Neuron docs nki-dma-overview), multiplied at that type's Tensor Engine rate with fp32
    accumulation in PSUM, the product written as fp32 (:func:`matmul_cost` with ``operand_dtype``).  Other
    dtypes, and every product with ``--auto-cast none``, are priced as they are.  The one rule of fp32 matmul
    prices: the compile backend's matmul kernels and the estimator's fp32 runs use it."""
    if dtype == "float32":
        odt = operand_dtype if operand_dtype is not None else compiler_auto_cast()
        if odt:
            return matmul_cost(target, m, k, n, dtype, batch, operand_dtype=odt)
    return matmul_cost(target, m, k, n, dtype, batch)


def _batched_cost(target, batch, m, k, n, mp, kp, np_, dtype, item, operand_dtype=None):
    """``batch`` resident products in one launch of ``batched_matmul``: its group of products per DMA
    (``matmul_batched.batch_group``); up to two groups simulated whole, beyond that one group's time plus
    (batch / group - 1) times the increment from one group to two (the steady state, as in
    :func:`attention_cost`).  flops are the logical ``2 m k n`` per product."""
    G = matmul_batched.batch_group(target, mp, kp, np_, item)

    def run(b):
        return _sim(matmul_batched.batched_matmul, (_inp((b, kp, mp), dtype), _inp((b, kp, np_), dtype)),
                    {"group": G, **({"operand_dtype": operand_dtype} if operand_dtype else {})}, target)

    def compute():
        if batch <= 2 * G:
            ns, _, nb = run(batch)
        else:
            a, b = run(G), run(2 * G)
            ns, nb = (x + (y - x) * (batch / G - 1) for x, y in ((a[0], b[0]), (a[2], b[2])))
        return ns, 2.0 * m * k * n * batch, nb
    return _memo(("bmm", target.name, batch, m, k, n, dtype) + ((operand_dtype,) if operand_dtype else ()), compute)


def blocked_matmul_ns(target, m, k, n, dtype, extrapolate=True, operand_dtype=None):
    """(ns, flops, bytes) of ``blocked_matmul`` on padded [m, k] x [k, n].  Its output blocks are identical and
    run back to back in steady state, so with more than two blocks the time is the simulated time of one block
    plus (blocks - 1) times the increment from one to two blocks; and each block's work grows linearly with the
    contraction (whole-K mode: its strips and matmuls; chunked mode: its chunks), so a long contraction is
    extrapolated from two shorter ones (8 and 16 tiles, or 2 and 3 chunks).  ``extrapolate=False`` simulates the
    whole product (tests compare the two).  ``operand_dtype``: as :func:`matmul_cost`'s."""
    item = _itemsize(operand_dtype or dtype)
    mb, nb, kc = matmul_blocked.block_shape(target, m, n, k, item)
    if not extrapolate:     # (dimensions multiples of the block shape)
        return _sim(matmul_blocked.blocked_matmul, (_inp((k, m), dtype), _inp((k, n), dtype)),
                    {"mb": mb, "nb": nb, "kc": kc, **({"operand_dtype": operand_dtype} if operand_dtype else {})},
                    target)
    dtype = (dtype, operand_dtype) if operand_dtype else dtype      # (HBM, SBUF) dtypes for the block runs
    whole_k = kc >= k
    # whole K: 8 and 16 tiles, long enough that the loads and the matmuls are past their start-up (from 4 and 8
    # tiles a block row of 8 stationary tiles extrapolated a 4096^3 product 30% under the Tensor Engine's bound)
    k1, k2 = (8 * target.pmax, 16 * target.pmax) if whole_k else (2 * kc, 3 * kc)
    if k <= (24 * target.pmax if whole_k else 5 * kc):     # the two shorter runs would cost more than this one
        return _blocks_ns(target, m, k, n, dtype, mb, nb, kc)
    a = _blocks_ns(target, m, k1, n, dtype, mb, nb, k1 if whole_k else kc)
    b = _blocks_ns(target, m, k2, n, dtype, mb, nb, k2 if whole_k else kc)
    return tuple(x + (y - x) * (k - k1) / (k2 - k1) for x, y in zip(a, b))


_BLOCK_SIMS = {}


def _block_sim(target, k, m, n, dtype, kw):
    """One simulation of ``blocked_matmul`` on [m, k] x [k, n], memoised: many products share their one- and
    two-block runs (every weight gradient of a layer has the same contraction and block shape).  ``dtype``: the
    operands' dtype, or (HBM dtype, SBUF operand dtype)."""
    key = (target.name, k, m, n, dtype, kw["mb"], kw["nb"], kw["kc"])
    r = _BLOCK_SIMS.get(key)
    if r is None:
        hbm, odt = dtype if isinstance(dtype, tuple) else (dtype, None)
        r = _BLOCK_SIMS[key] = _sim(matmul_blocked.blocked_matmul, (_inp((k, m), hbm), _inp((k, n), hbm)),
                                    dict(kw, **({"operand_dtype": odt} if odt else {})), target)
    return r


def _blocks_ns(target, m, k, n, dtype, mb, nb, kc):
    kw = {"mb": mb, "nb": nb, "kc": kc}
    nblk = n / nb           # a last, narrower block (n padded to 512 columns, blocks of 1024) counts pro rata
    rows = m / mb
    if rows * nblk <= 2 and n % nb == 0 and m % mb == 0:
        return _block_sim(target, k, m, n, dtype, kw)
    # steady state: every further block costs the increment from one to two blocks in a row (db), and every
    # further block row adds its own overhead (the row's at strip load), the increment from one to two single-
    # block rows beyond db: t = t1 + db * (blocks - 1) + (dr - db) * (rows - 1).  In chunked mode no strip is
    # kept across a row's blocks: every block is the same work, dr = db.
    one = _block_sim(target, k, mb, nb, dtype, kw)
    two_b = _block_sim(target, k, mb, 2 * nb, dtype, kw) if nblk > 1 else None
    two_r = _block_sim(target, k, 2 * mb, nb, dtype, kw) if rows > 1 and (kc >= k or two_b is None) else None
    out = []
    for i in range(3):
        db = (two_b[i] - one[i]) if two_b else (two_r[i] - one[i])
        dr = (two_r[i] - one[i]) if two_r else db
        out.append(one[i] + db * (rows * nblk - 1) + (dr - db) * (rows - 1))
    return tuple(out)


_EMPTY = (0.0, 0.0, 0)      # an op on an empty tensor launches no kernel


# The flash backward's matmul work over the forward's: it recomputes S = Q K^T and then computes dV = P^T dO,
# dP = dO V^T, dQ = dS K and dK = dS^T Q, five products of the forward's two sizes (NKI flash_attn_bwd, Neuron docs
# "Detailed steps" 1-4; FlashAttention, Dao et al. 2022, Algorithm 4): 5 / 2.
ATTN_BWD_RATIO = 2.5


def _kept_scores(L, S, causal, window=None):
    """The (query, key) pairs attention keeps: all ``L x S``, or with ``causal`` those with key ``j <= i`` (torch's
    top-left aligned mask), and with a sliding ``window`` also ``j > i - window``."""
    if not causal:
        return L * S
    if window:
        w = int(window)
        # query i keeps keys max(0, i - w + 1) .. min(i, S - 1)
        i = np.arange(L, dtype=np.int64)
        return int(np.maximum(0, np.minimum(i, S - 1) - np.maximum(0, i - w + 1) + 1).sum())
    n = min(L, S)
    return n * (n + 1) // 2 + max(0, L - S) * S


def attention_cost(target, heads, L, S, D, dtype, dropout_p=0.0, batch=None, causal=False, window=None):
    """(ns, flops, bytes) of fused attention over ``heads`` (batch x heads) of ``[L, D]`` queries against ``[S, D]``
    keys and values: ``library.attention.flash_attention``, all heads in one launch, ``L`` and ``S`` padded to
    128.  Heads go by groups of ``attention.head_group`` per DMA; up to two groups are simulated whole, beyond that
    the time is the simulation of one group plus (heads / group - 1) times the increment from one group to two (the
    steady state: the next group's loads overlap this one's compute).  flops are the logical ones (two products of
    2 D per kept score each, and 5 per kept score for the softmax).  A head over the 128 partitions of the
    contraction (DeepSeek's 192) is loaded in partition chunks whose score matmuls accumulate in PSUM; ``None`` when
    ``D`` exceeds ``attention.MAX_HEAD_DIM`` (the caller prices the two products as matmuls).  ``causal`` (torch's
    ``is_causal``): the kernels skip the key tiles above each query tile's diagonal and mask the diagonal tile
    (library/attention.py); only the kept scores count as flops.  ``window`` (with ``causal``; Hugging Face's
    ``sliding_window``): the key tiles before each query tile's window are skipped as well and the tiles its start
    crosses masked (head-major kernel only; the row kernel has no window).

    ``batch``: the ``heads`` are ``batch`` elements of ``heads / batch`` heads each, stored as the projections write
    them (token rows ``[batch, L, heads / batch x D]``).  Then, when one batch element's rows fit
    (``attention.rows_fit``), the kernel is ``library.attention.flash_attention_rows`` (whole token rows per DMA,
    ``Q^T``/``K^T`` made by the Tensor Engine): one and two batch elements simulated, every further one costing
    the increment (the next element's loads overlap this one's compute)."""
    heads, L, S, D = int(heads), int(L), int(S), int(D)
    if heads == 0 or L == 0 or S == 0 or D == 0:
        return _EMPTY
    if D > attention.MAX_HEAD_DIM:
        return None
    P = target.pmax
    Lp, Sp = math.ceil(L / P) * P, math.ceil(S / P) * P
    drop = float(dropout_p)
    item = _itemsize(dtype)
    causal = bool(causal)
    if window is not None and (not causal or int(window) < 1):
        raise ValueError(f"attention_cost: window {window}: a sliding window is at least 1 key and needs causal")
    window = int(window) if window is not None and window < L else None     # no query reaches past it: none
    kept = _kept_scores(L, S, causal, window)
    ck = {"causal": True} if causal else {}         # (non-causal launches and memo keys as before causal existed)
    if window:
        ck["window"] = window
    rows_kernel = D <= P and batch and heads % int(batch) == 0 and not window
    if rows_kernel and attention.rows_fit(Lp, Sp, heads // int(batch) * D, item, target):
        return _attention_rows_cost(target, int(batch), heads // int(batch), L, S, D, Lp, Sp, dtype, drop, ck, kept)
    G = attention.head_group(Lp, Sp, D, item, target.dma_knee_bytes_per_partition)

    def run(h):
        return _sim(attention.flash_attention, (_inp((h, D, Lp), dtype), _inp((h, D, Sp), dtype),
                                                _inp((h, Sp, D), dtype)), {"group": G, "dropout_p": drop, **ck},
                    target)

    def compute():
        if heads <= 2 * G:
            ns, _, nb = run(heads)
        else:
            a, b = run(G), run(2 * G)
            ns, nb = (x + (y - x) * (heads / G - 1) for x, y in ((a[0], b[0]), (a[2], b[2])))
        return ns, heads * (4.0 * D + 5.0) * kept, nb
    return _memo(("attn", target.name, heads, L, S, D, dtype, drop) + (("causal",) if causal else ())
                 + (("window", window) if window else ()), compute)


def _attention_rows_cost(target, B, H, L, S, D, Lp, Sp, dtype, drop, ck, kept):
    def run(b):
        return _sim(attention.flash_attention_rows, (_inp((b, Lp, H * D), dtype), _inp((b, Sp, H * D), dtype),
                                                     _inp((b, Sp, H * D), dtype)),
                    {"heads": H, "dropout_p": drop, **ck}, target)

    def compute():
        if B <= 2:
            ns, _, nb = run(B)
        else:
            a, b = run(1), run(2)
            ns, nb = (x + (y - x) * (B - 1) for x, y in ((a[0], b[0]), (a[2], b[2])))
        return ns, B * H * (4.0 * D + 5.0) * kept, nb
    return _memo(("attn_rows", target.name, B, H, L, S, D, dtype, drop) + (("causal",) if ck else ()), compute)


def attention_backward_cost(target, heads, L, S, D, dtype, dropout_p=0.0, batch=None, causal=False, window=None):
    """The flash backward: ``ATTN_BWD_RATIO`` times the forward kernel's time, flops and bytes (no backward kernel
    is simulated: its five products of the forward's sizes, each engine's work in the same proportion).  A causal
    backward skips the same tiles as its forward (nki-library ``attention_bwd.py``: "Tile-level early exit: Skip
    tiles where no query token can attend to any key token"), so it is the ratio times the causal forward; so does
    a sliding window (``attention_bwd.py`` computes the tiles "based on causal and sliding window masks")."""
    r = attention_cost(target, heads, L, S, D, dtype, dropout_p, batch, causal, window)
    if r is None:
        return None
    return tuple(ATTN_BWD_RATIO * x for x in r)


def elementwise_cost(target, numel, dtype, kind="binary", op="add"):
    if numel == 0:
        return _EMPTY

    def run(C):
        R = _rows_cols(numel)[0]
        if kind == "binary":
            return _sim(elementwise.binary, (_inp((R, C), dtype), _inp((R, C), dtype)), {"op": op}, target)
        if kind == "unary":
            return _sim(elementwise.unary, (_inp((R, C), dtype),), {"op": op}, target)
        return _sim(elementwise.copy, (_inp((R, C), dtype),), {}, target)

    def compute():
        return _tiles(run, _rows_cols(numel)[1], elementwise.FREE_TILE)
    return _memo(("ew", target.name, int(numel), dtype, kind, op), compute)


def reduction_cost(target, rows, cols, dtype, op="add"):
    if rows == 0 or cols == 0:
        return _EMPTY

    def compute():
        r, c = max(int(rows), 1), max(int(cols), 1)
        if r < 128 and c >= 128 * 4:    # few long rows: split each row over partitions, then combine
            split = min(128 // r, c // 128) or 1
            r, c = r * split, math.ceil(c / split)
        return _tiles(lambda n: _sim(reduction.row_reduce, (_inp((n, c), dtype),), {"op": op}, target),
                          r, target.pmax)
    return _memo(("red", target.name, int(rows), int(cols), dtype, op), compute)


def softmax_cost(target, rows, cols, dtype, log=False):
    if rows == 0 or cols == 0:
        return _EMPTY
    if cols > softmax.MAX_COLS:
        return None
    P = target.pmax

    def run(r):
        return _sim(softmax.row_softmax, (_inp((r, cols), dtype),), {"log": log}, target)

    def compute():
        return _tiles(run, int(rows), P)
    return _memo(("sm", target.name, int(rows), int(cols), dtype, log), compute)


def norm_cost(target, rows, cols, dtype, kind="layer_norm"):
    if rows == 0 or cols == 0:
        return _EMPTY
    if cols > normalization.MAX_COLS:
        return None

    def run(r):
        wp = min(int(r), target.pmax)
        x, w = _inp((r, cols), dtype), _inp((wp, cols), dtype)
        if kind == "rms_norm":
            return _sim(normalization.rms_norm, (x, w), {}, target)
        return _sim(normalization.layer_norm, (x, w, _inp((wp, cols), dtype)), {}, target)

    def compute():
        return _tiles(run, int(rows), target.pmax)
    return _memo(("norm", target.name, int(rows), int(cols), dtype, kind), compute)


# -- estimates ---------------------------------------------------------------------------------------
def roofline_ns(target, flops, nbytes, tensor_engine=False):
    """max(compute time, HBM transfer time) on one core: compute at the Tensor Engine's bf16 rate or at one element
    per partition per Vector Engine cycle; transfers at the core's practical DMA rate."""
    if tensor_engine:
        t_compute = flops / target.tensor_bf16_flops_per_core * 1e9
    else:
        t_compute = flops / (target.pmax * target.engine_clock_hz["vector"]) * 1e9
    t_mem = nbytes / target.dma_bytes_per_ns_per_core
    return max(t_compute, t_mem)


def launch_ns(target):
    """Per-op launch cost of eager execution.  No eager-launch figure is published; trnsim charges one DMA
    fixed cost (semaphore to start, ``target.dma_fixed_ns``), the nearest published per-launch latency."""
    return target.dma_fixed_ns


def host_transfer_ns(target, nbytes):
    """One host<->device copy.  The host link rate is not in the published figures trnsim uses; assumed: the
    core's practical DMA rate plus one DMA fixed cost per transfer."""
    return target.dma_fixed_ns + nbytes / target.dma_bytes_per_ns_per_core


def clear_memo():
    _MEMO.clear()
    _BLOCK_SIMS.clear()
    _SIMS.clear()


def expect_many():
    """Say that many kernel simulations follow (a cost estimate's layer run on cold caches): the scheduler takes its
    compiled loop at the next schedule when numba's cache holds it (``machine.sched_fast.expect_many``; timelines
    identical)."""
    from ..machine import sched_fast
    sched_fast.expect_many()


def load_scheduler() -> bool:
    """Load the compiled scheduler now, when this process would take it for its next many simulations anyway
    (``TRNSIM_SCHEDULER`` auto or numba, numba importable, its cache holding the build: loading costs about 0.3-0.4 s
    of CPU, never a compile).  For a process about to fork helpers that simulate (``trnsim.cost.forked``): they
    inherit it instead of loading it each.  Whether it is loaded."""
    from ..machine import sched_fast
    from ..machine.scheduler import schedule
    if sched_fast.compiled():
        return True
    if sched_fast.mode() != "numba" or not sched_fast.fast_available() or not sched_fast.cache_warm():
        return False
    res = run_kernel(elementwise.copy, (_inp((128, 8), "float32"),), {}, target="trn2", execute=False)
    schedule(res.cores, impl="numba")
    return sched_fast.compiled()


def ran_uncompiled_cold() -> bool:
    """Whether this process's kernel simulations ran the scheduler uncompiled because numba's cache did not hold
    its compiled loop (``machine.sched_fast.ran_uncompiled_cold``): ``trnsim warmup`` would make them faster."""
    from ..machine import sched_fast
    return sched_fast.ran_uncompiled_cold()


def deferring(pending):
    """Inside ``with deferring(d):`` missing kernel costs are recorded in ``d`` (key -> compute) and charged zero;
    :func:`fill` stores their computed values."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        global _DEFERRED
        prev, _DEFERRED = _DEFERRED, pending
        try:
            yield pending
        finally:
            _DEFERRED = prev
    return cm()


def fill(key, value):
    """Memoise (and cache on disk) the computed cost of ``key``."""
    value = tuple(value)
    _MEMO[key] = value
    cost_cache.store(key, value)
