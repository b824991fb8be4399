"""``nki.isa`` as trnsim provides it."""
from ..isa_api import *  # noqa: F401,F403
from ..isa_api import tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine  # noqa: F401
from ...isa import INSTRUCTIONS as _I
from .. import isa_api as _api
globals().update({n: getattr(_api, n) for n in _I})
globals().update({n: getattr(_api, n) for n in dir(_api) if not n.startswith("_")})
