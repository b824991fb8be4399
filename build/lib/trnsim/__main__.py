"""``python -m trnsim``: the ``trnsim`` command."""

import sys

from .cli import main

sys.exit(main())
