"""The passes each rewriting command runs, in order: one home for the command line and the
Python API (:mod:`qlrewrite.api`), so ``qlrewrite.convert(model, "onnx")`` rewrites what
``qlrewrite convert --to onnx`` rewrites."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from qlrewrite.deployed import Fusions
from qlrewrite.passes.convert_domain import ConvertDomainPass
from qlrewrite.passes.fold import FoldPass
from qlrewrite.passes.nbits_from_onnx import NBitsFromOnnxPass
from qlrewrite.passes.nbits_to_onnx import NBitsToOnnxPass
from qlrewrite.passes.qoperator_to_qdq import QOperatorToQdqPass
from qlrewrite.passes.upgrade import UpgradePass

__all__ = ["convert_passes", "fold_passes", "upgrade_passes"]


def fold_passes(
    *,
    keep_dq: bool = False,
    float16: str = "exact",
    dequantize_weights: bool = False,
    fusions: Fusions | Callable[[ir.Model], Fusions] | None = None,
    keep_fused: bool = False,
) -> list[ir.passes.PassBase]:
    """``qlrewrite fold``: weight-only nodes to MatMul / Gather of float weights (with
    ``dequantize_weights``), then every constant Q/DQ folded (``fusions``: what ONNX
    Runtime makes of the input; ``keep_fused``: leave the DQs it fuses)."""
    fold = FoldPass(keep_dq=keep_dq, float16=float16, fusions=fusions, keep_fused=keep_fused)  # type: ignore[arg-type]
    passes: list[ir.passes.PassBase] = [fold]
    if dequantize_weights:
        passes.insert(0, NBitsToOnnxPass(strict=False, dequantize=True, float16=float16))
    return passes


def convert_passes(
    to: str, *, allow_float16: bool = False, accuracy_level: int = 0
) -> list[ir.passes.PassBase]:
    """``qlrewrite convert --to TO``: to ai.onnx, the QOperator form and the weight-only
    nodes first become Q/DQ; to com.microsoft, exact Q/DQ weights become MatMulNBits /
    GatherBlockQuantized; then the Q/DQ nodes change domain."""
    last = ConvertDomainPass(to, allow_float16=allow_float16)
    if last.to == "onnx":
        return [QOperatorToQdqPass(), NBitsToOnnxPass(), last]
    return [NBitsFromOnnxPass(accuracy_level=accuracy_level), last]


def upgrade_passes(opset: int, *, convert_weight_only: bool = False) -> list[ir.passes.PassBase]:
    """``qlrewrite upgrade --opset N``."""
    return [UpgradePass(opset, convert_weight_only=convert_weight_only)]
