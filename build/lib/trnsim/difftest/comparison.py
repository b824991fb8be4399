"""Comparing two recordings: tensor by tensor with dtype-aware tolerances, and the first divergence per rank.

``A`` is the reference (for instance the CPU or the hardware run) and ``B`` the candidate: relative errors and ULPs
are measured at ``A``'s values.  Entries are matched by key (``op/forward/blocks.1.up/aten.addmm.default#0``...);
execution order is ``A``'s.  An entry recorded on one side only is a divergence for inputs, outputs, modules and
kernels; for ops it is listed as unmatched (the two devices may legitimately run different ops, such as a copy to
the device) unless ``strict=True``.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass, field

import numpy as np
import torch

from .bundle import DEFAULT_MAX_BYTES, BundleError, find_bundles, load_bundle
from .tolerance import Tolerance, Tolerances, is_float, ulp

EQUAL, WITHIN, DIVERGED, SHAPE, DTYPE, ONLY_A, ONLY_B = (
    "equal", "within tolerance", "diverged", "shape differs", "dtype differs", "only in A", "only in B")
FAILING = {DIVERGED, SHAPE, DTYPE}


@dataclass
class EntryResult:
    test: str
    rank: int
    key: str
    kind: str
    status: str
    seq: int
    dtype: str = ""
    shape: tuple = ()
    path: str = ""
    op: str = ""
    phase: str = ""
    numel: int = 0
    n_bad: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulps: float = 0.0
    tol: Tolerance | None = None
    worst: list = field(default_factory=list)
    note: str = ""

    @property
    def failing(self):
        return self.status in FAILING

    def where(self):
        """``op aten.addmm.default in module blocks.1.up (forward)`` or the key."""
        if self.kind == "op":
            return f"op {self.op} in module {self.path} ({self.phase})"
        if self.kind == "module":
            return f"output of module {self.path}"
        if self.kind == "grad":
            return f"input gradient of module {self.path}"
        if self.kind.startswith("kernel"):
            return f"{'input' if self.kind == 'kernel_input' else 'output'} of NKI kernel {self.path}"
        return f"{self.kind} {self.key.split('/', 1)[-1]}"


@dataclass
class BundlePair:
    test: str
    rank: int
    a: object = None           # Bundle or None
    b: object = None
    results: list = field(default_factory=list)

    @property
    def first(self):
        for r in self.results:
            if r.failing or (r.status in (ONLY_A, ONLY_B) and r.note == "divergence"):
                return r
        return None


@dataclass
class Comparison:
    a_root: str
    b_root: str
    pairs: list
    tolerances: Tolerances
    strict: bool = False

    @property
    def results(self):
        return [r for p in self.pairs for r in p.results]

    @property
    def missing(self):
        return [p for p in self.pairs if p.a is None or p.b is None]

    @property
    def firsts(self):
        """The first divergence of each (test, rank), in (test, rank) order."""
        return [(p, p.first) for p in self.pairs if p.a is not None and p.b is not None and p.first is not None]

    @property
    def first(self):
        """The first divergence overall: per test, the rank whose first divergence comes earliest in execution
        order (ties: the lower rank)."""
        fs = self.firsts
        if not fs:
            return None
        test0 = fs[0][0].test
        cands = [(r.seq, p.rank, r) for p, r in fs if p.test == test0]
        return min(cands, key=lambda c: (c[0], c[1]))[2]

    @property
    def ok(self):
        return not self.missing and not self.firsts

    @property
    def exit_code(self):
        return 0 if self.ok else 1


def _as_f64(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bool:
        return t.numpy().astype(np.float64)
    return t.to(torch.float64).numpy()


def compare_tensors(a: torch.Tensor, b: torch.Tensor, dtype: str, tol: Tolerance, top: int = 5):
    """``(n_bad, max_abs, max_rel, max_ulps, worst)`` of ``b`` against reference ``a`` (same shape)."""
    if not is_float(dtype) and tol.atol == 0 and tol.rtol == 0:        # integers, booleans: exact
        ai, bi = a.reshape(-1).numpy(), b.reshape(-1).numpy()
        bad = ai != bi
        n_bad = int(bad.sum())
        if not n_bad:
            return 0, 0.0, 0.0, 0.0, []
        # |difference| as Python integers (no overflow for int64/uint64 extremes)
        idx = np.flatnonzero(bad)
        diffs = [abs(int(ai[i]) - int(bi[i])) for i in idx]
        order = sorted(range(len(idx)), key=lambda j: -diffs[j])[:top]
        worst = [{"index": tuple(int(v) for v in np.unravel_index(int(idx[j]), a.shape)) if a.dim() else (),
                  "a": int(ai[idx[j]]), "b": int(bi[idx[j]]), "abs": float(diffs[j]), "rel": float("nan"),
                  "ulps": float("nan")} for j in order]
        return n_bad, float(max(diffs)), float("nan"), float("nan"), worst
    x, y = _as_f64(a).reshape(-1), _as_f64(b).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        diff = np.where(same, 0.0, np.abs(x - y))
        diff = np.where(np.isnan(diff), np.inf, diff)          # one side NaN, or inf - inf of opposite signs
        ax = np.abs(x)
        fin = np.isfinite(x)
        if is_float(dtype):
            u = ulp(np.where(fin, x, 0.0), dtype)
        else:
            u = np.ones_like(x)
        allowed = np.maximum(tol.atol + tol.rtol * np.where(fin, ax, 0.0), tol.ulps * u)
        if tol.tensor_ulps and is_float(dtype) and fin.any():
            allowed = np.maximum(allowed, tol.tensor_ulps * float(ulp(np.max(ax[fin]), dtype)))
        allowed = np.where(fin, allowed, 0.0)
        bad = diff > allowed
        rel = np.where(ax > 0, diff / np.where(ax > 0, ax, 1.0), np.where(diff > 0, np.inf, 0.0))
        ulps = diff / u
    n_bad = int(bad.sum())
    if x.size == 0:
        return 0, 0.0, 0.0, 0.0, []
    score = np.where(allowed > 0, diff / np.where(allowed > 0, allowed, 1.0), np.where(diff > 0, np.inf, 0.0))
    k = min(top, x.size)
    idx = np.argpartition(-score, k - 1)[:k] if x.size > k else np.arange(x.size)
    idx = idx[np.argsort(-score[idx], kind="stable")]
    worst = []
    for i in idx:
        if diff[i] == 0:
            continue
        worst.append({"index": tuple(int(v) for v in np.unravel_index(int(i), a.shape)) if a.dim() else (),
                      "a": float(x[i]), "b": float(y[i]), "abs": float(diff[i]), "rel": float(rel[i]),
                      "ulps": float(ulps[i]), "allowed": float(allowed[i])})
    return n_bad, float(diff.max()), float(rel.max()), float(ulps.max()), worst


def _entry_meta(e):
    return dict(kind=e["kind"], dtype=e["dtype"], shape=tuple(e["shape"]), path=e.get("path", ""),
                op=e.get("op", ""), phase=e.get("phase", ""))


def _align_ops(A, B):
    """Match op entries of A and B: within each (phase, module) the longest common subsequence of
    (op, dtype, shape), so an op one device runs and the other does not (a different decomposition of attention,
    a copy) does not shift the matching of the ops after it.  Returns {A key: B entry}."""
    def groups(bundle):
        g = {}
        for e in bundle.entries:
            if e["kind"] == "op":
                g.setdefault((e.get("phase", ""), e.get("path", "")), []).append(e)
        return g
    ga, gb = groups(A), groups(B)
    out = {}
    for g, la in ga.items():
        lb = gb.get(g)
        if not lb:
            continue
        sig = lambda e: (e.get("op", ""), e["dtype"], tuple(e["shape"]), e["key"].rsplit("#", 1)[-1].partition(".")[2])
        sm = difflib.SequenceMatcher(None, [sig(e) for e in la], [sig(e) for e in lb], autojunk=False)
        for blk in sm.get_matching_blocks():
            for i in range(blk.size):
                out[la[blk.a + i]["key"]] = lb[blk.b + i]
    return out


def compare_pair(pair: BundlePair, tols: Tolerances, strict=False, top=5, subset=False, include=None):
    """Compare one pair of bundles; ``subset``: B recorded part of A's run (entries only in A are skipped);
    ``include``: glob patterns of the keys to compare (default all)."""
    A, B = pair.a, pair.b
    out = []
    ops = _align_ops(A, B)
    used_b = {f["key"] for f in ops.values()}

    def wanted(key):
        return include is None or any(fnmatch.fnmatchcase(key, pat) for pat in include)
    for e in A.entries:
        key = e["key"]
        if not wanted(key):
            continue
        f = ops.get(key) if e["kind"] == "op" else B.by_key.get(key)
        meta = _entry_meta(e)
        if f is None and subset:
            continue
        if f is None:
            note = "divergence" if (strict or e["kind"] != "op") else "unmatched op"
            out.append(EntryResult(pair.test, pair.rank, key, status=ONLY_A, seq=e["seq"], note=note, **meta))
            continue
        r = EntryResult(pair.test, pair.rank, key, status=EQUAL, seq=e["seq"], **meta)
        if f["key"] != key:
            r.note = f"B: {f['key']}"
        r.numel = int(np.prod(e["shape"])) if e["shape"] else 1
        r.tol = tols.for_entry(key, e["dtype"])
        if e["dtype"] != f["dtype"]:
            r.status, r.note = DTYPE, f"A {e['dtype']}, B {f['dtype']}"
        elif e["shape"] != f["shape"]:
            r.status, r.note = SHAPE, f"A {e['shape']}, B {f['shape']}"
        elif e["sha256"] == f["sha256"] and e.get("stored_dtype") == f.get("stored_dtype"):
            pass
        else:
            ta, tb = A.tensor(key), B.tensor(f["key"])
            if ta.dtype != tb.dtype:        # e.g. one side stored an exotic float as float32: compare values
                ta, tb = ta.to(torch.float64), tb.to(torch.float64)
            r.n_bad, r.max_abs, r.max_rel, r.max_ulps, r.worst = compare_tensors(ta, tb, e["dtype"], r.tol, top)
            r.status = DIVERGED if r.n_bad else WITHIN
        out.append(r)
    for f in B.entries:
        k = f["key"]
        if not wanted(k) or (k in used_b if f["kind"] == "op" else k in A.by_key):
            continue
        note = "divergence" if (strict or f["kind"] != "op") else "unmatched op"
        out.append(EntryResult(pair.test, pair.rank, k, status=ONLY_B, seq=f["seq"], note=note, **_entry_meta(f)))
    pair.results = out
    return pair


def _index(root, max_bytes):
    bundles = {}
    for d in find_bundles(root):
        b = load_bundle(d, max_bytes=max_bytes)
        k = (b.name, b.rank)
        if k in bundles:
            raise BundleError(f"{root}: two bundles for test {b.name!r} rank {b.rank}: {bundles[k].path} and {d}")
        bundles[k] = b
    return bundles


def compare(a_root, b_root, tolerances: Tolerances | None = None, strict=False, top=5,
            max_bytes=DEFAULT_MAX_BYTES, subset=False, include=None) -> Comparison:
    """Compare every recording under ``a_root`` with the one of the same test and rank under ``b_root``.

    Raises :class:`~trnsim.difftest.bundle.BundleError` for a bundle that cannot be trusted."""
    tols = tolerances or Tolerances()
    A, B = _index(a_root, max_bytes), _index(b_root, max_bytes)
    names_a, names_b = {k[0] for k in A}, {k[0] for k in B}
    if len(A) == 1 and len(B) == 1:                # two single bundles: pair them whatever their names and ranks
        B = {next(iter(A)): next(iter(B.values()))}
    elif len(names_a) == 1 and len(names_b) == 1 and names_a != names_b:   # two single tests: pair by rank
        nb = next(iter(names_a))
        B = {(nb, r): v for (_, r), v in B.items()}
    keys = sorted(set(A) | set(B))
    pairs = []
    for test, rank in keys:
        p = BundlePair(test, rank, A.get((test, rank)), B.get((test, rank)))
        if p.a is not None and p.b is not None:
            compare_pair(p, tols, strict=strict, top=top, subset=subset, include=include)
        pairs.append(p)
    return Comparison(str(a_root), str(b_root), pairs, tols, strict)
