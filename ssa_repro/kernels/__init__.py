"""Fused attention kernels (Triton; the ``kernels`` extra). Importing this package never imports triton:
the kernels load on first call (:func:`ssa_attention`), so the package works without the extra."""

from ssa_repro.kernels.ssa_attention import KernelUnavailable, ssa_attention, unsupported

__all__ = ["KernelUnavailable", "ssa_attention", "unsupported"]
