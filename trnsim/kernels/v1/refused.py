"""Legacy names trnsim refuses, each with the reason: nothing published gives them a behaviour a kernel could rely
on, so running them would mean inventing one.  Each raises ``NotImplementedError`` saying why and what to do."""

from __future__ import annotations

__all__ = ["builtin_custom_op", "gemm_grid", "gemm_stationary_grid"]


def builtin_custom_op(function_name, lib_file_name, ulib_to_ucode_version, ulib_to_isa_version, srcs, dsts,
                      **kwargs):
    """Not runnable in trnsim: it calls ``function_name`` of a precompiled GpSimd custom-op library
    (``lib_file_name``, machine code for the GpSimd cores), whose behaviour and cost only that binary defines."""
    raise NotImplementedError(
        f"nisa.builtin_custom_op({function_name!r}, {lib_file_name!r}): trnsim cannot run it: the operator is "
        "machine code of a compiled GpSimd custom-op library, which trnsim neither has nor executes, and whose "
        "results and cost nothing published describes.  Write the operator with nki.isa / nki.language "
        "instructions (trnsim runs those), or compute it outside the kernel.")


def gemm_grid():
    """Not runnable: legacy NKI documents it only as the tile definition of a matmul result / moving operand, with
    no arguments, return value or use that a kernel could rely on (a compiler-internal description)."""
    raise NotImplementedError(
        "nl.gemm_grid(): trnsim cannot run it: legacy NKI documents it only as 'the tile definition' of a matmul "
        "result and moving operand, with no return value or behaviour that a kernel can rely on.  Write the tile "
        "shapes explicitly: the moving operand and the result take up to nl.tile_size.pmax (128) partitions and "
        "nl.tile_size.gemm_moving_fmax (512) elements per partition.")


def gemm_stationary_grid():
    """Not runnable: documented only as the tile definition of a matmul's stationary operand (see gemm_grid)."""
    raise NotImplementedError(
        "nl.gemm_stationary_grid(): trnsim cannot run it: legacy NKI documents it only as 'the tile definition' of "
        "a matmul's stationary operand, with no return value or behaviour that a kernel can rely on.  Write the "
        "tile shape explicitly: the stationary operand takes up to nl.tile_size.pmax (128) partitions and "
        "nl.tile_size.gemm_stationary_fmax (128) elements per partition.")
