"""Memory spaces, buffers, dtypes and strided tensor views."""

from .dtypes import DTYPES, DType, UnsupportedDTypeError, dtype_of, round_to
from .space import HBM, ON_CHIP, PSUM, SBUF, Buffer, MemorySpace, OutOfMemory, next_buffer_id, skip_buffer_ids
from .tensor import DynSlice, IndexOutOfBounds, Tensor, ViewError

__all__ = ["DTYPES", "DType", "UnsupportedDTypeError", "dtype_of", "round_to", "HBM", "ON_CHIP", "PSUM", "SBUF",
           "Buffer", "MemorySpace", "OutOfMemory", "next_buffer_id", "skip_buffer_ids", "DynSlice", "IndexOutOfBounds",
           "Tensor", "ViewError"]
