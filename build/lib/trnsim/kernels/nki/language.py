"""``nki.language`` as trnsim provides it."""
from .. import language as _lang
globals().update({n: getattr(_lang, n) for n in dir(_lang) if not n.startswith("__")})
