"""``nki.compiler``: compiler directives and explicit allocation, as for legacy kernels (``neuronxcc.nki.compiler``).

trnsim runs kernels directly, so directives are accepted and change nothing; see ``trnsim.kernels.v1.compiler``.
"""

from ..v1.compiler import *  # noqa: F401,F403
from ..v1.compiler import __all__  # noqa: F401
