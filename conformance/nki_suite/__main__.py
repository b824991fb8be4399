"""``python -m conformance.nki_suite [PATTERN]``: run the NKI suite and print the groups that do not pass."""

import sys
import time

from . import run_nki

t = time.perf_counter()
recs = run_nki(sys.argv[1] if len(sys.argv) > 1 else None)
tot = {}
for r in recs:
    tot[r["status"]] = tot.get(r["status"], 0) + 1
    if r["status"] in ("mismatch", "error"):
        print(f"{r['name']} {r['dtype']} {r['mode']} {r['status']}: {r['detail']}")
print(f"{len(recs)} groups, {len({r['name'] for r in recs})} names, {sum(r['samples'] for r in recs)} cases, "
      f"{tot}, {time.perf_counter() - t:.1f}s")
