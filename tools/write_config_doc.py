"""Write docs/configuration.md, the table of every environment switch, from trnsim/config.py.

Usage: ``python tools/write_config_doc.py [PATH]`` (default: docs/configuration.md of this checkout).
tests/test_config.py fails while the file and the module disagree."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from trnsim import config  # noqa: E402
from trnsim.fileio import atomic_write  # noqa: E402


def main(argv):
    path = argv[1] if len(argv) > 1 else os.path.join(ROOT, "docs", "configuration.md")
    with atomic_write(path, "w") as f:
        f.write(config.markdown_table())
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
