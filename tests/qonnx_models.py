"""QONNX models built in code: ``Quant`` nodes as Brevitas' QONNX export writes them
(``qonnx.custom_op.general``: x, scale, zeropt, bitwidth; ``signed``, ``narrow``,
``rounding_mode``), and the value QONNX's executor computes for them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

QONNX = "qonnx.custom_op.general"


def quant_reference(
    x: np.ndarray, scale: np.ndarray, zeropt: float, bits: int, *, signed: bool, narrow: bool
) -> np.ndarray:
    """``qonnx.custom_op.general.intquant.int_quant`` for rounding ROUND, written out here:
    ``round(clamp(x / scale + zeropt, min, max)) - zeropt`` times scale, in float32."""
    low = -(2 ** (bits - 1)) + narrow if signed else 0
    high = 2 ** (bits - 1) - 1 if signed else 2**bits - 1 - narrow
    y = x / scale + np.float32(zeropt)
    y = np.where(y > high, np.float32(high), y)
    y = np.where(y < low, np.float32(low), y)
    return ((np.round(y) - np.float32(zeropt)) * scale).astype(np.float32)


def quant_model(
    *,
    bits: int,
    signed: bool = True,
    narrow: bool = False,
    scale: np.ndarray | None = None,
    zeropt: float = 0.0,
    opset: int = 13,
    rounding: str = "ROUND",
    weight: np.ndarray | None = None,
) -> onnx.ModelProto:
    """x -> Quant -> Relu -> y (activations); with ``weight`` also MatMul(x', Quant(w))."""
    scale = np.array(0.05, np.float32) if scale is None else scale
    inits = [
        numpy_helper.from_array(scale.astype(np.float32), "s"),
        numpy_helper.from_array(np.array(zeropt, np.float32), "z"),
        numpy_helper.from_array(np.array(float(bits), np.float32), "b"),
    ]
    attrs = {"signed": int(signed), "narrow": int(narrow), "rounding_mode": rounding}
    nodes = [
        helper.make_node(
            "Quant", ["x", "s", "z", "b"], ["xq"], domain=QONNX, name="act_quant", **attrs
        )
    ]
    out = "xq"
    if weight is not None:
        inits.append(numpy_helper.from_array(weight.astype(np.float32), "w"))
        nodes.append(
            helper.make_node(
                "Quant", ["w", "s", "z", "b"], ["wq"], domain=QONNX, name="w_quant", **attrs
            )
        )
        nodes.append(helper.make_node("MatMul", ["xq", "wq"], ["mm"]))
        out = "mm"
    nodes.append(helper.make_node("Relu", [out], ["y"]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(QONNX, 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10 if opset >= 21 else 8)
