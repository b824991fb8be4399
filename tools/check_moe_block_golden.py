"""Check of one nki-library moe_block_tkg golden (issue 13): is the "numeric mismatch" trnsim's or the golden's?

Cases: test_moe_block_tkg.py::TestMoEBlockTkgKernel::test_moe_block_kernel_model[MODEL_WIP_GENERALITY_ln-2_ae-<0|1>_ba-<B>_
sq-<S>_hi-<H>_ha-<HA>_im-<I>_ge-<E>_le-<EL>_tk-4_rf-1_af-3_sm-1_wd-bfloat16_id-bfloat16_se-0_bi-1_cl-1_ra-0_np-0_sr-0_
rd-bfloat16] (seen with hi-3072 ha-2880 ge-128 and im-360 le-16 ba-64/512 sq-4, im-1440 le-4 ba-2048 sq-1); the
sizes are read from each case's directory name.  Run it with ``tools/run_nki_library.py -k ... --keep-tmp --keep-outputs`` and pass the kept run directory:

    PYTHONPATH=tests/support/nki_library/standins .venv/bin/python tools/check_moe_block_golden.py /tmp/trnsim-nkilib-XXXX

It re-runs the snapshot's own torch reference (imported from the snapshot, not copied) twice: as the harness does
(every input converted to float32, so the RMSNorm output reaches the router in float32) and with the RMSNorm output
rounded to bfloat16, as the kernel stores it (``rmsnorm_out`` has ``inp.dtype`` = bf16, ``router_mm_dtype`` = bf16),
and compares trnsim's output with both by the harness's rule (|a - b| <= atol + rtol * max|golden|).  It also prints
the float64 router logits of the token whose top-4 differs, on the kernel's bf16 operands and on the golden's fp32
operands.
"""

import glob
import os
import re
import sys

import ml_dtypes
import numpy as np
import torch

import nki_cpu_simulator  # noqa: F401  (gives the snapshot's `import nki` the simulator)

SNAPSHOT_SRC = os.path.join(os.environ.get("NKI_LIBRARY_PATH", ""), "src")    # a checkout of aws-neuron/nki-library
# the test id's sizes: ba x sq tokens, hidden hi (actual ha), intermediate im, ge experts of which le are local
CASE = re.compile(r"ae_([01])_ba_(\d+)_sq_(\d+)_hi_(\d+)_ha_(\d+)_im_(\d+)_ge_(\d+)_le_(\d+)_tk_4_rf_1_af_3_sm_1_"
                  r"wd_bfloat16_id_bfloat16_se_0_bi_1_cl_1_ra_0_np_0_sr_0_rd_bfloat16")
RTOL, ATOL = 1e-2, 1e-5                            # the test's tolerances for a bf16 weight dtype


def main(run_dir):
    """Check every case of this family (any ba and sq) found in the run directory."""
    dirs = [d for d in sorted(glob.glob(run_dir + "/out/out-*")) if CASE.search(d)]
    if not dirs:
        print(f"no moe_block_tkg case of this family in {run_dir}/out (the runner keeps each test\'s inputs and outputs only with --keep-tmp --keep-outputs)")
        return 1
    for d in dirs:
        ae, ba, sq, H, HA, I, E, EL = map(int, CASE.search(d).groups())
        print(f"== {d.rsplit('/', 1)[1]} (ba {ba} x sq {sq} = {ba * sq} tokens)")
        if not os.path.isfile(f"{d}/infer_result/golden-out.bin"):
            print("no golden kept in this case's directory (the harness writes it only for a failed comparison)")
            continue
        check(d, ba, sq, H, HA, I, E, EL, bool(ae))
    return 0


def check(d, ba, sq, H, HA, I, E, EL, all_expert=True):
    T = ba * sq
    sys.path.insert(0, SNAPSHOT_SRC)
    import nkilib_src.nkilib.core.moe_block.moe_block_tkg_torch as M
    from nkilib_src.nkilib.core.utils.common_types import ActFnType, ExpertAffinityScaleMode, RouterActFnType

    bf = ml_dtypes.bfloat16

    def ld(n, s):
        return torch.tensor(np.fromfile(f"{d}/inp-{n}-000.bin", dtype=bf).astype(np.float32).reshape(s))
    # rank_id is an input of the all-expert variant (ae-1) only; the selective one (ae-0) gets None
    rank = (np.fromfile(f"{d}/inp-rank_id-000.bin", dtype=np.uint32).astype(np.int32).reshape(1, 1)
            if all_expert else None)
    kw = dict(inp=ld("inp", (ba, sq, H)), gamma=ld("gamma", (1, H)), router_weights=ld("router_weights", (H, E)),
              expert_gate_up_weights=ld("expert_gate_up_weights", (EL, H, 2, I)),
              expert_down_weights=ld("expert_down_weights", (EL, I, H)),
              router_bias=ld("router_bias", (1, E)), expert_gate_up_bias=ld("expert_gate_up_bias", (EL, 2, I)),
              expert_down_bias=ld("expert_down_bias", (EL, H)), top_k=4, router_act_fn=RouterActFnType.SOFTMAX,
              router_pre_norm=False, norm_topk_prob=False,
              expert_affinities_scaling_mode=ExpertAffinityScaleMode.POST_SCALE, hidden_act_fn=ActFnType.Swish,
              gate_clamp_upper_limit=7.0, gate_clamp_lower_limit=None, up_clamp_upper_limit=8.0,
              up_clamp_lower_limit=-6.0, router_mm_dtype=None, hidden_actual=HA, is_all_expert=all_expert,
              rank_id=torch.tensor(rank) if all_expert else None)
    gold = np.fromfile(f"{d}/infer_result/golden-out.bin", dtype=np.float32).reshape(T, H)
    out = np.fromfile(f"{d}/infer_result/out.bin", dtype=bf).astype(np.float32).reshape(T, H)

    def report(name, ref):
        diff = np.abs(ref.astype(np.float64) - out)
        brange = np.abs(ref).max()
        bad = diff > ATOL + RTOL * brange
        print(f"{name}: max |ref - trnsim| = {diff.max():.4g} at {tuple(int(i) for i in np.unravel_index(diff.argmax(), diff.shape))}, "
              f"max|ref| = {brange:.4g}, relative {100 * diff.max() / brange:.3f}% (tolerance {100 * RTOL:g}%), "
              f"elements outside: {int(bad.sum())} in rows {np.unique(np.where(bad)[0]).tolist()}")

    r1 = M.moe_block_tkg_torch_ref(**kw)["out"].numpy()
    print("harness golden reproduced exactly:", bool(np.array_equal(r1.astype(np.float32), gold)))
    report("golden (fp32 router input)", gold)
    orig = M.rms_norm_torch_ref
    M.rms_norm_torch_ref = lambda *a, **k: orig(*a, **k).to(torch.bfloat16).to(torch.float32)
    try:
        r2 = M.moe_block_tkg_torch_ref(**kw)["out"].numpy()
    finally:
        M.rms_norm_torch_ref = orig
    report("reference with the kernel's bf16 RMSNorm output", r2)

    # float64 router logits of each token on both operand precisions; tokens whose top-4 differ
    x = kw["inp"].reshape(T, H).double()
    rms = torch.sqrt((x * x).sum(-1, keepdim=True) / HA + 1e-6)
    norm = x / rms * kw["gamma"].double()
    w, b = kw["router_weights"].double(), kw["router_bias"].double()
    l32 = norm.float().double() @ w + b
    l16 = norm.float().to(torch.bfloat16).double() @ w + b
    top32, top16 = torch.argsort(-l32, -1)[:, :4], torch.argsort(-l16, -1)[:, :4]
    for t in range(T):
        if set(top32[t].tolist()) != set(top16[t].tolist()):
            e = sorted(set(top32[t].tolist()) ^ set(top16[t].tolist()))
            print(f"token {t}: top-4 on fp32 input {sorted(top32[t].tolist())}, on bf16 input "
                  f"{sorted(top16[t].tolist())}; float64 logits of experts {e}: fp32 input "
                  f"{[round(l32[t, i].item(), 8) for i in e]}, bf16 input {[round(l16[t, i].item(), 8) for i in e]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
