"""Running one case on the simulator (``_sim``, ``_ld``, ``_st``), comparing against a reference within a
tolerance (``_check``), the registry of numerics generators (``_numerics``), shapes, placements and ALU op inputs."""

from __future__ import annotations

import math

import numpy as np

from .references import ACT_RANGE, ACT_WIDE, EB, NP, _cast, _is_int, eb_binary, f64


# ------------------------------------------------------------------------------------------- harness
_M = {}


def _setup():
    if not _M:
        import trnsim
        nki = trnsim.install_nki()
        import nki.isa as nisa
        import nki.language as nl
        import neuronxcc.nki as nki1
        import neuronxcc.nki.language as nl1
        _M.update(trnsim=trnsim, nki=nki, nisa=nisa, nl=nl, nki1=nki1, nl1=nl1, err=trnsim.NkiValidationError)
    return _M


def _sim(body, *arrays, target=None):
    nki = _M["nki"]
    k = nki.jit(body)
    if target is not None:
        k = nki.simulate(k, target=target)
    out = k(*arrays)
    return out if isinstance(out, tuple) else (out,)


def _buf(space):
    nl = _M["nl"]
    return {"sbuf": nl.sbuf, "psum": nl.psum, "hbm": nl.shared_hbm}[space]


def _ld(x, space="sbuf", dt=None, poff=0):
    """A copy of HBM ``x`` in ``space``; with ``poff`` a view starting at partition ``poff`` of a larger tile."""
    nisa = _M["nisa"]
    t = _new(x.shape, dt or x.dtype, space, poff)
    nisa.dma_copy(t, x)
    return t


def _new(shape, dt, space="sbuf", poff=0):
    if not poff:
        return _M["nl"].ndarray(shape, dt, buffer=_buf(space))
    big = _M["nl"].ndarray((poff + shape[0],) + tuple(shape[1:]), dt, buffer=_buf(space))
    return big[poff:poff + shape[0]]


def _poff(i, p):
    """A legal non-zero start partition for a tile of p partitions (start-partition rule), cycling with i."""
    if p > 64:
        return 0
    if p > 32:
        return 64 if i % 2 else 0
    return (32 * (i % 4)) if i % 4 else (0 if p == 32 else 1 + (i % (32 - p + 1)))


def _st(t):
    nl, nisa = _M["nl"], _M["nisa"]
    o = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(o, t)
    return o


def _gen(rng, shape, dt, lo=-4.0, hi=4.0):
    """Exactly representable inputs: uniform in [lo, hi] (or +-[lo, hi] with lo='pm'), rounded into dt."""
    if lo == "pm":
        a, b = hi
        v = rng.uniform(a, b, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    else:
        v = rng.uniform(lo, hi, size=shape)
    return _cast(v, dt)


def _check(label, got, ref, tol):
    """None if every element is within tolerance, else the worst element described."""
    g = f64(got)
    ref = np.asarray(ref, dtype=np.float64)
    if g.size != ref.size:
        return f"{label}: got shape {list(g.shape)}, expected {list(ref.shape)}"
    g = g.reshape(ref.shape)
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), ref.shape)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - ref)
        ok = (np.isnan(g) & np.isnan(ref)) | (g == ref) | (err <= tol)
    if ok.all():
        return None
    score = np.where(ok, -np.inf, np.nan_to_num(err - tol, nan=np.inf, posinf=np.inf))
    i = np.unravel_index(int(np.argmax(score)), ref.shape)
    return (f"{label}: worst at {list(int(j) for j in i)}: got {g[i]!r}, expected {ref[i]!r}, tolerance "
            f"{float(tol[i]):.3g} ({int((~ok).sum())} of {ok.size} elements out)")


# registry: name -> {"numerics": {dtype: gen(dt, rng) -> [(desc, thunk)]}, "rules": gen() -> [...], "skip": reason}
_REG: dict = {}


def _numerics(name, dtypes):
    def deco(fn):
        _REG.setdefault(name, {}).setdefault("numerics", {})
        for d in dtypes:
            _REG[name]["numerics"][d] = fn
        return fn
    return deco


SHAPES = [(1, 1), (1, 7), (32, 33), (128, 1), (7, 512), (77, 129), (128, 512), (127, 3)]


def _shapes(limit=None, itemsize=4, ntensors=3, sbuf_bytes=None):
    """The standard (partitions, free) list plus one case at the instruction's free-size limit (or the largest
    free size that the operands fit into SBUF at)."""
    out = list(SHAPES)
    if limit:
        fit = (sbuf_bytes or _SBUF_BUDGET) // (ntensors * itemsize)
        out.append((2, min(limit, fit)))
    return out


_SBUF_BUDGET = 176 * 1024      # bytes per partition the operands of one case may use (trn1 SBUF: 192 KiB)


def _itemsize(dt):
    return np.dtype(NP[dt]).itemsize


def _place(i, n, allowed, f, dt, psum_fmax=4096):
    """Placement of n operands for case i, cycling through ``allowed`` (tuples of 'sbuf'/'psum'); PSUM only while
    the PSUM operands fit its 16 KiB per partition and the Vector PSUM free limit."""
    combos = [c for c in allowed if c.count("psum") * f * 4 <= 12 * 1024 and ("psum" not in c or f <= psum_fmax)]
    if not combos:
        return ("sbuf",) * n
    return combos[i % len(combos)]


# -------------------------------------------------------------------------------- ALU op inputs/refs
ARITH = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "abs_max", "abs_min", "power", "mod",
         "fmod"]
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
           "logical_xor"]
BITVEC = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]


def _op_inputs(op, rng, shape, dt):
    """Operands for ALU op ``op`` in dtype ``dt`` inside its domain (results finite in fp8 e4m3)."""
    if op in BITVEC:
        ii = np.iinfo(NP[dt])
        if op in ("left_shift", "right_shift"):
            x = rng.integers(0, min(ii.max, 2 ** 20) // 256 + 1, size=shape)
            y = rng.integers(0, 8, size=shape)
        else:
            x = rng.integers(max(ii.min, -2 ** 30), min(ii.max, 2 ** 30) + 1, size=shape)
            y = rng.integers(max(ii.min, -2 ** 30), min(ii.max, 2 ** 30) + 1, size=shape)
        return _cast(x, dt), _cast(y, dt)
    if _is_int(dt):                              # integer data through the fp32 ALU: small non-negative values
        return _cast(rng.integers(0, 12, size=shape), dt), _cast(rng.integers(1, 12, size=shape), dt)
    if op in COMPARE:
        return _cast(rng.integers(-2, 3, size=shape), dt), _cast(rng.integers(-2, 3, size=shape), dt)
    if op == "divide":
        return _gen(rng, shape, dt), _gen(rng, shape, dt, "pm", (0.5, 4))
    if op == "power":
        return _gen(rng, shape, dt, 0.5, 2), _gen(rng, shape, dt, -2, 2)
    if op in ("mod", "fmod"):
        return _gen(rng, shape, dt, -8, 8), _gen(rng, shape, dt, "pm", (0.5, 3))
    return _gen(rng, shape, dt), _gen(rng, shape, dt)


def _bitvec_ref(op, x, y, dt):
    a, b = np.asarray(x).astype(np.int64), np.asarray(y).astype(np.int64)
    r = {"bitwise_and": a & b, "bitwise_or": a | b, "bitwise_xor": a ^ b, "left_shift": a << b,
         "right_shift": a >> b}[op]
    return f64(r.astype(NP[dt]))       # wraps to the dtype's width like the hardware's integer ALU


def _binary_eb(op, x, y, dt):
    if op in BITVEC:
        return EB(_bitvec_ref(op, x, y, dt))
    return eb_binary(op, EB(f64(x)), EB(f64(y)))


def _wide_input(name, rng, shape, dt):
    r = ACT_WIDE[name]
    if r[0] in ("log", "pmlog"):
        v = np.exp(rng.uniform(math.log(r[1]), math.log(r[2]), size=shape))
        if r[0] == "pmlog":
            v = v * rng.choice([-1.0, 1.0], size=shape)
        return _cast(v, dt)
    return _gen(rng, shape, dt, *r)


def _act_input(name, rng, shape, dt):
    r = ACT_RANGE.get(name, (-4.0, 4.0))
    if r[0] == "pm":
        return _gen(rng, shape, dt, "pm", r[1:])
    return _gen(rng, shape, dt, *r)
