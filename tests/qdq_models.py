"""One-node QuantizeLinear / DequantizeLinear models for the check rule tests: the
builders are the rules' examples' (:mod:`example_models`, written with onnx.helper,
output types by hand from the spec, independent of the checker)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from example_models import (
    DQ,
    DT,
    IR_OF_OPSET,
    MS,
    ONNX_VERSIONS,
    Q,
    default_output_type,
    qdq_model,
)

__all__ = [
    "DQ",
    "DT",
    "IR_OF_OPSET",
    "MS",
    "ONNX_VERSIONS",
    "Q",
    "blocked_with_one_element_scale",
    "default_output_type",
    "load_ir",
    "qdq_model",
]


def blocked_with_one_element_scale(case: Mapping[str, Any]) -> bool:
    """A blocked node whose scale has one element: valid by the spec, refused by ORT (which
    takes it as per-tensor); a known disagreement (test_fuzz_qdq's KNOWN)."""
    return bool(
        case["attrs"].get("block_size", 0) > 0
        and case["scale_shape"]
        and int(np.prod(case["scale_shape"])) == 1
    )


def load_ir(proto: onnx.ModelProto) -> ir.Model:
    """The onnx_ir model of ``proto`` (as qlrewrite.io.model_io.load would give, minus files)."""
    return ir.serde.deserialize_model(proto)
