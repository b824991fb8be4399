"""``nki.language``'s helper objects: ``NKIObject`` (the base kernels derive configuration records from) and
``tile_size`` (the current target's tile limits).  Re-exported by :mod:`trnsim.kernels.language`."""

from __future__ import annotations

from .context import current


def _object_fields(cls):
    """The field names of an NKIObject subclass in declaration order: its dataclass fields when ``@dataclass``
    processed it, else the annotated class attributes along the MRO (base classes first)."""
    import dataclasses
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    names = []
    for klass in reversed(cls.__mro__):
        for n in klass.__dict__.get("__annotations__", {}):
            if n not in names:
                names.append(n)
    return names


class NKIObject:
    """Base of NKI's helper objects (kernels subclass it for configuration records, often with ``@dataclass``).

    Constructed with keyword arguments (any name, annotated or a plain class attribute) or positional ones (in
    field order); fields not given keep the class default (a ``default_factory`` is called), or stay unset.  Each
    subclass gets this constructor in its own namespace, so ``@dataclass`` (which does not replace an ``__init__``
    the class defines) keeps it: a dataclass with no annotations, or one constructed with some fields left out,
    works as it does under NKI."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" not in cls.__dict__:
            cls.__init__ = NKIObject.__init__

    def __init__(self, *args, **kwargs):
        cls = type(self)
        names = _object_fields(cls)
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} positional field(s) ({', '.join(names)}), "
                            f"got {len(args)}")
        for n, v in zip(names, args):
            if n in kwargs:
                raise TypeError(f"{cls.__name__}() got field {n!r} both by position and by keyword")
            kwargs[n] = v
        import dataclasses
        for n, f in (getattr(cls, "__dataclass_fields__", None) or {}).items():
            if n not in kwargs and f.default_factory is not dataclasses.MISSING:
                kwargs[n] = f.default_factory()
        for k, v in kwargs.items():
            object.__setattr__(self, k, v)
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()


class _SizeInt(int):
    """An int that may also be called: ``nl.tile_size.total_available_sbuf_size`` is used as a value by kernels
    (nki-library) and listed as a method in the API stubs, so both forms give the same number."""

    def __call__(self):
        return int(self)


class _TileSize(NKIObject):
    """Hardware tile limits of the current target (values: NKI's nl.tile_size reference)."""
    pmax = 128                  # partitions
    psum_fmax = 512             # fp32 elements of one PSUM bank per partition
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1

    def _target(self):
        from ..targets import get_target
        try:
            return current().core.target
        except RuntimeError:
            return get_target()

    @property
    def psum_num_banks(self):
        return _SizeInt(self._target().psum_banks)

    @property
    def sbuf_size_bytes(self):
        return _SizeInt(self._target().sbuf_partition_bytes)

    @property
    def sbuf_fmax(self):
        return _SizeInt(self._target().sbuf_partition_bytes // 4)

    @property
    def sbuf_fmax_bytes(self):
        return _SizeInt(self._target().sbuf_partition_bytes)

    @property
    def total_available_sbuf_size(self):
        # bytes per partition; the compiler's reserved bytes are not published, so the whole partition (i13c note)
        return _SizeInt(self._target().sbuf_partition_bytes)


tile_size = _TileSize()
