"""Randomised calls of every instruction, for the robustness campaign: bad input must end in a located
:class:`NkiValidationError`, never in another exception.

A :class:`Fuzzer` draws its choices from a *source* with ``choice(seq)``, ``randint(lo, hi)`` and ``random()``:
``random.Random`` for the long campaign (``benchmarks/fuzz_isa.py``) or an adapter over hypothesis' ``data.draw``
(``tests/isa/test_fuzz.py``).  Each call gets operands that mostly fit together (one partition count and free size
per call, so that calls get past the first rules and reach the deeper ones) with a fair share of junk: zero-size
and 0-D tiles, HBM tensors where tiles are expected, strings, ``None``, NaN, huge integers, wrong operators.
"""

from __future__ import annotations

import inspect
import math

import numpy as np

from ..memory import HBM, PSUM, SBUF, Tensor
from ..memory.dtypes import DTYPES
from .errors import NkiValidationError

__all__ = ["Fuzzer", "FuzzResult", "HypothesisSource"]

_TENSOR_PARAMS = {"dst", "src", "data", "data0", "data1", "data2", "stationary", "moving", "predicate", "on_true",
                  "on_true_tile", "vals", "dst_idx", "reduce_res", "operand1", "val_dst", "idx_dst",
                  "stationary_scale", "moving_scale", "dst_scale", "segment_ids", "index", "indices", "src_buffer"}
_OP_PARAMS = {"op", "op0", "op1", "reduce_op", "comp_op0", "comp_op1", "cmp_op"}
_NUM_PARAMS = {"operand0", "scale", "bias", "value", "imm", "imm0", "imm1", "initial", "max_value",
               "reduce_init", "on_false_value", "on_false", "bound0", "bound1", "relu_param", "src_imm"}
_INT_PARAMS = {"offset", "channel_multiplier", "range_start", "index_offset", "padding_val", "n",
               "num_elem_per_idx", "num_valid_indices"}
_BOOL_PARAMS = {"reverse0", "reverse1", "negate", "keepdims", "is_transpose", "is_stationary_onezero",
                "is_moving_onezero", "reverse_pred", "reduce_res_negate", "unique_indices"}
_OPS = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "less", "greater_equal",
        "logical_and", "logical_xor", "abs_max", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
        "right_shift", "invert", "abs", "square", "relu", "rsqrt", "reciprocal", "exp", "tanh", "gelu", "silu",
        "copy", "bypass", "mod", "average", "mean", np.add, np.maximum, np.exp, "nonsense", "", None, 3, 2.5)
_JUNK = (None, "abc", "", float("nan"), float("inf"), -float("inf"), 2 ** 70, -2 ** 40, -1, 0, 1, 3.5, True, [],
         [1, 2], (), {}, object(), b"x", 1e40, -0.0, np.float32(2), np.int64(7), np.array([1.0, 2.0]),
         np.array(3.0))
_ENGINES = ("vector", "scalar", "gpsimd", "tensor", "dma", "sync", "unknown", None, "bogus", 3)


# tame calls: where an instruction needs a particular memory, shape or dtype for an operand (so that the call
# reaches its deeper rules): param -> (memory, shape from (p, f, m), dtype or None)
_PLANS = {
    "nc_matmul": {"stationary": (SBUF, lambda p, f, m: (p, m), None), "moving": (SBUF, lambda p, f, m: (p, f), None),
                  "dst": (PSUM, lambda p, f, m: (m, f), "float32")},
    "nc_transpose": {"data": (SBUF, lambda p, f, m: (p, m), None), "dst": (PSUM, lambda p, f, m: (m, p), None)},
    "dma_transpose": {"src": (HBM, lambda p, f, m: (p, m), None), "dst": (SBUF, lambda p, f, m: (m, p), None)},
    "bn_stats": {"dst": (SBUF, lambda p, f, m: (p, 6), "float32")},
    "bn_aggr": {"data": (SBUF, lambda p, f, m: (p, 6), "float32"), "dst": (SBUF, lambda p, f, m: (p, 2), None)},
    "max8": {"dst": (SBUF, lambda p, f, m: (p, 8), None), "src": (SBUF, lambda p, f, m: (p, 8 + f), None)},
    "nc_find_index8": {"vals": (SBUF, lambda p, f, m: (p, 8), None), "dst": (SBUF, lambda p, f, m: (p, 8), "uint32"),
                       "data": (SBUF, lambda p, f, m: (p, 8 + f), None)},
    "nc_match_replace8": {"vals": (SBUF, lambda p, f, m: (p, 8), None),
                          "dst_idx": (SBUF, lambda p, f, m: (p, 8), "uint32"),
                          "data": (SBUF, lambda p, f, m: (p, 8 + f), None),
                          "dst": (SBUF, lambda p, f, m: (p, 8 + f), None)},
    "iota": {"dst": (SBUF, lambda p, f, m: (p, f), None)},
    "affine_select": {"dst": (SBUF, lambda p, f, m: (p, f), None), "on_true_tile": (SBUF, lambda p, f, m: (p, f), None)},
    "tensor_copy_predicated": {"predicate": (SBUF, lambda p, f, m: (p, f), "uint8")},
    "select_reduce": {"predicate": (SBUF, lambda p, f, m: (p, f), "uint8")},
    "nonzero_with_count": {"src": (SBUF, lambda p, f, m: (p, f), "float32"),
                           "dst": (SBUF, lambda p, f, m: (p, f + 1), "int32")},
    "sequence_bounds": {"segment_ids": (SBUF, lambda p, f, m: (1, f), "float32"),
                        "dst": (SBUF, lambda p, f, m: (1, 2, f), "float32")},
    "local_gather": {"src_buffer": (SBUF, lambda p, f, m: (128, f + 40), None),
                     "index": (SBUF, lambda p, f, m: (128, 1), "uint16"),
                     "dst": (SBUF, lambda p, f, m: (128, 16), None)},
    "nc_n_gather": {"indices": (SBUF, lambda p, f, m: (p, 8), "uint32"), "dst": (SBUF, lambda p, f, m: (p, 8), None),
                    "data": (SBUF, lambda p, f, m: (p, f + 8), None)},
    "topk": {"src": (SBUF, lambda p, f, m: (16, f + 1), "bfloat16"),
             "val_dst": (SBUF, lambda p, f, m: (16, 8), "bfloat16"), "idx_dst": (SBUF, lambda p, f, m: (16, 8), "uint32")},
    "set_rng_seed": {"src_seeds": (SBUF, lambda p, f, m: (1, 1), "uint32")},
    "rand_set_state": {"src_seeds": (SBUF, lambda p, f, m: (p, 6), "uint32")},
    "rand_get_state": {"dst": (SBUF, lambda p, f, m: (p, 6), "uint32")},
    "rng": {"dst": (SBUF, lambda p, f, m: (p, f), "uint16")},
    "tensor_partition_reduce": {"dst": (SBUF, lambda p, f, m: (1, f), None), "data": (SBUF, lambda p, f, m: (p, f), None)},
    "dma_compute": {"dst": (HBM, lambda p, f, m: (p, f), None)},
    "range_select": {"bound0": (SBUF, lambda p, f, m: (p, 1), "float32"),
                     "bound1": (SBUF, lambda p, f, m: (p, 1), "float32"),
                     "on_true_tile": (SBUF, lambda p, f, m: (p, f), None), "dst": (SBUF, lambda p, f, m: (p, f), None)},
    "quantize_mx": {"src": (SBUF, lambda p, f, m: (32, 4 * f), "bfloat16"),
                    "dst": (SBUF, lambda p, f, m: (32, f), "float8_e4m3fn_x4"),
                    "dst_scale": (SBUF, lambda p, f, m: (32, f), "uint8")},
    "nc_matmul_mx": {"stationary": (SBUF, lambda p, f, m: (32, 2 * m if m < 128 else m), "float8_e4m3fn_x4"),
                     "moving": (SBUF, lambda p, f, m: (32, f), "float8_e5m2_x4"),
                     "stationary_scale": (SBUF, lambda p, f, m: (32, 2 * m if m < 128 else m), "uint8"),
                     "moving_scale": (SBUF, lambda p, f, m: (32, f), "uint8"),
                     "dst": (PSUM, lambda p, f, m: (2 * m if m < 128 else m, f), "float32")},
    "*": {"reduce_res": (SBUF, lambda p, f, m: (p, 1), "float32")},
}


# tame calls: non-tensor arguments an instruction accepts only in particular forms
_PLAN_VALUES = {
    "activate2": {"op0": ("multiply", "add", "subtract", "bypass"), "op1": ("add", "subtract", "bypass"),
                  "op": ("relu", "exp", "prelu", "copy"), "reduce_op": (None, "add", "maximum")},
    "topk": {"n": (8, 16), "sorted": (False, True)},
    "dma_compute": {"reduce_op": ("add",), "scales": (None,), "unique_indices": (True,)},
    "nc_matmul_mx": {"tile_position": (None, (0, 0)), "tile_size": (None, (128, 128)),
                     "accumulate": (None, True, False)},
}


class FuzzResult:
    """Counts of one campaign: calls, validation errors, other exceptions (by type and instruction)."""

    def __init__(self):
        self.calls = 0
        self.ok = 0
        self.validation = 0
        self.failures = {}          # (instruction, exception type, first line of message) -> count
        self.examples = {}          # same key -> (kwargs repr, traceback text)

    @property
    def crashes(self):
        return sum(self.failures.values())

    def merge(self, other):
        self.calls += other.calls
        self.ok += other.ok
        self.validation += other.validation
        for k, v in other.failures.items():
            self.failures[k] = self.failures.get(k, 0) + v
            self.examples.setdefault(k, other.examples[k])

    def report(self, limit=20):
        lines = [f"calls {self.calls}, accepted {self.ok}, NkiValidationError {self.validation}, "
                 f"other exceptions {self.crashes}"]
        for k, v in sorted(self.failures.items(), key=lambda kv: -kv[1])[:limit]:
            lines.append(f"  {v:7d}  {k[0]}: {k[1]}: {k[2]}")
        return "\n".join(lines)


class HypothesisSource:
    """``random.Random``'s three methods the fuzzer uses, drawn through hypothesis (so failures shrink)."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self._data = data
        self._st = st

    def choice(self, seq):
        return seq[self._data.draw(self._st.integers(0, len(seq) - 1))]

    def randint(self, lo, hi):
        return self._data.draw(self._st.integers(lo, hi))

    def random(self):
        return self._data.draw(self._st.floats(0.0, 1.0, exclude_max=True))


class Fuzzer:
    """Random instruction calls against cores from ``make_core()`` (a fresh core every ``calls_per_core``)."""

    def __init__(self, source, make_core, instructions=None, calls_per_core=200):
        from . import INSTRUCTIONS
        self.r = source
        self.make_core = make_core          # () -> a NeuronCore (the ISA imports no machine code)
        self.instructions = dict(instructions or INSTRUCTIONS)
        self.params = {n: [p for p in inspect.signature(f).parameters.values()
                           if p.name not in ("core", "loc") and not p.name.startswith("_")] for n, f in self.instructions.items()}
        self.calls_per_core = calls_per_core
        self.core = None
        self._n = 0
        self.tame = False
        self.dtype = "float32"
        self.m = 1
        self.plan = {}
        self.name = ""

    # -- operands ---------------------------------------------------------------------------------------
    def _core(self):
        if self.core is None or self._n >= self.calls_per_core:
            self.core = self.make_core()
            self._n = 0
        self._n += 1
        return self.core

    def _alloc(self, core, shape, dtype, kind):
        try:
            return Tensor.whole(core.allocate(tuple(shape), DTYPES[dtype], kind, name="f"))
        except Exception:       # an allocation the memory refuses is not an ISA call: fall back to a small tile
            return Tensor.whole(core.allocate((1, 1), DTYPES[dtype], kind, name="f"))

    def tensor(self, core, p, f):
        r = self.r
        x = r.random()
        if self.tame:
            dtype = self.dtype if r.random() < 0.8 else r.choice(("float32", "int32", "uint32", "bfloat16"))
            kind = SBUF if x < 0.85 else PSUM
            y = r.random() * 0.72
        else:
            dtype = r.choice(("float32", "float32", "bfloat16", "float16", "int32", "uint8", "int8", "uint32",
                              "float8_e4m3", "tfloat32", "bool", "uint16", "int16"))
            kind = SBUF if x < 0.6 else (PSUM if x < 0.85 else HBM)
            y = r.random()
        if y < 0.55:
            shape = (p, f)
        elif y < 0.65:
            shape = (p, 1)
        elif y < 0.72:
            shape = (p, 8)
        elif y < 0.77:
            shape = (p, f + 1)
        elif y < 0.82:
            shape = (p, 2, max(1, f // 2))
        elif y < 0.86:
            shape = (1, f)
        elif y < 0.89:
            shape = (p, 0) if r.random() < 0.5 else (0, f)
        elif y < 0.91:
            shape = ()
        elif y < 0.94:
            shape = (r.choice((1, 16, 32, 64, 96, 128, 129, 256)), r.choice((1, 4, 32, 100, 512, 600)))
        else:
            shape = (p, 2, 2, max(1, f // 4))
        if kind == PSUM and len(shape) >= 1 and int(np.prod(shape[1:] or (1,))) * 4 > 16384:
            kind = SBUF
        if shape == () or (shape and shape[0] == 0) or (kind != HBM and shape and shape[0] > 128):
            kind = HBM if shape == () or (shape and shape[0] == 0) else SBUF
            if kind == SBUF:
                shape = (128,) + tuple(shape[1:])
        t = self._alloc_filled(core, shape, dtype, kind)
        z = r.random() if not self.tame else 1.0
        if z < 0.08 and t.ndim == 2 and t.shape[1] > 1:
            t = t[:, ::2]                     # strided free dim
        elif z < 0.12 and t.ndim == 2 and t.shape[0] > 1:
            t = t._view(t.offset, t.shape, (0,) + tuple(t.strides[1:]))    # partition step 0
        elif z < 0.15 and t.ndim == 2:
            t = t._view(t.offset, (t.shape[0], 70000), (t.strides[0], 0))  # a huge broadcast free dim
        elif z < 0.18 and t.ndim == 2 and t.shape[0] >= 40:
            t = t[r.choice((1, 3, 33, 40)):]                               # an odd start partition
        return t

    def _alloc_filled(self, core, shape, dtype, kind):
        t = self._alloc(core, shape, dtype, kind)
        if core.execute and t.buf.data is not None and t.size:
            a = t.buf.data
            if t.dtype.is_float:
                a[:] = np.round(np.linspace(-3, 3, a.size), 2)
            elif t.dtype.is_bool:
                a[:] = np.arange(a.size) % 2
            else:
                a[:] = np.arange(a.size) % 7
        return t

    def number_or_tensor(self, core, p, f):
        r = self.r
        x = r.random()
        if x < 0.45:
            return r.choice((0.0, 1.0, -2.5, 0.5, 3, 7, 255, 1e30))
        if x < 0.7:
            return self.tensor(core, p, 1)
        if x < 0.8:
            return self.tensor(core, p, f)
        return r.choice(_JUNK)

    def value(self, core, name, p, f):
        r = self.r
        if r.random() < (0.07 if not self.tame else 0.01):
            return r.choice(_JUNK)
        pv = _PLAN_VALUES.get(self.name, {}).get(name)
        if self.tame and pv is not None:
            return r.choice(pv)
        if self.tame and name == "srcs":
            k = r.randint(1, 3)
            dt = self.dtype
            return [self._alloc_filled(core, (p, f), dt, r.choice((HBM, SBUF))) for _ in range(k)]
        plan = self.plan.get(name) or _PLANS["*"].get(name)
        if self.tame and plan is not None and r.random() < 0.9:
            kind, shape, dt = plan
            return self._alloc_filled(core, shape(p, f, self.m), dt or self.dtype, kind)
        if self.tame and name == "value":
            return r.choice((0, 1, -1.5, 3, 200))
        if self.tame and name == "axis":
            return r.choice((1, -1, (1,)))
        if self.tame and name == "pattern":
            return [[1, f]]
        if self.tame and name == "shuffle_mask":
            return [r.randint(0, 31) for _ in range(32)]
        if name in _TENSOR_PARAMS:
            return self.tensor(core, p, f)
        if name in _OP_PARAMS:
            return r.choice(_OPS)
        if name in _NUM_PARAMS:
            return self.number_or_tensor(core, p, f)
        if name in _INT_PARAMS:
            return r.choice((0, 1, 8, 16, -1, 100, 2 ** 31, -2 ** 31 - 1, 2.5, float("nan"), 42))
        if name in _BOOL_PARAMS:
            return r.choice((True, False, None, 0, 1))
        if name == "engine":
            return r.choice(_ENGINES)
        if name == "axis":
            return r.choice((1, -1, 0, 2, 3, (1,), (1, 2), (2,), [1], 5, -5, (), None, "x", 1.5))
        if name == "accumulate":
            return r.choice((None, True, False, "x"))
        if name == "pattern":
            return r.choice(([[1, f]], [[0, f]], [[-1, f]], [[1, max(1, f // 2)], [0, 2]], [[1, f + 3]],
                             [[1, 1]] * 5, [], [[1]], "x", [[1, "a"]], [[2 ** 40, f]], [[1, -f]]))
        if name == "shuffle_mask":
            return r.choice((list(range(32)), [255] * 32, [0] * 31, [40] * 32, None, "x", [1.5] * 32))
        if name in ("tile_position", "tile_size"):
            return r.choice(((), (0, 0), (64, 0), (64, 128), (128, 128), (32, 32), (1,), "x", (0, "a"), None))
        if name == "perf_mode":
            return r.choice((None, "none", "double_row", "bogus"))
        if name in ("reduce_cmd",):
            return r.choice((None, "idle", "reset", "reduce", "reset_reduce", "load_reduce", "bogus", 7))
        if name == "axes":
            return r.choice((None, (1, 0), (0, 1), (2, 1, 0), (0,), "x"))
        if name == "srcs":
            k = r.randint(0, 3)
            return [self.tensor(core, p, f) for _ in range(k)] if r.random() < 0.9 else r.choice(_JUNK)
        if name == "scales":
            return r.choice((None, [1.0, 1.0], [1.0, 2.0], (1.0, 1.0, 1.0), "x", [None]))
        return r.choice(_JUNK)

    # -- calls ------------------------------------------------------------------------------------------
    def one(self, result: FuzzResult):
        r = self.r
        name = r.choice(sorted(self.instructions))
        fn = self.instructions[name]
        core = self._core()
        p = r.choice((1, 2, 16, 32, 64, 128, 128, 128))
        f = r.choice((1, 4, 8, 16, 32, 64, 100))
        self.tame = r.random() < 0.5       # half the calls keep one dtype and mostly well-formed operands
        self.dtype = r.choice(("float32", "float32", "bfloat16", "int32", "uint32", "float8_e4m3"))
        self.m = r.choice((1, 8, 32, 64, 128))
        self.plan = _PLANS.get(name, {})
        self.name = name
        kwargs = {}
        for prm in self.params[name]:
            if prm.default is not inspect.Parameter.empty and r.random() < 0.35:
                continue
            kwargs[prm.name] = self.value(core, prm.name, p, f)
        result.calls += 1
        try:
            fn(core, ("fuzz.py", 1), **kwargs)
        except NkiValidationError:
            result.validation += 1
            return
        except Exception as e:      # noqa: BLE001 -- any other exception is what the campaign counts
            key = (name, type(e).__name__, str(e).splitlines()[0][:120] if str(e) else "")
            result.failures[key] = result.failures.get(key, 0) + 1
            if key not in result.examples:
                import traceback
                result.examples[key] = (_describe(kwargs), traceback.format_exc(limit=-4))
            return
        result.ok += 1
        self._check_oracle(name, kwargs, result)

    def _check_oracle(self, name, kwargs, result):
        """Silent wrong answers the campaign can see cheaply: a memset that did not store its value."""
        if name == "memset" and self.core.execute:
            dst, v = kwargs.get("dst"), kwargs.get("value")
            if isinstance(dst, Tensor) and dst.size and isinstance(v, (int, float)) and not isinstance(v, bool) \
                    and math.isfinite(v):
                got = dst.np.reshape(-1)[0]
                want = v if dst.dtype.is_float else round(v)
                if dst.dtype.is_float:
                    ok = got == np.float32(dst.dtype._round(np.float32(v)) if dst.dtype._round else np.float32(v)) \
                        or abs(v) > dst.dtype.max
                else:
                    ok = int(got) == want
                if not ok:
                    key = (name, "WrongValue", f"stored {got} for {v} in {dst.dtype.name}")
                    result.failures[key] = result.failures.get(key, 0) + 1
                    result.examples.setdefault(key, (_describe(kwargs), ""))

    def run(self, n):
        res = FuzzResult()
        for _ in range(n):
            self.one(res)
        return res


def _describe(kwargs):
    out = []
    for k, v in kwargs.items():
        if isinstance(v, Tensor):
            out.append(f"{k}=Tensor({v.buf.kind},{v.dtype.name},{list(v.shape)},strides={list(v.strides)})")
        else:
            out.append(f"{k}={v!r}"[:60])
    return ", ".join(out)
