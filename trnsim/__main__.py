"""``python -m trnsim``: the ``trnsim`` command."""

import sys

from .cli import command

sys.exit(command())
