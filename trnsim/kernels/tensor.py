"""``NkiTensor``: trnsim's tensor view as NKI kernels see it."""

from __future__ import annotations

import numpy as np

from .. import isa as _isa
from ..isa.errors import caller_location
from ..memory import Tensor
from .context import current

__all__ = ["NkiTensor"]


class NkiTensor(Tensor):
    """An NKI tensor: a view of a buffer in HBM, SBUF or PSUM (see :class:`trnsim.memory.Tensor`)."""

    __slots__ = ()

    @property
    def base_tensor(self):
        """The tensor as allocated: the whole buffer this view reads, in the dtype it was allocated with.

        No NKI reference page documents this attribute, but the kernels AWS ships use it (nki-library d2ad3a5,
        ``moe_tkg`` and ``mlp_tkg`` MX projections: ``w.base_tensor`` of an MX-x4 kernel argument is DMAed into
        an SBUF tile of ``base_tensor.dtype``, which is then ``.view(w.dtype)``).  trnsim reads it as NumPy's
        ``ndarray.base``: for a kernel argument or any whole allocation it is the same tensor; for a slice or a
        dtype view (``view``/``reinterpret_cast``) it is the allocation the view was taken from."""
        return type(self).whole(self.buf)

    def _index(self, key):
        """NumPy's indexing (:meth:`trnsim.memory.Tensor.__getitem__`, whose general path this is), except that an
        integer index on the partition dimension (dim 0) of an SBUF/PSUM tile with free dimensions keeps that
        dimension with size 1: ``t[k, :]`` of a ``[P, F]`` tile is the ``[1, F]`` tile on partition ``k``.  NKI's on-chip tensors keep their
        partition dimension at dim 0 (awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/
        nki.language.NkiTensor.html, "Partition dimension": "On-chip tensors (SBUF, PSUM) have a partition dimension
        at dim 0 that maps to the hardware's parallel partitions"), and AWS's kernels use
        such an index as a one-partition operand (nki-library d2ad3a5, moe_tkg/all_expert_mx_impl.py:398
        ``tensor_copy(dst=t[0, :], src=<[1, T] tile>)``, :582 ``nc_transpose(data=t[0, nl.ds(...)])``), so every
        instruction reads it as 1 partition of the remaining dimensions.  HBM tensors, and an index on any other
        dimension, keep NumPy's rule, the dimension removed ("Tensor Indexing on NKI", awsdocs-neuron.readthedocs-
        hosted.com/en/latest/nki/about/indexing-overview.html: ``x[1]`` of a ``(2, 2, 2)`` HBM tensor has shape
        ``[2, 2]``); an index out of range is refused as before.  An index that selects one element (``t[k, j]``)
        stays 0-d, and a 1-D tile's ``t[k]`` too."""
        v = Tensor._index(self, key)
        k0 = key[0] if type(key) is tuple and key else key
        if type(k0) is not int and not (isinstance(k0, np.integer) and not isinstance(k0, bool)):
            return v
        if len(v.shape) == 0 or not self.on_chip or len(self.shape) < 2:
            return v
        # dim 0 was removed by the index: put it back, one partition at the same element offset
        return v._view(v.offset, (1,) + tuple(v.shape), (self.strides[0],) + tuple(v.strides))

    def __setitem__(self, key, value):
        dst = self[key]
        loc = caller_location()
        core = current().core
        if isinstance(value, Tensor):
            if dst.on_chip and value.on_chip:
                _isa.tensor_copy(core, loc, dst, value)
            else:
                _isa.dma_copy(core, loc, dst, value)
        else:
            _isa.memset(core, loc, dst, value)
