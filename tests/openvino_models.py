"""Models of the ``--target openvino`` rules (QL750, QL751, QL753): a 16-bit Q/DQ pair
after a MatMul, an Add / Mul reading a constant's Q -> DQ, a 16-bit Q/DQ pair ending at
a graph output. Written with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _init(name: str, value: object) -> onnx.TensorProto:
    return nh.from_array(np.asarray(value), name)


def _model(
    nodes: list,
    inits: list,
    opset: int = 21,
    *,
    width: int = 3,
    outputs: tuple[str, ...] = ("y",),
    domain: str = "",
) -> onnx.ModelProto:
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("a", T.FLOAT, [2, 4])],
        [h.make_tensor_value_info(name, T.FLOAT, [2, width]) for name in outputs],
        inits,
    )
    imports = [h.make_opsetid("", opset)] + ([h.make_opsetid(domain, 1)] if domain else [])
    model = h.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return model


def _matmul(domain: str = "") -> tuple[list, list]:
    """a [2, 4] -> Q/DQ uint8 -> MatMul (int8 weight) -> m: the nodes and initializers."""
    weight = np.arange(-6, 6, dtype=np.int8).reshape(4, 3)
    inits = [
        *(_init("xs", np.float32(0.05)), _init("xz", np.uint8(128))),
        *(_init("w", weight), _init("ws", np.float32(0.02)), _init("wz", np.int8(0))),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["a", "xs", "xz"], ["aq"], domain=domain),
        h.make_node("DequantizeLinear", ["aq", "xs", "xz"], ["ad"], domain=domain),
        h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], domain=domain),
        h.make_node("MatMul", ["ad", "wd"], ["m"]),
    ]
    return nodes, inits


def _pair(source: str, out: str, domain: str = "", tag: str = "") -> list:
    """QuantizeLinear -> DequantizeLinear of ``source`` into ``out`` (scale s, zero z)."""
    return [
        h.make_node("QuantizeLinear", [source, "s", "z"], [f"mq{tag}"], domain=domain),
        h.make_node("DequantizeLinear", [f"mq{tag}", "s", "z"], [out], domain=domain),
    ]


def sixteen_bit(
    dtype: str = "uint16",
    zero: int = 0,
    relu: bool = False,
    *,
    domain: str = "",
    shared: bool = False,
) -> onnx.ModelProto:
    """a [2, 4] -> Q/DQ uint8 -> MatMul (int8 weight) [-> Relu] -> Q/DQ of ``dtype``
    (scale 0.001, zero point ``zero``): QL750's examples. ``domain``: every Q/DQ in it
    (com.microsoft: at ai.onnx opset 13). ``shared``: the MatMul's output is a graph
    output too and feeds a second such pair (outputs y, y2, m)."""
    nodes, inits = _matmul(domain)
    inits += [_init("s", np.float32(0.001)), _init("z", np.array(zero, dtype=dtype))]
    if relu:
        nodes.append(h.make_node("Relu", ["m"], ["m0"]))
    source = "m0" if relu else "m"
    nodes += _pair(source, "y", domain)
    outputs = ("y",)
    if shared:
        nodes += _pair(source, "y2", domain, "2")
        outputs = ("y", "y2", "m")
    return _model(nodes, inits, 13 if domain else 21, outputs=outputs, domain=domain)


def sixteen_bit_in_branch(dtype: str = "uint16", zero: int = 0) -> onnx.ModelProto:
    """QL750's case inside both branches of an If (on the sign of a's sum): the MatMul of
    :func:`sixteen_bit` in the main graph, its output read by a Q/DQ of ``dtype`` in each
    branch: through a Neg in one, straight from the enclosing graph in the other."""
    nodes, inits = _matmul()
    inits += [_init("s", np.float32(0.001)), _init("z", np.array(zero, dtype=dtype))]
    inits.append(_init("zero", np.float32(0)))

    def branch(name: str, op: str | None) -> onnx.GraphProto:
        body = [h.make_node(op, ["m"], [f"{name}_m"])] if op else []
        body += _pair(f"{name}_m" if op else "m", f"{name}_y", tag=name)
        out = h.make_tensor_value_info(f"{name}_y", T.FLOAT, [2, 3])
        return h.make_graph(body, name, [], [out])

    nodes += [
        h.make_node("ReduceSum", ["a"], ["total"], keepdims=0),
        h.make_node("Greater", ["total", "zero"], ["positive"]),
        h.make_node(
            "If",
            ["positive"],
            ["y"],
            then_branch=branch("then", "Neg"),
            else_branch=branch("else", None),
        ),
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


#: QL753's sources of a pair: the ops before it (reading x [1, 4, 4, 4] into "p").
_SOURCES = {
    "input": [],
    "output": [h.make_node("Relu", ["x"], ["p"])],  # "p" is a graph output too
    "Relu": [h.make_node("Relu", ["x"], ["p"])],
    "AveragePool": [h.make_node("AveragePool", ["x"], ["p"], kernel_shape=[2, 2])],
    "MaxPool": [h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2])],
    "Split": [h.make_node("Split", ["x"], ["p", "p2"], axis=2, num_outputs=2)],
    "TopK": [h.make_node("TopK", ["x", "k"], ["p", "ti"], axis=2)],
}
#: The shape of "p" (and y) for each source.
_SHAPES = {"AveragePool": [1, 4, 3, 3], "MaxPool": [1, 4, 3, 3], "Split": [1, 4, 2, 4]}


def boundary_pair(
    source: str = "input",
    dtype: str = "uint16",
    *,
    per_axis: bool = False,
    domain: str = "",
    after: str | None = None,
) -> onnx.ModelProto:
    """x [1, 4, 4, 4] -> the ops of ``source`` (:data:`_SOURCES`) -> Q/DQ of ``dtype``
    (scale 0.001, zero point 0; ``per_axis``: 4 scales on axis 1; ``domain``: the Q/DQ's)
    [-> ``after``] -> graph output y: QL753's examples (opset 21)."""
    zero = np.zeros(4 if per_axis else (), dtype=dtype)
    scale = np.full(4 if per_axis else (), 0.001, np.float32)
    attrs = {"axis": 1} if per_axis else {}
    dq_out = "d" if after else "y"
    nodes = [
        *_SOURCES[source],
        h.make_node(
            "QuantizeLinear",
            ["p" if _SOURCES[source] else "x", "s", "z"],
            ["q"],
            domain=domain,
            **attrs,
        ),
        h.make_node("DequantizeLinear", ["q", "s", "z"], [dq_out], domain=domain, **attrs),
    ]
    if after:
        nodes.append(h.make_node(after, ["d"], ["y"]))
    outputs = ["y", "p"] if source == "output" else ["y"]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 4, 4])],
        [
            h.make_tensor_value_info(name, T.FLOAT, _SHAPES.get(source, [1, 4, 4, 4]))
            for name in outputs
        ],
        [_init("s", scale), _init("z", zero), _init("k", np.array([2], np.int64))],
    )
    imports = [h.make_opsetid("", 21)] + ([h.make_opsetid(domain, 1)] if domain else [])
    model = h.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return model
