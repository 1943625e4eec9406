"""Q/DQ models for ``convert --to qoperator``, built with onnx.helper (no qlrewrite):
one group DequantizeLinear -> op -> QuantizeLinear per model with integer graph input and
output (:func:`group_model`, its parameters drawn by the tests), and a residual CNN
(Conv, Relu, MaxPool, Add residual, GlobalAveragePool, Gemm) for ONNX Runtime's quantizer
(:func:`residual_cnn`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["GROUP_OPS", "Params", "group_model", "residual_cnn", "run_int"]

f32 = np.float32
#: op -> (its float inputs: "a"/"b" activations, "w" weight; attributes; input shape).
GROUP_OPS: dict[str, tuple[tuple[str, ...], dict, tuple[int, ...]]] = {
    "Conv": (("a", "w", "bias"), {"pads": [1, 1, 1, 1]}, (1, 3, 6, 6)),
    "MatMul": (("a", "w"), {}, (4, 16)),
    "Gemm": (("a", "w", "bias"), {"transB": 1}, (4, 16)),
    "Add": (("a", "b"), {}, (2, 3, 4, 5)),
    "Mul": (("a", "b"), {}, (2, 3, 4, 5)),
    "Concat": (("a", "b"), {"axis": 1}, (2, 3, 4, 5)),
    "AveragePool": (("a",), {"kernel_shape": [2, 2]}, (1, 3, 6, 6)),
    "GlobalAveragePool": (("a",), {}, (1, 3, 6, 6)),
    "LeakyRelu": (("a",), {"alpha": 0.1}, (2, 3, 4, 5)),
    "Sigmoid": (("a",), {}, (2, 3, 4, 5)),
    "Softmax": (("a",), {"axis": -1}, (2, 3, 4, 17)),
    "MaxPool": (("a",), {"kernel_shape": [2, 2]}, (1, 3, 6, 6)),
}


@dataclasses.dataclass(frozen=True)
class Params:
    """One group's quantization: activation type, scales and zero points."""

    signed: bool = False
    scales: tuple[float, float, float] = (0.05, 0.07, 0.1)  # a, b, y
    zeros: tuple[int, int, int] = (3, -5, 7)  # offsets from the type's middle (uint8)
    weight_scale: float = 0.02
    per_channel: bool = False
    seed: int = 0
    zero_points: bool = True  # False: every DequantizeLinear / QuantizeLinear without one
    bias: bool = True  # False: Conv / Gemm without a bias


def _q(values: np.ndarray, signed: bool) -> np.ndarray:
    return values.astype(np.int8 if signed else np.uint8)


def _zero(p: Params, index: int) -> np.ndarray:
    middle = 0 if p.signed else 128
    return _q(np.array(middle + p.zeros[index]), p.signed)


def _weight(op: str, shape: tuple[int, ...], p: Params, rng: np.random.Generator) -> list:
    cout = 4
    wshape = {"Conv": (cout, shape[1], 3, 3), "MatMul": (shape[1], cout), "Gemm": (cout, shape[1])}[
        op
    ]
    w = rng.integers(-127, 128, wshape).astype(np.int8)
    channels = cout if p.per_channel else 1
    scale = (p.weight_scale * rng.uniform(0.5, 2, channels)).astype(f32)
    scale = scale if p.per_channel else scale.reshape(())
    axis = 1 if op == "MatMul" else 0
    bias_scale = (f32(p.scales[0]) * scale.astype(f32)).astype(f32)
    bias = rng.integers(-2000, 2000, cout).astype(np.int32)
    return [
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(scale, "w_s"),
        numpy_helper.from_array(np.zeros(scale.shape, np.int8), "w_z"),
        numpy_helper.from_array(bias, "bias_q"),
        numpy_helper.from_array(bias_scale, "bias_s"),
        numpy_helper.from_array(np.zeros(scale.shape, np.int32), "bias_z"),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=axis),
        helper.make_node("DequantizeLinear", ["bias_q", "bias_s", "bias_z"], ["bias"], axis=0),
    ]


def group_model(op: str, p: Params, opset: int = 13, attrs: dict | None = None) -> onnx.ModelProto:
    """Integer input(s) -> DequantizeLinear -> ``op`` -> QuantizeLinear -> integer output
    (``attrs``: the op's attributes instead of GROUP_OPS')."""
    names, default_attrs, shape = GROUP_OPS[op]
    attrs = default_attrs if attrs is None else attrs
    rng = np.random.default_rng(p.seed)
    qtype = TensorProto.INT8 if p.signed else TensorProto.UINT8
    parts: list = []
    if "w" in names:
        parts += _weight(op, shape, p, rng)
    if not p.bias:
        names = tuple(n for n in names if n != "bias")
    if "bias" not in names:  # the bias's two initializers and its DequantizeLinear
        parts = [
            x
            for x in parts
            if "bias" not in getattr(x, "name", "") + str(list(getattr(x, "output", [])))
        ]
    y_scale, y_zero = p.scales[2], _zero(p, 2)
    if op == "Softmax":
        y_scale, y_zero = (
            (1 / 256, _q(np.array(-128), True)) if p.signed else (1 / 255, _q(np.array(0), False))
        )
    if op == "MaxPool":
        y_scale, y_zero = p.scales[0], _zero(p, 0)
    inits = [
        numpy_helper.from_array(np.array(p.scales[0], f32), "a_s"),
        numpy_helper.from_array(_zero(p, 0), "a_z"),
        numpy_helper.from_array(np.array(p.scales[1], f32), "b_s"),
        numpy_helper.from_array(_zero(p, 1), "b_z"),
        numpy_helper.from_array(np.array(y_scale, f32), "y_s"),
        numpy_helper.from_array(y_zero, "y_z"),
    ] + [x for x in parts if isinstance(x, onnx.TensorProto)]
    nodes = [x for x in parts if isinstance(x, onnx.NodeProto)]
    if not p.zero_points:  # other producers leave them out (zero, of the default uint8 / x's type)
        inits = [i for i in inits if not i.name.endswith("_z")]
        for node in nodes:
            del node.input[2:]
    inputs = [i for i in ("a", "b") if i in names]
    zero = ["_z"] if p.zero_points else []
    nodes += [
        helper.make_node("DequantizeLinear", [i + "_q", i + "_s", *[i + z for z in zero]], [i])
        for i in inputs
    ]
    nodes += [
        helper.make_node(op, list(names), ["f"], name="op", **attrs),
        helper.make_node("QuantizeLinear", ["f", "y_s", *[f"y{z}" for z in zero]], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(i + "_q", qtype, shape) for i in inputs],
        [helper.make_tensor_value_info("y", qtype, [f"d{i}" for i in range(len(shape))])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Integer feeds over the whole range of each input's type."""
    rng = np.random.default_rng(seed)
    found = {}
    for value in model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        info = np.iinfo(dtype)
        found[value.name] = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    return found


def run_int(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The first output in ONNX Runtime, ORT_DISABLE_ALL, no prepacking."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(None, inputs)[0])


def residual_cnn(opset: int = 13) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Conv -> Relu -> Conv -> Add(residual) -> Relu ->
    GlobalAveragePool -> Flatten -> Gemm (float, for quantize_static)."""
    rng = np.random.default_rng(5)

    def init(name: str, *shape: int, scale: float = 0.2) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(f32), name)

    inits = [
        init("w1", 8, 3, 3, 3),
        init("b1", 8),
        init("w2", 8, 8, 3, 3),
        init("b2", 8),
        init("w3", 8, 8, 3, 3),
        init("b3", 8),
        init("w4", 10, 8),
        init("b4", 10),
    ]
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"], name="relu1"),
        node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        node("Relu", ["c2"], ["r2"], name="relu2"),
        node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        node("Add", ["c3", "p1"], ["s"], name="residual"),
        node("Relu", ["s"], ["r3"], name="relu3"),
        node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
        node("Flatten", ["g"], ["f"], name="flatten"),
        node("Gemm", ["f", "w4", "b4"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "resnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
