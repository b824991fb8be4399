"""``python -m benchmarks.microbench [--write FILE]``: the microbenchmark table (document vs trnsim)."""

import argparse
import sys

from . import all_claims, table

p = argparse.ArgumentParser(prog="python -m benchmarks.microbench")
p.add_argument("--write", metavar="FILE", help="also write the Markdown table to FILE")
a = p.parse_args()
claims = all_claims()
t = table(claims)
print(t)
bad = sum(not c.ok for c in claims)
print(f"\n{len(claims) - bad} of {len(claims)} claims within tolerance")
if a.write:
    from trnsim.fileio import atomic_write
    with atomic_write(a.write) as f:
        f.write(t + "\n")
sys.exit(0)
