"""Check of nki-library MX MoE mismatches (issue 31): is an all-NaN output only the kernel reading SBUF it never
wrote?

Several MX (float4_e2m1fn_x4 / float8_e4m3fn_x4) MoE token-generation kernels quantize (``quantize_mx``) or contract
(``nc_matmul_mx``) partitions of an SBUF tile that no instruction wrote: the padding of the last intermediate tile
up to a multiple of 32 partitions (``gate_up_projection_mx.py:285`` in ``moe_tkg``'s all-expert path, I = 96, 1440,
2880 ...); the kernels' comments call that padding zero.  trnsim's never-written memory reads as its sentinel (NaN
for floats, as AWS's CPU simulator fills new tensors), NaN x 0 is NaN and the whole output is NaN; on a chip those
partitions hold whatever the SBUF held before.  ``TRNSIM_STRICT_UNINIT=1`` names the line of the first such read.

This tool re-runs the given nki-library tests (the same arguments as ``tools/run_nki_library.py``) with trnsim's
never-written memory reading as 0 instead of the sentinel -- a stand-in for finite stale contents -- in every
process of the run (a ``sitecustomize`` module in a temporary directory put first on ``PYTHONPATH``; trnsim itself
is not changed).  If a test that mismatched with all-NaN outputs passes here, its MX arithmetic in trnsim agrees
with the test's golden within the test's tolerance, and the mismatch comes only from the kernel's read of
never-written memory::

    python tools/check_mx_padding_fill.py --platform trn3 -j 1 --out /tmp/fill <test node ids>

The report it writes is the runner's own (``--out``); the tool prints the runner's summary line.
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trnsim.fileio import atomic_write  # noqa: E402

_SITE = '''\
# written by tools/check_mx_padding_fill.py: never-written memory reads as 0 instead of trnsim's sentinel
from trnsim.memory import dtypes as _dtypes
for _dt in _dtypes.DTYPES.values():
    _dt.sentinel = False if _dt.is_bool else 0
'''


def main(argv):
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_nki_library.py")
    with tempfile.TemporaryDirectory(prefix="trnsim-zero-fill-") as d:
        with atomic_write(os.path.join(d, "sitecustomize.py")) as f:
            f.write(_SITE)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([d] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        return subprocess.call([sys.executable, runner] + list(argv), env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
