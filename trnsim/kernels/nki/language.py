"""``nki.language`` as trnsim provides it."""
from .. import language as _lang
globals().update({n: getattr(_lang, n) for n in dir(_lang) if not n.startswith("__")})
range = _lang.affine_range          # ``nl.range(n)``: a loop over n iterations, as ``nl.affine_range`` (nki-library)
tensor = _lang.NkiTensor            # ``nl.tensor``: the tensor type (annotations)
