"""Check of nki-library attention_block_tkg goldens with STATIC fp8 quantization (issue 13): trnsim's mismatch or the
golden's?

Cases: ``test_attention_block_tkg.py::TestRangeAttnBlk::test_attn_blk_model[MODEL_WIP_GENERALITY_...]`` whose config
has ``quantization_type=STATIC`` and ``kv_quant=True`` (seen failing: ``8-1-128-7168-None-10240-...`` on V_cache and
``32-1-128-7168-None-1024-...`` on X_out and V_cache).  Run them with ``tools/run_nki_library.py -k ... --keep-tmp --keep-outputs``
and pass the kept run directory:

    .venv/bin/python tools/check_attn_block_fp8_golden.py /tmp/trnsim-nkilib-XXXX

What the kernel asks for (read in the snapshot): with STATIC quantization the QKV projection
(``core/qkv/qkv_tkg.py``, ``nisa.tensor_scalar`` into ``hidden_sb_quantized``, dtype ``qkv_w.dtype`` =
float8_e4m3) and the output projection cast their scaled, clipped input to float8_e4m3 before the matmul, and
``_quantize_to_fp8`` (``experimental/transformer/attention_block_tkg.py``) casts the new K and V to float8_e4m3
before attention uses them.  The golden (the snapshot's torch reference, ``qkv_tkg_torch_ref``,
``output_projection_tkg_torch_ref``, ``AttentionBlockTkgTorchRef._quantize_kv_to_fp8``) clips to +-240 at each of
those three places but never rounds to float8: it computes on the unrounded float32 values.

The tool regenerates the test's inputs with the test's own generator (and checks them byte for byte against the
run's ``inp-*.bin``), runs the snapshot's reference twice, as the harness does and with each of those three clips
followed by a round-to-nearest-even cast to float8_e4m3 (the only change), and a third time with that change and
the query trnsim computed fed to the reference's attention (``_with_kernel_q``), and validates trnsim's outputs of
the run (``infer_result/*.bin``) against all three with the test's own validator (cosine similarity >= 0.99 and the harness's
``maxAllClose`` rule with the test's rtol/atol/min_pass_rate).

``--audit <kept run dir> <test id>...`` runs the kernel of each given MODEL_WIP test id again in this process and
checks trnsim instruction by instruction (``audit``): each matmul, exp/copy activation and cast to float8 against a
float64 evaluation of that instruction on the operands it read.
"""

import glob
import os
import re
import sys

import numpy as np

SNAP = os.environ.get("NKI_LIBRARY_PATH", "")        # a checkout of aws-neuron/nki-library
HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(HERE, "..", "tests", "support", "nki_library")
CASE = re.compile(r"out-test_attn_blk_model_(MODEL_WIP_[A-Z_]+?)_(\d.*)_[0-9a-f]{12}$")
FP8_MAX = 240.0                 # the float8_e4m3 clip the kernel and the reference both use
# float64 forms of the operators the audit re-evaluates (inputs already converted to float32 as the engines do)
_UNARY = {"exp": np.exp, "copy": lambda x: x, "square": np.square, "rsqrt": lambda x: 1.0 / np.sqrt(x)}
_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
           "minimum": np.minimum}


def _setup(run_dir):
    sys.path[:0] = [os.path.join(run_dir, "standins"), SUPPORT, os.path.join(SNAP, "src"), SNAP]
    import nki_cpu_simulator  # noqa: F401  (the snapshot's `import nki` gets the simulator)
    import trnsim_nkilib_plugin  # noqa: F401  (registers the two harness modules absent from the snapshot)
    from test.utils.simulation_setup import setup_simulation_mode
    setup_simulation_mode()
    import test.integration.nkilib.experimental.transformer.test_attention_block_tkg as T
    return T


class _Fp8AfterClip:
    """Round to float8_e4m3 (RNE, via ml_dtypes) right after a clip/clamp to exactly [-240, 240]: where the kernel
    casts to float8.  Installed on ``torch.clamp`` and ``torch.Tensor.clip`` for the second reference run only."""

    def __init__(self):
        import torch
        self.torch = torch
        self.hits = 0

    def _round(self, t, lo, hi):
        import ml_dtypes
        if lo == -FP8_MAX and hi == FP8_MAX:
            self.hits += 1
            a = t.detach().to(self.torch.float32).numpy()
            return self.torch.from_numpy(a.astype(ml_dtypes.float8_e4m3).astype(np.float32)).to(t.dtype)
        return t

    def __enter__(self):
        torch = self.torch
        self.clamp, self.clip = torch.clamp, torch.Tensor.clip
        clamp, clip = self.clamp, self.clip

        def clamp2(t, min=None, max=None, **k):
            return self._round(clamp(t, min, max, **k), min, max)

        def clip2(t, min=None, max=None, **k):
            return self._round(clip(t, min, max, **k), min, max)
        torch.clamp, torch.Tensor.clip = clamp2, clip2
        return self

    def __exit__(self, *exc):
        self.torch.clamp, self.torch.Tensor.clip = self.clamp, self.clip


def main(run_dir):
    dirs = [d for d in sorted(glob.glob(run_dir + "/out/out-test_attn_blk_model_*")) if CASE.search(d)]
    if not dirs:
        print(f"no attention_block_tkg model case in {run_dir}/out (the runner keeps each test\'s inputs and outputs only with --keep-tmp --keep-outputs)")
        return 1
    T = _setup(run_dir)
    cls = T.TestRangeAttnBlk
    ids = [i.replace("-", "_") for i in cls._MODEL_IDS]
    for d in dirs:
        m = CASE.search(d)
        key = m.group(1) + "_" + m.group(2)
        hits = [k for k, i in enumerate(ids) if i.startswith(key)]
        if len(hits) != 1:
            print(f"== {os.path.basename(d)}: cannot tell its config ({len(hits)} candidates), skipped")
            continue
        cfg = cls._MODEL_PARAMS[hits[0]]
        cfg = getattr(cfg, "values", [cfg])[0]
        print(f"== {cls._MODEL_IDS[hits[0]]}")
        check(T, d, cfg)
    return 0


def check(T, d, cfg):
    from nkilib_src.nkilib.core.utils.common_types import QuantizationType
    if cfg.quantization_type != QuantizationType.STATIC or not cfg.kv_quant:
        print(f"   not a STATIC + kv_quant case ({cfg.quantization_type}, kv_quant={cfg.kv_quant}): nothing to check")
        return
    ki = T.generate_kernel_inputs(cfg)
    same = True
    for k, v in ki.items():
        f = f"{d}/inp-{k + ('.must_alias_input' if k in ('K_cache', 'V_cache') and cfg.update_cache else '')}-000.bin"
        if isinstance(v, np.ndarray) and os.path.exists(f):
            same &= np.fromfile(f, dtype=np.uint8).tobytes() == np.ascontiguousarray(v).tobytes()
    print(f"   regenerated inputs equal the run's inp-*.bin: {same}")
    rtol, atol = T._get_tolerances(cfg.kv_quant, cfg.quantization_type)
    gold = T._golden_ref_via_torch(ki, cfg.lnc)
    with _Fp8AfterClip() as r:
        fixed = T._golden_ref_via_torch(ki, cfg.lnc)
    print(f"   float8 roundings added to the reference: {r.hits} (QKV input, new K and V, output-projection input)")
    refs = [("golden (no float8 rounding)", gold), ("reference with the kernel's float8 casts", fixed)]
    kq = _with_kernel_q(T, cfg, ki)
    if kq is not None:
        refs.append(("reference with the float8 casts and trnsim's own Q (see --audit)", kq))
    names = {"X_out": "X_out", "K_cache_updated": "K_cache", "V_cache_updated": "V_cache"}
    for gname, oname in names.items():
        f = f"{d}/infer_result/{oname}.bin"
        if gname not in gold or not os.path.exists(f):
            continue
        out = np.fromfile(f, dtype=gold[gname].dtype).reshape(gold[gname].shape)
        for label, ref in refs:
            v = T._make_cosine_validation({oname: ref[gname]}, rtol, atol, cfg.kv_quant)[oname]
            ok = v.validator(None).validate(out)
            a, b = out.astype(np.float32), ref[gname].astype(np.float32)
            diff = np.abs(a - b)
            bad = diff > atol + rtol * np.abs(b).max()
            cos = float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
            print(f"   {oname} vs {label}: {'PASS' if ok else 'FAIL'}; cosine {cos:.4f} (min 0.99), "
                  f"max |trnsim - ref| = {diff.max():.4g}, "
                  f"elements outside atol + rtol*max|ref| = {int(bad.sum())} of {b.size}")


def _with_kernel_q(T, cfg, ki):
    """The reference with the float8 casts, its attention fed with the query trnsim computed (the moving operand of
    the kernel's first attention matmul, Q . K, in core/attention/attention_tkg.py), matched to the reference's query
    per batch by direction and brought to its scale (the kernel folds the softmax scale elsewhere).  The kernel
    computes Q through bf16 tiles (QKV output, QK RMSNorm, RoPE) where the reference stays in float32; ``--audit``
    checks each of those instructions.  A moving operand of d_head partitions holds one query per column (several
    tokens per step).  None when the query cannot be matched."""
    import inspect
    import nki
    import nki.isa as nisa
    import torch
    import nkilib_src.nkilib.experimental.transformer.attention_block_tkg_torch as R
    fn = R.attention_tkg_torch_ref
    seen = {}

    class Hook:                     # stands for attention_tkg_torch_ref[lnc](**kwargs): records or replaces q
        sub = None

        def __getitem__(self, lnc):
            def call(**k):
                seen["q"] = k["q"].detach().clone()
                if Hook.sub is not None:
                    k["q"] = Hook.sub
                return fn[lnc](**k)
            return call
    R.attention_tkg_torch_ref = Hook()
    orig = nisa.nc_matmul
    qs, first = [], []

    def mm(*a, **k):
        f = inspect.stack()[1]
        r = orig(*a, **k)
        if f.filename.endswith("core/attention/attention_tkg.py") and "moving" in k:
            first.append(first[0] if first else f.lineno)
            if f.lineno == first[0]:
                m = k["moving"].np.astype(np.float64)
                qs.extend(m.reshape(m.shape[0], -1).T.copy() if m.shape[0] == cfg.d_head else [m.ravel().copy()])
        return r
    try:
        with _Fp8AfterClip():
            T._golden_ref_via_torch(ki, cfg.lnc)
        nisa.nc_matmul = mm
        os.environ["NKI_NC_VERSION"] = "gen3"
        nki.cpu_simulate(nki.jit(T.attention_block_tkg_kernel_test_wrapper))[cfg.lnc](
            **{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in ki.items()})
        nisa.nc_matmul = orig
        q = seen["q"]
        shape = tuple(q.shape)
        dh = cfg.d_head
        axis = shape.index(dh)
        qr = np.moveaxis(q.double().numpy(), axis, -1)
        flat = qr.reshape(-1, dh)
        sub = np.full_like(flat, np.nan)
        for v in qs:
            if v.size != dh:
                return None
            c = flat @ v / (np.linalg.norm(flat, axis=1) * np.linalg.norm(v) + 1e-30)
            b = int(np.argmax(np.abs(c)))
            sub[b] = v * (np.dot(flat[b], flat[b]) / np.dot(v, flat[b]))
        if np.isnan(sub).any():
            return None
        Hook.sub = torch.from_numpy(np.moveaxis(sub.reshape(qr.shape), -1, axis).copy()).to(q.dtype)
        with _Fp8AfterClip():
            return T._golden_ref_via_torch(ki, cfg.lnc)
    finally:
        nisa.nc_matmul = orig
        R.attention_tkg_torch_ref = fn


def audit(T, cfg):
    """Run the kernel again in this process and check, call by call, that trnsim's result of each ``nc_matmul``,
    ``nc_transpose``, ``activation`` (copy, exp, square, rsqrt), ``tensor_tensor`` and ``tensor_scalar`` (add,
    subtract, multiply, maximum, minimum) and ``tensor_copy`` equals a float64 evaluation of that one instruction on
    the operands it read, rounded to the destination dtype with ml_dtypes (round to nearest even).  Prints, per
    kernel line, the calls checked and the worst difference."""
    import inspect
    import collections
    import nki
    import nki.isa as nisa
    os.environ["NKI_NC_VERSION"] = "gen3"
    stats = collections.defaultdict(lambda: [0, 0.0, 0])      # calls, worst relative error, differing elements

    def arr(t):
        return t.np.astype(np.float64)

    def npdt(t):
        """The NumPy (ml_dtypes) type of the tensor's declared NKI dtype (its storage may be wider)."""
        import ml_dtypes
        name = str(getattr(t.dtype, "name", t.dtype))
        return getattr(ml_dtypes, name, None) or np.dtype(name)

    def where():
        f = inspect.stack()[2]
        return f"{os.path.relpath(f.filename, SNAP)}:{f.lineno}"

    orig_mm, orig_act, orig_ts, orig_tc = nisa.nc_matmul, nisa.activation, nisa.tensor_scalar, nisa.tensor_copy
    orig_tt, orig_tr = nisa.tensor_tensor, nisa.nc_transpose

    def nc_matmul(*a, **k):
        names = ("dst", "stationary", "moving")
        args = dict(zip(names, a), **{n: k[n] for n in names if n in k})
        dst, s, m = args["dst"], args["stationary"], args["moving"]
        pre, sv, mv = arr(dst), arr(s), arr(m)
        r = orig_mm(*a, **k)
        plain = not any(k.get(f) for f in ("perf_mode", "is_transpose", "is_stationary_onezero", "is_moving_onezero"))
        ref = sv.reshape(sv.shape[0], -1).T @ mv.reshape(mv.shape[0], -1) if sv.shape[0] == mv.shape[0] else None
        if plain and ref is not None and ref.size == pre.size:
            got = arr(dst).reshape(ref.shape)
            acc = ref + np.nan_to_num(pre.reshape(ref.shape), nan=0.0)
            err = min(np.abs(got - c).max() for c in (ref, acc)) / max(np.abs(got).max(), 1e-30)
            st = stats[("nc_matmul", where())]
            st[0] += 1
            st[1] = max(st[1], err)
        return r

    def activation(*a, **k):
        args = dict(zip(("dst", "op", "data"), a), **k)
        op = getattr(args["op"], "__name__", str(args["op"]))
        dst, data = args["dst"], args["data"]
        x = arr(data)
        sc, bi = args.get("scale", 1.0), args.get("bias")
        r = orig_act(*a, **k)
        if op in _UNARY and not isinstance(sc, (list, tuple)):
            s = arr(sc) if hasattr(sc, "np") else np.float64(sc)
            y = (x.reshape(x.shape[0], -1).astype(np.float32) * np.float32(1) * s.astype(np.float32)).astype(np.float32)
            if bi is not None:
                y = (y + (arr(bi) if hasattr(bi, "np") else np.float64(bi)).astype(np.float32)).astype(np.float32)
            y = _UNARY[op](y.astype(np.float64))
            got = arr(dst).reshape(y.shape)
            ref = y.astype(np.float32).astype(npdt(dst)).astype(np.float64)
            st = stats[(f"activation({op})", where())]
            st[0] += 1
            st[2] += int((ref != got).sum())
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.abs(got - ref) / np.abs(ref)
            st[1] = max(st[1], float(np.nanmax(np.where(ref == got, 0.0, rel))))
        return r

    def _fp8(dst):
        return "float8" in str(npdt(dst))

    def tensor_copy(*a, **k):
        args = dict(zip(("dst", "src"), a), **k)
        dst, src = args["dst"], args["src"]
        x = arr(src)
        r = orig_tc(*a, **k)
        if x.size == dst.np.size:
            ref = x.astype(np.float32).astype(npdt(dst)).astype(np.float64).reshape(dst.np.shape)
            st = stats[(f"tensor_copy -> {npdt(dst).__name__ if hasattr(npdt(dst), '__name__') else npdt(dst)}",
                        where())]
            st[0] += 1
            st[2] += int((ref != arr(dst)).sum())
        return r

    def _operand(v):
        return (arr(v).astype(np.float32) if hasattr(v, "np") else np.float32(v))

    def tensor_scalar(*a, **k):
        args = dict(zip(("dst", "data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1"), a), **k)
        dst, data = args["dst"], args["data"]
        x = arr(data).astype(np.float32)
        x = x.reshape(x.shape[0], -1)
        ops = [(getattr(args.get(f"op{i}"), "__name__", None), args.get(f"operand{i}"), args.get(f"reverse{i}", False))
               for i in (0, 1)]
        vals = [(_operand(v) if v is not None else None) for _, v, _ in ops]
        r = orig_ts(*a, **k)
        if all(n in _BINARY or n is None for n, _, _ in ops) and ops[0][0] is not None:
            y = x
            for (n, _, rev), v in zip(ops, vals):
                if n is not None:
                    y = (_BINARY[n](v, y) if rev else _BINARY[n](y, v)).astype(np.float32)
            ref = y.astype(npdt(dst)).astype(np.float64).reshape(dst.np.shape)
            name = "tensor_scalar -> float8" if _fp8(dst) else f"tensor_scalar({ops[0][0]}, {ops[1][0]})"
            st = stats[(name, where())]
            st[0] += 1
            st[2] += int((ref != arr(dst)).sum())
        return r

    def nc_transpose(*a, **k):
        args = dict(zip(("dst", "data"), a), **k)
        dst, x = args["dst"], arr(args["data"])
        r = orig_tr(*a, **k)
        got = arr(dst)
        ref = x.reshape(x.shape[0], -1).T
        if ref.size == got.size:
            st = stats[("nc_transpose", where())]
            st[0] += 1
            st[2] += int((ref.reshape(got.shape) != got).sum())
        return r

    def tensor_tensor(*a, **k):
        args = dict(zip(("dst", "data1", "data2", "op"), a), **k)
        dst = args["dst"]
        x1, x2 = arr(args["data1"]).astype(np.float32), arr(args["data2"]).astype(np.float32)
        n = getattr(args["op"], "__name__", str(args["op"]))
        r = orig_tt(*a, **k)
        if n in _BINARY and x1.size == x2.size == dst.np.size:
            y = _BINARY[n](x1.reshape(dst.np.shape), x2.reshape(dst.np.shape)).astype(np.float32)
            ref = y.astype(npdt(dst)).astype(np.float64)
            st = stats[(f"tensor_tensor({n})", where())]
            st[0] += 1
            st[2] += int((ref != arr(dst)).sum())
        return r

    nisa.nc_matmul, nisa.activation, nisa.tensor_copy, nisa.tensor_scalar = (nc_matmul, activation, tensor_copy,
                                                                              tensor_scalar)
    nisa.tensor_tensor, nisa.nc_transpose = tensor_tensor, nc_transpose
    try:
        ki = T.generate_kernel_inputs(cfg)
        nki.cpu_simulate(nki.jit(T.attention_block_tkg_kernel_test_wrapper))[cfg.lnc](**ki)
    finally:
        nisa.nc_matmul, nisa.activation, nisa.tensor_copy, nisa.tensor_scalar = orig_mm, orig_act, orig_tc, orig_ts
        nisa.tensor_tensor, nisa.nc_transpose = orig_tt, orig_tr
    print("   instruction audit (trnsim vs a float64 evaluation of the same instruction on the operands it read):")
    for (name, loc), (n, err, bad) in sorted(stats.items(), key=lambda kv: kv[0][1]):
        what = f"worst relative error {err:.2g} (fp32 accumulation)" if name == "nc_matmul" else \
            f"elements differing from the rounded reference: {bad}" + (f" (worst relative difference {err:.2g})"
                                                                        if bad else "")
        print(f"     {loc} {name}: {n} calls, {what}")


if __name__ == "__main__":
    if "--audit" in sys.argv:
        sys.argv.remove("--audit")
        _T = _setup(sys.argv[1])
        for _id in (a for a in sys.argv[2:]):
            _c = _T.TestRangeAttnBlk._MODEL_PARAMS[list(_T.TestRangeAttnBlk._MODEL_IDS).index(_id)]
            print(f"== {_id}")
            audit(_T, getattr(_c, "values", [_c])[0])
        sys.exit(0)
    sys.exit(main(sys.argv[1]))
