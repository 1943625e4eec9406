"""A 26-node QDQ CNN as ONNX Runtime's quantizer writes one, built in code (no downloads):
the model of the quiet-output snapshots and of the API / command-line parity tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["cnn26"]


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _qdq(nodes: list, inits: list, x: str, name: str, zp: int) -> str:
    """QuantizeLinear -> DequantizeLinear of activation ``x`` (uint8, zero point ``zp``)."""
    inits += [_init(f"{name}_s", np.float32(0.05)), _init(f"{name}_zp", np.uint8(zp))]
    nodes.append(
        helper.make_node(
            "QuantizeLinear", [x, f"{name}_s", f"{name}_zp"], [f"{name}_q"], name=f"{name}_Q"
        )
    )
    nodes.append(
        helper.make_node(
            "DequantizeLinear",
            [f"{name}_q", f"{name}_s", f"{name}_zp"],
            [f"{name}_dq"],
            name=f"{name}_DQ",
        )
    )
    return f"{name}_dq"


def _conv(nodes: list, inits: list, x: str, name: str, *, cin: int, cout: int) -> str:
    """DQ(int8 weight), DQ(int32 bias) -> Conv -> Relu -> Q/DQ: six nodes."""
    rng = np.random.default_rng(len(nodes))
    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    inits += [
        _init(f"{name}_w", w),
        _init(f"{name}_ws", np.float32(0.01)),
        _init(f"{name}_b", rng.integers(-500, 500, cout).astype(np.int32)),
        _init(f"{name}_bs", np.float32(0.0005)),
    ]
    nodes += [
        helper.make_node(
            "DequantizeLinear", [f"{name}_w", f"{name}_ws"], [f"{name}_wf"], name=f"{name}_wDQ"
        ),
        helper.make_node(
            "DequantizeLinear", [f"{name}_b", f"{name}_bs"], [f"{name}_bf"], name=f"{name}_bDQ"
        ),
        helper.make_node(
            "Conv",
            [x, f"{name}_wf", f"{name}_bf"],
            [f"{name}_c"],
            name=f"{name}_Conv",
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"], name=f"{name}_Relu"),
    ]
    return _qdq(nodes, inits, f"{name}_r", f"{name}_out", 0)


def cnn26() -> onnx.ModelProto:
    """A 26-node QDQ CNN as ONNX Runtime's quantizer writes one (uint8 activations with
    zero points, int8 weights, int32 biases), at opset 21 and IR 10: three Conv blocks, a
    Flatten and a MatMul classifier."""
    nodes: list = []
    inits: list = []
    x = _qdq(nodes, inits, "x", "x", 128)
    x = _conv(nodes, inits, x, "c1", cin=3, cout=8)
    x = _conv(nodes, inits, x, "c2", cin=8, cout=8)
    x = _conv(nodes, inits, x, "c3", cin=8, cout=4)
    nodes.append(helper.make_node("Flatten", [x], ["flat0"], name="Flatten"))
    flat = _qdq(nodes, inits, "flat0", "flat", 0)
    inits += [
        _init("fc_w", np.ones((4 * 8 * 8, 10), np.int8)),
        _init("fc_ws", np.float32(0.02)),
    ]
    nodes.append(helper.make_node("DequantizeLinear", ["fc_w", "fc_ws"], ["fc_wf"], name="fc_wDQ"))
    nodes.append(helper.make_node("MatMul", [flat, "fc_wf"], ["fc_y"], name="fc_MatMul"))
    inits.append(_init("fc_b", np.zeros(10, np.float32)))
    nodes.append(helper.make_node("Add", ["fc_y", "fc_b"], ["y"], name="fc_Add"))
    graph = helper.make_graph(
        nodes,
        "cnn26",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model
