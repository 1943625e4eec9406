"""Models of the ``--target openvino`` value rules (QL750, QL751): a 16-bit Q/DQ pair
after a MatMul, an Add / Mul reading a constant's Q -> DQ. Written with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _init(name: str, value: object) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value), name)


def _model(nodes: list, inits: list, opset: int = 21, width: int = 3) -> onnx.ModelProto:
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("a", T.FLOAT, [2, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, [2, width])],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def sixteen_bit(dtype: str = "uint16", zero: int = 0, relu: bool = False) -> onnx.ModelProto:
    """a [2, 4] -> Q/DQ uint8 -> MatMul (int8 weight) [-> Relu] -> Q/DQ of ``dtype``
    (scale 0.001, zero point ``zero``): QL750's examples."""
    weight = np.arange(-6, 6, dtype=np.int8).reshape(4, 3)
    inits = [
        *(_init("xs", np.float32(0.05)), _init("xz", np.uint8(128))),
        *(_init("w", weight), _init("ws", np.float32(0.02)), _init("wz", np.int8(0))),
        *(_init("s", np.float32(0.001)), _init("z", np.array(zero, dtype=dtype))),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["a", "xs", "xz"], ["aq"]),
        h.make_node("DequantizeLinear", ["aq", "xs", "xz"], ["ad"]),
        h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
        h.make_node("MatMul", ["ad", "wd"], ["m"]),
    ]
    if relu:
        nodes.append(h.make_node("Relu", ["m"], ["m0"]))
    nodes += [
        h.make_node("QuantizeLinear", ["m0" if relu else "m", "s", "z"], ["mq"]),
        h.make_node("DequantizeLinear", ["mq", "s", "z"], ["y"]),
    ]
    return _model(nodes, inits)


def constant_operand(op: str = "Add", quantized_in_graph: bool = True) -> onnx.ModelProto:
    """op(DQ(Q(a)), DQ(Q(b: float constant))) or op(DQ(Q(a)), DQ(b: int8 constant)), opset
    13: QL751's examples."""
    bias = np.array([0.5, -0.3, 0.2, 0.9], np.float32)
    inits = [
        *(_init("xs", np.float32(0.05)), _init("xz", np.int8(0))),
        *(_init("bs", np.float32(0.01)), _init("bz", np.int8(0))),
        _init("b", bias)
        if quantized_in_graph
        else _init("bq", np.round(bias / 0.01).astype(np.int8)),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["a", "xs", "xz"], ["aq"]),
        h.make_node("DequantizeLinear", ["aq", "xs", "xz"], ["ad"]),
        h.make_node(op, ["ad", "bd"], ["y"]),
    ]
    nodes.insert(0, h.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"]))
    if quantized_in_graph:
        nodes.insert(0, h.make_node("QuantizeLinear", ["b", "bs", "bz"], ["bq"]))
    return _model(nodes, inits, opset=13, width=4)
