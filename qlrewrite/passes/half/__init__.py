"""The half-precision family: float32 -> float16 / bfloat16 that keeps the Q/DQ nodes
valid (:mod:`~qlrewrite.passes.half.half_pass`), the float32 initializers cast lazily
(:mod:`~qlrewrite.passes.half.tensors`)."""

from __future__ import annotations

from qlrewrite.passes.half.half_pass import HALF_TYPES, HalfPass

__all__ = ["HALF_TYPES", "HalfPass"]
