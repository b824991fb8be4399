"""Running the registered groups: the declared-but-unimplemented names, registration, one record per
name x dtype x mode, ``run_nki`` and ``list_nki_names``."""

from __future__ import annotations

import fnmatch
import re
import time
import zlib

import numpy as np

from .harness import _M, _REG, _check, _setup, _sim
from .rules import _define_rules


# ---------------------------------------------------------------------------------- not implemented
def _discover_unsupported():
    """nisa / nl names trnsim declares but does not implement (they raise NotImplementedError when called)."""
    out = {}
    for prefix, mod in (("nisa", _M["nisa"]), ("nl", _M["nl"])):
        for n in sorted(dir(mod)):
            f = getattr(mod, n)
            if n.startswith("_") or not callable(f) or isinstance(f, type) or \
                    not getattr(f, "_trnsim_unsupported", False):
                continue
            try:
                f()
            except NotImplementedError as e:
                out[f"{prefix}.{n}"] = str(e).splitlines()[0]
            except Exception:
                pass
    return out


_DEFINED = []


def _ensure():
    _setup()
    if not _DEFINED:
        from . import mx  # noqa: F401  (registers the issue-13 instructions' cases)
        from . import random_search  # noqa: F401  (topk and the random-number instructions)
        _define_rules()
        for name, reason in _discover_unsupported().items():
            _REG.setdefault(name, {})["skip"] = reason
        _DEFINED.append(True)


def list_nki_names() -> list[str]:
    """Every instruction/op name the suite covers (including the declared-but-unimplemented ones it skips)."""
    _ensure()
    return sorted(_REG)


# --------------------------------------------------------------------------------------------- running
_ORDER = {"mismatch": 3, "error": 2, "pass": 1, "skip": 0}


def _first_line(e):
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0] if s else ''}"[:300]


def _run_numerics(name, dt, gen):
    counts = {"pass": 0, "mismatch": 0, "error": 0, "skip": 0}
    details = {}
    rng = np.random.default_rng(zlib.crc32(f"{name}/{dt}".encode()))
    try:
        cases = gen(dt, rng)
    except NotImplementedError as e:
        return counts | {"skip": 1}, {"skip": _first_line(e)}
    except Exception as e:      # the generator itself failed: one error for the group
        return counts | {"error": 1}, {"error": f"case generation: {_first_line(e)}"}
    for desc, thunk in cases:
        try:
            checks = thunk()
        except NotImplementedError as e:
            counts["skip"] += 1
            details.setdefault("skip", f"{desc}: {_first_line(e)}")
            continue
        except Exception as e:
            counts["error"] += 1
            details.setdefault("error", f"{desc}: {_first_line(e)}")
            continue
        bad = None
        for label, got, ref, tol in checks:
            bad = _check(label, got, ref, tol)
            if bad:
                break
        if bad:
            counts["mismatch"] += 1
            details.setdefault("mismatch", f"{desc}: {bad}")
        else:
            counts["pass"] += 1
    return counts, details


def _run_rules(name, rules):
    err_t = _M["err"]
    counts = {"pass": 0, "mismatch": 0, "error": 0, "skip": 0}
    details = {}
    for r in rules:
        def body(*_):
            r.body()
        try:
            _sim(body, target=r.target)
        except err_t as e:
            msg = str(e)
            if r.operand is None:
                ok = e.instruction == r.instr and msg.startswith(r.instr)
                what = f"the instruction {r.instr}"
            elif r.match is not None:       # allocation errors name the shape in words, not as 'operand'
                ok = e.operand == r.operand and re.search(r.match, msg) is not None
                what = f"operand {r.operand} (message matching {r.match!r})"
            else:
                ok = e.operand == r.operand and f"'{r.operand}'" in msg
                what = f"operand '{r.operand}'"
            if ok:
                counts["pass"] += 1
            else:
                counts["mismatch"] += 1
                details.setdefault("mismatch", f"rule {r.desc!r}: raised, but does not name {what}: {msg[:200]}")
            continue
        except NotImplementedError as e:
            counts["skip"] += 1
            details.setdefault("skip", f"rule {r.desc!r}: {_first_line(e)}")
            continue
        except Exception as e:
            counts["mismatch"] += 1
            details.setdefault("mismatch", f"rule {r.desc!r}: raised {_first_line(e)} instead of NkiValidationError")
            continue
        counts["mismatch"] += 1
        details.setdefault("mismatch", f"rule {r.desc!r}: no error raised")
    return counts, details


def _record(name, dt, mode, counts, details, seconds):
    present = [s for s in ("mismatch", "error", "pass") if counts.get(s)]
    status = present[0] if present else "skip"
    detail = details.get(status, "") if status != "pass" else ""
    if status == "skip" and not detail:
        detail = details.get("skip", "")
    return {"suite": "nki", "name": name, "dtype": dt, "mode": mode, "status": status,
            "counts": {k: int(v) for k, v in counts.items()}, "samples": int(sum(counts.values())),
            "detail": detail, "seconds": round(float(seconds), 4)}


def _groups(pattern, dtypes):
    _ensure()
    out = []
    for name in sorted(_REG):
        if pattern and not fnmatch.fnmatchcase(name, pattern):
            continue
        ent = _REG[name]
        if "skip" in ent and "numerics" not in ent and "rules" not in ent:
            out.append((name, "-", "numerics", None))
            continue
        for dt in sorted(ent.get("numerics", {})):
            if dtypes is None or dt in dtypes:
                out.append((name, dt, "numerics", ent["numerics"][dt]))
        if "rules" in ent:
            out.append((name, "-", "rule", ent["rules"]))
    return out


def run_nki(pattern: str | None = None, dtypes: list[str] | None = None, progress=None) -> list[dict]:
    """Run the NKI conformance groups whose name matches ``pattern`` (fnmatch) for ``dtypes`` (default: every dtype
    each instruction allows); one record per name x dtype x mode."""
    groups = _groups(pattern, set(dtypes) if dtypes else None)
    records = []
    import warnings
    for i, (name, dt, mode, gen) in enumerate(groups):
        t0 = time.perf_counter()
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if gen is None:
                counts = {"pass": 0, "mismatch": 0, "error": 0, "skip": 1}
                details = {"skip": _REG[name]["skip"]}
            elif mode == "rule":
                counts, details = _run_rules(name, gen())
            else:
                counts, details = _run_numerics(name, dt, gen)
        records.append(_record(name, dt, mode, counts, details, time.perf_counter() - t0))
        if progress is not None:
            progress(i + 1, len(groups), name)
    return records
