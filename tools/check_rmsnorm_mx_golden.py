"""Check of nki-library rmsnorm_mx_quantize_tkg goldens on trn3 (issue 13): is the ``out_scale`` mismatch trnsim's
or the test's?

Cases: every ``test_rmsnorm_mx_quantize_tkg.py::TestRmsNormQuantizeMxTKGKernel::test_rmsnorm_mx_quantize_tkg*`` test.
Run them with ``tools/run_nki_library.py --platform trn3 --keep-tmp --keep-outputs ...`` and pass the kept run directory:

    .venv/bin/python tools/check_rmsnorm_mx_golden.py /tmp/trnsim-nkilib-XXXX

Two things are checked for each case, from the run's own files (inputs ``inp-*.bin``, trnsim's outputs and the
harness's saved ``golden-out_scale.bin``):

1. Rows never written.  The test's wrapper copies only partitions 32q..32q+3 (q = 0..3) of the SBUF scale tile into
   a fresh ``nl.ndarray(..., buffer=nl.shared_hbm)`` output; the other 112 partitions of that HBM tensor are never
   written by the kernel, yet the golden expects 0 there.  Nothing in the NKI documentation gives a kernel-allocated
   tensor an initial value (``nl.ndarray`` is "similar to numpy.ndarray"; ``nl.zeros`` is the zero-filled one), and
   AWS's own CPU simulator guide (aws-neuron-sdk ``nki/guides/nki_simulator.rst``, "Uninitialized Memory
   Detection") says the simulator fills every newly allocated tensor with a sentinel (NaN for floats, 4 for
   integers) and that on hardware uninitialized memory holds arbitrary leftover values.  trnsim's fresh memory reads
   as that sentinel (4).  The tool prints which elements differ from the golden and whether all of them lie in
   the never-written rows.
2. The written rows.  The scale exponents trnsim wrote are compared with (a) the exponents of trnsim's own fp16
   ``out`` (the quantize_mx rule: max float32 exponent over each 8-partition x 4-element block, minus 8 for
   float8_e4m3fn), (b) a float64 reference of the kernel's chain that keeps the kernel's one intermediate fp16
   rounding: ``x * gamma`` is stored into the fp16 input tile (``nisa.tensor_tensor(input_tile_sb, ...)``) before
   the multiply by 1/rms, while the golden rounds only once, after the whole fp32 product.  Exponents that differ
   by one from the golden are counted, with the harness's rule for them (|a - b| <= atol + rtol * max|golden|).
"""

import glob
import os
import re
import sys

import numpy as np

CASE = re.compile(r"out-test_rmsnorm_mx_quantize_tkg(_residual)?_(\d+)_(\d+)_(\d+)_(None|\d+)_float16_float16_")
RTOL, ATOL = 1e-2, 1e-3          # the test's tolerances
F8_EMAX = 8                      # float8_e4m3fn: largest exponent of a normal value (448 = 1.75 * 2**8)


def _scales(o, H0, T, n512):
    """quantize_mx's scale exponents of an fp16 [H0, T, H1] tile in the kernel's swizzled order."""
    q = o.reshape(H0, T, 4, n512).transpose(0, 3, 1, 2).reshape(H0, -1)
    e = ((q.astype(np.float32).view(np.uint32) >> 23) & 255).astype(np.int32)
    return (e.reshape(H0 // 8, 8, -1, 4).max(axis=(1, 3)) - F8_EMAX).reshape(H0 // 8, n512, T)


def check(d, residual, B, S, H, HA):
    T, H0 = B * S, 128
    H1, n512 = H // H0, H // 512
    inp = np.fromfile(f"{d}/inp-inp-000.bin", dtype=np.float16).reshape(B, S, H).astype(np.float64).reshape(T, H)
    gam = np.fromfile(f"{d}/inp-gamma-000.bin", dtype=np.float16).reshape(1, H).astype(np.float64)
    r = f"{d}/infer_result"
    out = np.fromfile(f"{r}/out.bin", dtype=np.float16).reshape(H0, T, H1)
    sc = np.fromfile(f"{r}/out_scale.bin", dtype=np.uint8).reshape(H0, n512, T).astype(np.int32)
    if not os.path.exists(f"{r}/golden-out_scale.bin"):
        print("   out_scale passed (no golden saved): nothing to check")
        return
    gold = np.fromfile(f"{r}/golden-out_scale.bin", dtype=np.float32).reshape(H0, n512, T)
    written = [32 * q + i for q in range(4) for i in range(4)]
    unwritten = [p for p in range(H0) if p not in written]
    bad = gold.astype(np.int32) != sc
    rows = sorted(set(np.nonzero(bad)[0].tolist()))
    print(f"   out_scale elements differing from the golden: {int(bad.sum())}; in never-written rows: "
          f"{int(bad[unwritten].sum())} (trnsim values there {np.unique(sc[unwritten]).tolist()}, golden "
          f"{np.unique(gold[unwritten]).tolist()}); in written rows: {int(bad[written].sum())}"
          + ("" if set(rows) <= set(unwritten) else f" (rows {sorted(set(rows) & set(written))})"))
    if residual:
        res = np.fromfile(f"{d}/inp-residual-000.bin", dtype=np.float16).reshape(T, H).astype(np.float64)
        x = (inp + res).astype(np.float16).astype(np.float64)     # the kernel's fp16 residual-add tile
    else:
        x = inp
    xg = (x * gam).astype(np.float16).astype(np.float64)          # stored into the fp16 input tile
    rs = (1.0 / np.sqrt((x * x).sum(-1, keepdims=True) / HA + 1e-6)).astype(np.float32).astype(np.float64)
    kern = (xg * rs).astype(np.float32).astype(np.float16).reshape(T, H1, H0).transpose(2, 0, 1)
    s_w = sc[written]
    print(f"   written rows: trnsim scales == scales of trnsim's own out: {np.array_equal(_scales(out, H0, T, n512), s_w)}; "
          f"== scales of the float64 kernel-chain reference (fp16 x*gamma): "
          f"{np.array_equal(_scales(kern, H0, T, n512), s_w)} "
          f"(elements of out differing from that reference: {int((kern != out).sum())} of {out.size}, by at most "
          f"{float(np.abs(kern.astype(np.float32) - out.astype(np.float32)).max()):.3g})")
    g_w = gold[written].astype(np.int32)
    diff = np.abs(s_w - g_w)
    tol = ATOL + RTOL * np.abs(gold).max()
    print(f"   written rows vs golden: {int((diff != 0).sum())} exponents differ, by at most {int(diff.max())} "
          f"(harness tolerance atol + rtol*max|golden| = {tol:.3g}: {'within' if diff.max() <= tol else 'OUTSIDE'})")


def main(run_dir):
    dirs = [d for d in sorted(glob.glob(run_dir + "/out/out-test_rmsnorm_mx_quantize_tkg*")) if CASE.search(d)]
    if not dirs:
        print(f"no rmsnorm_mx_quantize_tkg case in {run_dir}/out (the runner keeps each test\'s inputs and outputs only with --keep-tmp --keep-outputs)")
        return 1
    for d in dirs:
        m = CASE.search(d)
        B, S, H = (int(m.group(i)) for i in (2, 3, 4))
        HA = H if m.group(5) == "None" else int(m.group(5))
        print(f"== {os.path.basename(d)}")
        check(d, bool(m.group(1)), B, S, H, HA)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
