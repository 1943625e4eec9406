"""The probe's value-compared QOperator nodes: each QOperator operator ``convert --to
qoperator`` writes, fed from a float input through QuantizeLinear and read back through
DequantizeLinear, so ONNX Runtime (default session against ORT_DISABLE_ALL) and OpenVINO
are compared with the ONNX reference evaluator on the same seeded inputs.

The reference is the same node written as Q/DQ around its float operator (each input
dequantized, the float op, the output quantized and dequantized), evaluated by
onnx.reference: it never runs a QLinear kernel, so it does not share a runtime's reading of
one. Keys: :func:`qlrewrite.targets.forms.qoperator_values_key` (the node's form and the
class of its zero points).

QLinearConv, QLinearMatMul and QGemm: uint8 / int8 activations x uint8 / int8 weights,
weights per tensor (zero point 0 or not) and per channel (zero points 0, one nonzero value,
or differing), activation zero points 0 or not. The com.microsoft QLinearAdd, QLinearMul,
QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool, QLinearLeakyRelu,
QLinearSigmoid, QLinearSoftmax: uint8 and int8, the output's zero point mid-range or at
its type's lowest or highest value (one-sided: a result beyond it saturates); the binary
ones also with one input's zero point 0. Inputs are the seeded
[0, 6) values shifted by -3 (two-sided).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from cases import Case
from onnx import helper, numpy_helper

from qlrewrite.qdq import node_views
from qlrewrite.rules.registry import CHECKED_KINDS
from qlrewrite.targets.forms import qoperator_values_key

MS = "com.microsoft"
U8, I8 = np.uint8, np.int8
#: The float values fed are shifted by this (inputs in [-3, 3)).
SHIFT = -3.0
#: The weight zero point classes probed: (granularity, zero points).
WEIGHT_FORMS = (
    ("per-tensor", "zero"),
    ("per-tensor", "nonzero"),
    ("per-channel", "zero"),
    ("per-channel", "nonzero"),
    ("per-channel", "differ"),
)
#: A weight's (zero-point class -> zero points of its 3 channels) per type.
_WEIGHT_ZEROS = {
    U8: {"zero": [0, 0, 0], "nonzero": [128, 128, 128], "differ": [120, 128, 137]},
    I8: {"zero": [0, 0, 0], "nonzero": [5, 5, 5], "differ": [-5, 0, 7]},
}
_CHANNEL_SCALES = np.array([0.01, 0.02, 0.015], np.float32)


def _zero_point(dtype: Any, where: str) -> np.ndarray:
    """An activation's zero point: "zero", "nonzero" (mid-range-ish), "lowest"."""
    info = np.iinfo(dtype)
    value = {
        "zero": 0,
        "nonzero": 128 if dtype == U8 else 10,
        "lowest": info.min,
        "highest": info.max,
    }
    return np.array(value[where], dtype)


def _weight(dtype: Any, shape: Sequence[int], axis: int, granularity: str, zeros: str):
    """A weight of ``dtype``, its scale and zero point (channels on ``axis``)."""
    rng = np.random.default_rng(7)
    channel = np.array(_WEIGHT_ZEROS[dtype][zeros])
    view = [1] * len(shape)
    view[axis] = 3
    info = np.iinfo(dtype)
    values = rng.integers(-20, 21, shape) + channel.reshape(view)
    weight = np.clip(values, info.min, info.max).astype(dtype)
    if granularity == "per-tensor":
        return weight, np.array(0.01, np.float32), np.array(channel[0], dtype)
    return weight, _CHANNEL_SCALES, channel.astype(dtype)


#: Per weight op: (activation shape, weight shape, weight channel axis, output scale,
#: float op, attributes); the bias / C (int32, scale x_scale x w_scale) of Conv and QGemm.
WEIGHT_OPS = {
    "QLinearConv": ((1, 2, 4, 4), (3, 2, 3, 3), 0, 0.1, "Conv", {"pads": [1, 1, 1, 1]}),
    "QLinearMatMul": ((2, 4), (4, 3), 1, 0.04, "MatMul", {}),
    "QGemm": ((2, 4), (3, 4), 0, 0.04, "Gemm", {"transB": 1}),
}
_BIAS = np.array([50, -70, 100], np.int32)


class _Built:
    """The QOperator node's model and its Q/DQ reference, built side by side."""

    def __init__(self, shape: Sequence[int]):
        self.shape = list(shape)
        self.inits: list[onnx.TensorProto] = [
            numpy_helper.from_array(np.array(SHIFT, np.float32), "shift")
        ]
        self.nodes = [helper.make_node("Add", ["a", "shift"], ["a_shifted"])]
        self.ref_nodes = list(self.nodes)

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def activation(
        self, name: str, scale: float, zero: np.ndarray, *, reversed_: bool = False
    ) -> tuple[str, str, str]:
        """Input ``name``: the shifted float input quantized (the reference: dequantized);
        ``reversed_``: read along its last axis backwards (a second input whose product or
        sum with the first has both signs)."""
        s, z = self.const(f"{name}_s", np.array(scale, np.float32)), self.const(f"{name}_z", zero)
        source = "a_shifted"
        if reversed_:
            ends = np.array([np.iinfo(np.int64).min], np.int64)
            bounds = [self.const(n, np.array([v], np.int64)) for n, v in (("r0", -1), ("r2", -1))]
            slice_inputs = [source, bounds[0], self.const("r1", ends), bounds[0], bounds[1]]
            reverse = helper.make_node("Slice", slice_inputs, ["a_reversed"])
            self.nodes.append(reverse)
            self.ref_nodes.append(reverse)
            source = "a_reversed"
        quantize = helper.make_node("QuantizeLinear", [source, s, z], [name])
        self.nodes.append(quantize)
        self.ref_nodes.append(quantize)
        self.ref_nodes.append(helper.make_node("DequantizeLinear", [name, s, z], [f"{name}_f"]))
        return name, s, z

    def dequantized(self, data: str, scale: str, zero: str | None, axis: int = 0) -> str:
        """A constant dequantized in the reference (zero point None: none)."""
        inputs = [data, scale] + ([zero] if zero else [])
        self.ref_nodes.append(
            helper.make_node("DequantizeLinear", inputs, [f"{data}_f"], axis=axis)
        )
        return f"{data}_f"

    def models(self, node: onnx.NodeProto, ref: onnx.NodeProto, y: tuple[str, str], opset: int):
        """The QOperator model and its reference (both output "y", float)."""
        out = helper.make_node("DequantizeLinear", [node.output[0], *y], ["y"])
        q = helper.make_node("QuantizeLinear", [ref.output[0], *y], ["y_q"])
        dq = helper.make_node("DequantizeLinear", ["y_q", *y], ["y"])
        inputs = [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, self.shape)]
        outputs = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)]
        graph = helper.make_graph([*self.nodes, node, out], "g", inputs, outputs, self.inits)
        imports = [helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
        model = helper.make_model(graph, opset_imports=imports, ir_version=8)
        ref_graph = helper.make_graph(
            [*self.ref_nodes, ref, q, dq], "r", inputs, outputs, self.inits
        )
        reference = helper.make_model(ref_graph, opset_imports=[helper.make_opsetid("", 21)])
        return model, reference


def weight_op_models(
    op: str, types: tuple[Any, Any], form: tuple[str, str], x_zero: str, opset: int
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """One QLinearConv / QLinearMatMul / QGemm and its reference."""
    (act, weight), (a_shape, w_shape, axis, y_scale, float_op, attrs) = types, WEIGHT_OPS[op]
    built = _Built(a_shape)
    x, xs, xz = built.activation("x", 0.05, _zero_point(act, x_zero))
    w, ws, wz = _weight(weight, w_shape, axis, *form)
    names = [built.const("w", w), built.const("w_s", ws), built.const("w_z", wz)]
    y = (
        built.const("y_s", np.array(y_scale, np.float32)),
        built.const("y_z", _zero_point(act, "nonzero")),
    )
    wf = built.dequantized(*names, axis=axis)
    bias = []
    if op != "QLinearMatMul":
        bias = [built.const("bias", _BIAS)]
        built.const("bias_s", (0.05 * ws).astype(np.float32))
        bias_f = built.dequantized("bias", "bias_s", None, axis=0)
    domain = MS if op == "QGemm" else ""
    after_weight = [*bias, *y] if op == "QGemm" else [*y, *bias]
    inputs = [x, xs, xz, *names, *after_weight]
    node = helper.make_node(op, inputs, ["y_int"], name="node", domain=domain, **attrs)
    ref_inputs = ["x_f", wf, *([bias_f] if bias else [])]
    ref = helper.make_node(float_op, ref_inputs, ["y_float"], **attrs)
    return built.models(node, ref, y, opset)


#: Per com.microsoft op without weights: (activation count, input shape, float op,
#: attributes of the QLinear node, attributes of the float op, output scale).
ACTIVATION_OPS = {
    "QLinearAdd": (2, (2, 3), "Add", {}, {}, 0.1),
    "QLinearMul": (2, (2, 3), "Mul", {}, {}, 0.1),
    "QLinearConcat": (2, (2, 3), "Concat", {"axis": 1}, {"axis": 1}, 0.1),
    "QLinearAveragePool": (
        1,
        (1, 3, 2, 2),
        "AveragePool",
        {"kernel_shape": [2, 2]},
        {"kernel_shape": [2, 2]},
        0.03,
    ),
    "QLinearGlobalAveragePool": (
        1,
        (1, 3, 2, 2),
        "GlobalAveragePool",
        {"channels_last": 0},
        {},
        0.03,
    ),
    "QLinearLeakyRelu": (1, (1, 3, 2, 2), "LeakyRelu", {"alpha": 0.1}, {"alpha": 0.1}, 0.03),
    "QLinearSigmoid": (1, (1, 3, 2, 2), "Sigmoid", {}, {}, 0.01),
    "QLinearSoftmax": (1, (1, 3, 2, 2), "Softmax", {"opset": 13, "axis": -1}, {"axis": -1}, 0.01),
}


def activation_op_models(
    op: str, act: Any, y_zero: str, opset: int, x_zeros: tuple[str, str] = ("nonzero",) * 2
) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """One com.microsoft QLinear* of :data:`ACTIVATION_OPS` and its reference (inputs'
    scales 0.05 and 0.02, zero points ``x_zeros``)."""
    count, shape, float_op, attrs, float_attrs, y_scale = ACTIVATION_OPS[op]
    built = _Built(shape)
    triples = [
        built.activation(name, scale, _zero_point(act, zero), reversed_=name == "B")
        for name, scale, zero in zip("AB"[:count], (0.05, 0.02), x_zeros, strict=False)
    ]
    y = (
        built.const("y_s", np.array(y_scale, np.float32)),
        built.const("y_z", _zero_point(act, y_zero)),
    )
    flat = [name for triple in triples for name in triple]
    inputs = [*y, *flat] if op == "QLinearConcat" else [*flat, *y]
    node = helper.make_node(op, inputs, ["y_int"], name="node", domain=MS, **attrs)
    ref = helper.make_node(float_op, [f"{t[0]}_f" for t in triples], ["y_float"], **float_attrs)
    return built.models(node, ref, y, opset)


def _keyed(model: onnx.ModelProto, reference: onnx.ModelProto) -> Case | None:
    ir_model = ir.serde.deserialize_model(model)
    for site, views in node_views(ir_model, kinds=CHECKED_KINDS):
        if site.node.name == "node":
            key = qoperator_values_key(views[0])
            if key is None:
                return None
            shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            return Case(key, model, [("a", "float32", shape)], compare=[shape], reference=reference)
    return None


def qoperator_value_cases() -> Iterator[Case]:
    """Every weight op x types x weight form x activation zero point, then every
    activation op x type x output zero point (the binary ones also with one input's zero
    point 0); at ai.onnx opset 13."""
    types = (U8, I8)
    for op, act, weight, form, x_zero in itertools.product(
        WEIGHT_OPS, types, types, WEIGHT_FORMS, ("zero", "nonzero")
    ):
        case = _keyed(*weight_op_models(op, (act, weight), form, x_zero, 13))
        if case is not None:
            yield case
    for op, act, y_zero in itertools.product(
        ACTIVATION_OPS, types, ("nonzero", "lowest", "highest")
    ):
        case = _keyed(*activation_op_models(op, act, y_zero, 13))
        if case is not None:
            yield case
    binary = [op for op, spec in ACTIVATION_OPS.items() if spec[0] == 2]
    for op, act, y_zero, x_zeros in itertools.product(
        binary, types, ("nonzero", "lowest", "highest"), (("nonzero", "zero"), ("zero", "nonzero"))
    ):  # one input after a Relu (uint8: zero point 0), as ORT's quantizer writes it
        case = _keyed(*activation_op_models(op, act, y_zero, 13, x_zeros))
        if case is not None:
            yield case
