"""The weight-only family: com.microsoft MatMulNBits / GatherBlockQuantized to standard
ONNX (:mod:`~qlrewrite.passes.nbits.to_onnx`) and back where exact
(:mod:`~qlrewrite.passes.nbits.from_onnx`), their weights repacked while the output is
written (:mod:`~qlrewrite.passes.nbits.tensor`)."""

from __future__ import annotations

from qlrewrite.passes.nbits.from_onnx import NBitsFromOnnxPass
from qlrewrite.passes.nbits.to_onnx import NBitsToOnnxPass

__all__ = ["NBitsFromOnnxPass", "NBitsToOnnxPass"]
