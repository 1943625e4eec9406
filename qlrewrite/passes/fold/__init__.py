"""The fold family: QuantizeLinear / DequantizeLinear of constants become constants
(:mod:`~qlrewrite.passes.fold.fold_pass`), their values computed while the output is
written (:mod:`~qlrewrite.passes.fold.tensor`)."""

from __future__ import annotations

from qlrewrite.passes.fold.fold_pass import FLOAT16_MODES, FoldPass, fold

__all__ = ["FLOAT16_MODES", "FoldPass", "fold"]
